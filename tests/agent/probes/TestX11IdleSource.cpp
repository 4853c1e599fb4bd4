// X11IdleSource against a real Xvfb: the idle time rises while nothing happens and drops when xdotool moves
// the pointer; no DISPLAY, a display nobody serves and an X server killed under an open connection all leave
// the source unavailable and this process alive; the source reconnects to a new server on the same variable.
#include "XvfbServer.h"
#include "idle/X11IdleSource.h"

#include <QDir>
#include <QFile>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

class TestX11IdleSource : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void noDisplayIsUnavailable();
    void deadDisplayIsUnavailable();
    void idleTimeRisesAndInputResetsIt();
    void killedServerLeavesUsAliveAndUnavailable();
    void reconnectsToTheNextServer();
    void waylandSessionMakesItImprecise();
};

void TestX11IdleSource::init()
{
    qunsetenv("DISPLAY");
    qunsetenv("WAYLAND_DISPLAY");
    qunsetenv("XDG_SESSION_TYPE");
}

void TestX11IdleSource::noDisplayIsUnavailable()
{
    X11IdleSource source;
    QVERIFY(!source.readIdle().available);
    QVERIFY2(source.unavailableReason().contains(u"DISPLAY is not set"),
             qPrintable(source.unavailableReason()));
    QVERIFY(!source.connected());
}

void TestX11IdleSource::deadDisplayIsUnavailable()
{
    // A display number without a socket: nobody serves it.
    int number = 4242;
    while (QFile::exists(QStringLiteral("/tmp/.X11-unix/X%1").arg(number)))
        ++number;
    const QString display = QStringLiteral(":%1").arg(number);
    qputenv("DISPLAY", display.toLatin1());
    X11IdleSource source;
    QVERIFY(!source.readIdle().available);
    QVERIFY2(source.unavailableReason().contains(u"cannot connect to the X server " + display),
             qPrintable(source.unavailableReason()));
    QVERIFY(!source.readIdle().available); // tried again, no crash, no hang
}

void TestX11IdleSource::idleTimeRisesAndInputResetsIt()
{
    XvfbServer server;
    if (const QString whyNot = server.start(); !whyNot.isEmpty())
        QSKIP(qPrintable(whyNot));
    if (const QString whyNot = XvfbServer::xdotoolMissing(); !whyNot.isEmpty())
        QSKIP(qPrintable(whyNot));
    qputenv("DISPLAY", server.display().toLatin1());
    X11IdleSource source;

    const IdleReading first = source.readIdle();
    QVERIFY2(first.available, qPrintable(source.unavailableReason()));
    QVERIFY(first.precise);
    QVERIFY(source.connected());
    // Nobody touches this X server: its idle time grows with the clock.
    QTRY_VERIFY_WITH_TIMEOUT(source.readIdle().idleMs >= first.idleMs + 1200, 5000);

    // xdotool's fake input goes through the server's input path like a real mouse (XTEST). The server may
    // handle it a moment after xdotool exits; without it the idle time would stay above 1.2 s and keep
    // growing.
    QVERIFY(server.xdotool({QStringLiteral("mousemove"), QStringLiteral("17"), QStringLiteral("23")}));
    IdleReading afterInput;
    QTRY_VERIFY_WITH_TIMEOUT((afterInput = source.readIdle()).available && afterInput.idleMs < 500, 2000);

    server.kill();
}

void TestX11IdleSource::killedServerLeavesUsAliveAndUnavailable()
{
    XvfbServer server;
    if (const QString whyNot = server.start(); !whyNot.isEmpty())
        QSKIP(qPrintable(whyNot));
    qputenv("DISPLAY", server.display().toLatin1());
    X11IdleSource source;
    QVERIFY2(source.readIdle().available, qPrintable(source.unavailableReason()));
    QVERIFY(source.connected());

    server.kill(); // Xlib would exit() this process on the next call; XCB reports the broken connection
    QVERIFY(!server.running());
    QVERIFY(!source.readIdle().available);
    QVERIFY(!source.connected());
    QVERIFY2(source.unavailableReason().contains(u"closed the connection") ||
                 source.unavailableReason().contains(u"cannot connect"),
             qPrintable(source.unavailableReason()));
    // Still here, and asking again is harmless.
    QVERIFY(!source.readIdle().available);
}

void TestX11IdleSource::reconnectsToTheNextServer()
{
    XvfbServer first;
    if (const QString whyNot = first.start(); !whyNot.isEmpty())
        QSKIP(qPrintable(whyNot));
    qputenv("DISPLAY", first.display().toLatin1());
    X11IdleSource source; // reads $DISPLAY at each connection attempt
    QVERIFY(source.readIdle().available);
    first.kill();
    QVERIFY(!source.readIdle().available);

    // The owner logs in again: a new X server, the session's DISPLAY pointing at it.
    XvfbServer second;
    QCOMPARE(second.start(), QString());
    qputenv("DISPLAY", second.display().toLatin1());
    const IdleReading reading = source.readIdle();
    QVERIFY2(reading.available, qPrintable(source.unavailableReason()));
    QVERIFY(reading.idleMs < 60'000);
}

void TestX11IdleSource::waylandSessionMakesItImprecise()
{
    XvfbServer server; // stands in for XWayland
    if (const QString whyNot = server.start(); !whyNot.isEmpty())
        QSKIP(qPrintable(whyNot));
    qputenv("DISPLAY", server.display().toLatin1());
    qputenv("XDG_SESSION_TYPE", "wayland");
    X11IdleSource source;
    const IdleReading reading = source.readIdle();
    QVERIFY(reading.available);
    QVERIFY(!reading.precise);
}

QTEST_GUILESS_MAIN(TestX11IdleSource)
#include "TestX11IdleSource.moc"
