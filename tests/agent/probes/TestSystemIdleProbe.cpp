// SystemIdleProbe's choice among idle sources, with fake sources and a fake clock: the first precise answer
// in "auto" order, an imprecise one only when nothing precise answers, a switch when the chosen source stops
// answering, re-probing of better sources every 60 s (not sooner), forced sources, "none", and the inhibitors
// of all sources combined.
#include "idle/IdleProbe.h"
#include "idle/SystemIdleProbe.h"

#include <QElapsedTimer>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

Q_DECLARE_METATYPE(gleaner::agent::IdleReading)

namespace {

IdleReading precise(qint64 ms)
{
    return IdleReading{true, ms, true};
}

IdleReading lowerBound(qint64 ms)
{
    return IdleReading{true, ms, false};
}

// Four fake sources named like the real ones, in "auto" order; the probe owns them, the test keeps pointers.
struct Desk
{
    FakeIdleSource* logind = nullptr;
    FakeIdleSource* mutter = nullptr;
    FakeIdleSource* screensaver = nullptr;
    FakeIdleSource* x11 = nullptr;
    qint64 nowMs = 1'000'000;
    std::unique_ptr<SystemIdleProbe> probe;

    explicit Desk(const QString& preference = QStringLiteral("auto"))
    {
        std::vector<std::unique_ptr<IdleSource>> sources;
        for (FakeIdleSource** slot : {&logind, &mutter, &screensaver, &x11}) {
            static const char* names[] = {"logind", "mutter", "screensaver", "x11"};
            auto source = std::make_unique<FakeIdleSource>(QLatin1String(names[sources.size()]));
            *slot = source.get();
            sources.push_back(std::move(source));
        }
        probe = std::make_unique<SystemIdleProbe>(preference, std::move(sources), [this] { return nowMs; });
    }
    int totalReads() const { return logind->reads + mutter->reads + screensaver->reads + x11->reads; }
};

} // namespace

class TestSystemIdleProbe : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void preferences_data();
    void preferences();
    void noneAsksNothing();
    void autoTakesTheFirstPreciseAnswer_data();
    void autoTakesTheFirstPreciseAnswer();
    void nothingAnswers();
    void switchesWhenTheSourceStopsAnswering();
    void reprobesBetterSourcesEveryMinute();
    void imprecisePickIsReplacedByAPreciseOne();
    void forcedSourceHasNoFallback();
    void inhibitorsOfAllSourcesCombined();
    void unknownPreferenceFallsBackToAuto();
    void realSourcesWithoutADesktop();
    void fakeProbe();
};

void TestSystemIdleProbe::preferences_data()
{
    QTest::addColumn<QString>("preference");
    QTest::addColumn<bool>("ok");
    for (const char* name : {"auto", "none", "logind", "mutter", "screensaver", "x11"})
        QTest::newRow(name) << QString::fromLatin1(name) << true;
    QTest::newRow("wrong case") << "X11" << false;
    QTest::newRow("unknown") << "wayland" << false;
    QTest::newRow("empty") << "" << false;
}

void TestSystemIdleProbe::preferences()
{
    QFETCH(QString, preference);
    QFETCH(bool, ok);
    const Status status = SystemIdleProbe::checkPreference(preference);
    QCOMPARE(status.ok(), ok);
    if (!ok)
        QVERIFY2(status.error().contains(u'"' + preference + u'"') &&
                     status.error().contains(u"auto, none, logind"),
                 qPrintable(status.error()));
    QCOMPARE(SystemIdleProbe::sourceNames(), (QStringList{"logind", "mutter", "screensaver", "x11"}));
}

void TestSystemIdleProbe::noneAsksNothing()
{
    Desk desk(QStringLiteral("none"));
    desk.mutter->next = precise(5000);
    desk.logind->inhibitors = InhibitorReading{true, {"backup"}};
    const IdleObservation observation = desk.probe->sample();
    QVERIFY(!observation.known);
    QVERIFY(!observation.inhibited);
    QCOMPARE(desk.totalReads(), 0);
}

void TestSystemIdleProbe::autoTakesTheFirstPreciseAnswer_data()
{
    QTest::addColumn<IdleReading>("logind");
    QTest::addColumn<IdleReading>("mutter");
    QTest::addColumn<IdleReading>("screensaver");
    QTest::addColumn<IdleReading>("x11");
    QTest::addColumn<QString>("source");
    QTest::addColumn<qint64>("idleMs");

    const IdleReading none;
    QTest::newRow("GNOME: graphical logind is a lower bound, mutter wins")
        << lowerBound(0) << precise(42'000) << none << precise(41'000) << "mutter" << qint64(42'000);
    QTest::newRow("KDE X11: screensaver")
        << lowerBound(0) << none << precise(7'000) << precise(6'900) << "screensaver" << qint64(7'000);
    QTest::newRow("plain X11: x11") << lowerBound(0) << none << none << precise(1'234) << "x11"
                                    << qint64(1'234);
    QTest::newRow("text session: logind precise, first in order")
        << precise(90'000) << precise(1) << none << precise(2) << "logind" << qint64(90'000);
    QTest::newRow("KDE Wayland: only lower bounds, logind's first")
        << lowerBound(0) << none << none << lowerBound(600'000) << "logind" << qint64(0);
    QTest::newRow("mate-screensaver's seconds rank below x11")
        << lowerBound(0) << none << lowerBound(60'000) << precise(65'000) << "x11" << qint64(65'000);
}

void TestSystemIdleProbe::autoTakesTheFirstPreciseAnswer()
{
    Desk desk;
    QFETCH(IdleReading, logind);
    QFETCH(IdleReading, mutter);
    QFETCH(IdleReading, screensaver);
    QFETCH(IdleReading, x11);
    desk.logind->next = logind;
    desk.mutter->next = mutter;
    desk.screensaver->next = screensaver;
    desk.x11->next = x11;
    const IdleObservation observation = desk.probe->sample();
    QVERIFY(observation.known);
    QTEST(observation.source, "source");
    QTEST(observation.idleMs, "idleMs");
    QTEST(desk.probe->currentSource(), "source");
}

void TestSystemIdleProbe::nothingAnswers()
{
    Desk desk;
    const IdleObservation observation = desk.probe->sample();
    QVERIFY(!observation.known);
    QVERIFY(observation.source.isEmpty());
    QCOMPARE(desk.totalReads(), 4);
    // Each later sample searches again: a source may appear at any time.
    desk.x11->next = precise(10);
    QCOMPARE(desk.probe->sample().source, QStringLiteral("x11"));
}

void TestSystemIdleProbe::switchesWhenTheSourceStopsAnswering()
{
    Desk desk;
    desk.mutter->next = precise(3000);
    desk.x11->next = precise(2900);
    QCOMPARE(desk.probe->sample().source, QStringLiteral("mutter"));
    // Kept while it answers: the others are not asked.
    const int x11Reads = desk.x11->reads;
    QCOMPARE(desk.probe->sample().idleMs, qint64(3000));
    QCOMPARE(desk.x11->reads, x11Reads);
    // gnome-shell restarts: mutter is gone for a moment, the same sample answers from the next source.
    desk.mutter->next = {};
    const IdleObservation observation = desk.probe->sample();
    QVERIFY(observation.known);
    QCOMPARE(observation.source, QStringLiteral("x11"));
    QCOMPARE(observation.idleMs, qint64(2900));
}

void TestSystemIdleProbe::reprobesBetterSourcesEveryMinute()
{
    Desk desk;
    desk.x11->next = precise(100);
    QCOMPARE(desk.probe->sample().source, QStringLiteral("x11"));
    desk.mutter->next = precise(200); // the compositor came up after the agent
    const int mutterReads = desk.mutter->reads;
    desk.nowMs += SystemIdleProbe::kReprobeMs - 1;
    QCOMPARE(desk.probe->sample().source, QStringLiteral("x11"));
    QCOMPARE(desk.mutter->reads, mutterReads); // not asked before the minute is up
    desk.nowMs += 1;
    const IdleObservation observation = desk.probe->sample();
    QCOMPARE(observation.source, QStringLiteral("mutter"));
    QCOMPARE(observation.idleMs, qint64(200));
    // Only sources that could rank better are asked again: logind (a text session would be precise and
    // first), not screensaver or x11, and only once per minute however often the daemon samples.
    const int logindReads = desk.logind->reads;
    const int x11Reads = desk.x11->reads;
    const int screensaverReads = desk.screensaver->reads;
    desk.nowMs += 10 * SystemIdleProbe::kReprobeMs;
    for (int i = 0; i < 5; ++i)
        QCOMPARE(desk.probe->sample().source, QStringLiteral("mutter"));
    QCOMPARE(desk.logind->reads, logindReads + 1);
    QCOMPARE(desk.screensaver->reads, screensaverReads);
    QCOMPARE(desk.x11->reads, x11Reads);
}

void TestSystemIdleProbe::imprecisePickIsReplacedByAPreciseOne()
{
    Desk desk;
    desk.logind->next = lowerBound(0);
    QCOMPARE(desk.probe->sample().source, QStringLiteral("logind"));
    // Sources after logind in the order are still better when precise: the x11 server appears.
    desk.x11->next = precise(5000);
    desk.nowMs += SystemIdleProbe::kReprobeMs;
    QCOMPARE(desk.probe->sample().source, QStringLiteral("x11"));
}

void TestSystemIdleProbe::forcedSourceHasNoFallback()
{
    Desk desk(QStringLiteral("x11"));
    desk.mutter->next = precise(1);
    desk.x11->next = precise(777);
    IdleObservation observation = desk.probe->sample();
    QCOMPARE(observation.source, QStringLiteral("x11"));
    QCOMPARE(observation.idleMs, qint64(777));
    desk.x11->next = {};
    observation = desk.probe->sample();
    QVERIFY(!observation.known);
    QVERIFY(observation.source.isEmpty());
    QCOMPARE(desk.mutter->reads, 0);
    QCOMPARE(desk.logind->reads, 0);
}

void TestSystemIdleProbe::inhibitorsOfAllSourcesCombined()
{
    Desk desk;
    desk.x11->next = precise(100); // the idle time comes from X; inhibitors from logind and the session bus
    desk.logind->inhibitors = InhibitorReading{true, {"backup (nightly)", "firefox (video playing)"}};
    desk.screensaver->inhibitors = InhibitorReading{true, {"firefox (video playing)", "mpv"}};
    desk.mutter->inhibitors = InhibitorReading{false, {}};
    IdleObservation observation = desk.probe->sample();
    QCOMPARE(observation.source, QStringLiteral("x11"));
    QVERIFY(observation.inhibited);
    QCOMPARE(observation.inhibitedBy, QStringLiteral("backup (nightly), firefox (video playing), mpv"));

    desk.logind->inhibitors = InhibitorReading{false, {}};
    desk.screensaver->inhibitors.reset(); // its services stopped answering
    // Inhibitors are read every kInhibitorsEveryMs, not at every sample: until then the last reading holds.
    desk.nowMs += SystemIdleProbe::kInhibitorsEveryMs - 1;
    observation = desk.probe->sample();
    QVERIFY(observation.inhibited);
    desk.nowMs += 1;
    observation = desk.probe->sample();
    QVERIFY(!observation.inhibited);
    QVERIFY(observation.inhibitedBy.isEmpty());

    // An inhibitor that does not say who still inhibits.
    desk.screensaver->inhibitors = InhibitorReading{true, {}};
    desk.nowMs += SystemIdleProbe::kInhibitorsEveryMs;
    observation = desk.probe->sample();
    QVERIFY(observation.inhibited);
    QVERIFY(observation.inhibitedBy.isEmpty());
}

void TestSystemIdleProbe::unknownPreferenceFallsBackToAuto()
{
    QTest::ignoreMessage(QtWarningMsg,
                         QRegularExpression(QStringLiteral("unknown idle source \"kde\".*using auto")));
    Desk desk(QStringLiteral("kde"));
    desk.x11->next = precise(5);
    QCOMPARE(desk.probe->sample().source, QStringLiteral("x11"));
}

void TestSystemIdleProbe::realSourcesWithoutADesktop()
{
    // The build machine: no session or system bus, no DISPLAY. Nothing answers, nothing crashes, nothing
    // waits.
    qunsetenv("DISPLAY");
    qputenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/gleaner-test-bus");
    qputenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/gleaner-test-bus");
    SystemIdleProbe probe;
    QElapsedTimer timer;
    timer.start();
    const IdleObservation observation = probe.sample();
    QVERIFY(!observation.known);
    QVERIFY(!observation.inhibited);
    QVERIFY(!probe.sample().known);
    QVERIFY2(timer.elapsed() < 2000, qPrintable(QString::number(timer.elapsed())));
}

void TestSystemIdleProbe::fakeProbe()
{
    FakeIdleProbe probe;
    probe.next = IdleObservation{true, QStringLiteral("x11"), 5000, true, QStringLiteral("mpv")};
    QCOMPARE(probe.sample().inhibitedBy, QStringLiteral("mpv"));
}

QTEST_GUILESS_MAIN(TestSystemIdleProbe)
#include "TestSystemIdleProbe.moc"
