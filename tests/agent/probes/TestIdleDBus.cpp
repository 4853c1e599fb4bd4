// The D-Bus idle sources against a private dbus-daemon, with fake GNOME (Mutter's IdleMonitor, the session
// manager and its inhibitors), KDE (kscreenlocker's org.freedesktop.ScreenSaver, PowerDevil's PolicyAgent)
// and logind services served by this test process on their own connection and thread. The daemon stands in
// for both the session and the system bus. Xvfb provides the x11 source that "auto" must rank below Mutter.
#include "XvfbServer.h"
#include "idle/LogindIdleSource.h"
#include "idle/MutterIdleSource.h"
#include "idle/ScreenSaverIdleSource.h"
#include "idle/SystemIdleProbe.h"

#include <QDBusArgument>
#include <QDBusConnection>
#include <QDBusContext>
#include <QDBusMetaType>
#include <QDBusObjectPath>
#include <QElapsedTimer>
#include <QMutex>
#include <QProcess>
#include <QStandardPaths>
#include <QTest>
#include <QThread>

#include <time.h>

#include <atomic>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

// logind's inhibitor, a(ssssuu), and PowerDevil's inhibition, a(ss), as the fakes send them.
struct FakeInhibitor
{
    QString what, who, why, mode;
    uint uid = 0;
    uint pid = 0;
};
Q_DECLARE_METATYPE(FakeInhibitor)

QDBusArgument& operator<<(QDBusArgument& arg, const FakeInhibitor& i)
{
    arg.beginStructure();
    arg << i.what << i.who << i.why << i.mode << i.uid << i.pid;
    arg.endStructure();
    return arg;
}
const QDBusArgument& operator>>(const QDBusArgument& arg, FakeInhibitor& i)
{
    arg.beginStructure();
    arg >> i.what >> i.who >> i.why >> i.mode >> i.uid >> i.pid;
    arg.endStructure();
    return arg;
}

struct FakeInhibition
{
    QString app, reason;
};
Q_DECLARE_METATYPE(FakeInhibition)

QDBusArgument& operator<<(QDBusArgument& arg, const FakeInhibition& i)
{
    arg.beginStructure();
    arg << i.app << i.reason;
    arg.endStructure();
    return arg;
}
const QDBusArgument& operator>>(const QDBusArgument& arg, FakeInhibition& i)
{
    arg.beginStructure();
    arg >> i.app >> i.reason;
    arg.endStructure();
    return arg;
}

namespace {

qint64 monotonicUs()
{
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return qint64(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
}

} // namespace

class FakeMutter : public QObject, protected QDBusContext
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.gnome.Mutter.IdleMonitor")
public:
    std::atomic<quint64> idleMs{4321};
    std::atomic<bool> hang{false};
public Q_SLOTS:
    quint64 GetIdletime()
    {
        if (hang) {
            setDelayedReply(true); // and never answer: a compositor stuck in a long frame
            return 0;
        }
        return idleMs;
    }
};

class FakeGnomeSession : public QObject
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.gnome.SessionManager")
public Q_SLOTS:
    bool IsInhibited(uint flags) { return (flags & 8) != 0; } // an idle inhibitor exists (Inhibitor1)
    QList<QDBusObjectPath> GetInhibitors()
    {
        return {QDBusObjectPath(QStringLiteral("/org/gnome/SessionManager/Inhibitor1")),
                QDBusObjectPath(QStringLiteral("/org/gnome/SessionManager/Inhibitor2")),
                QDBusObjectPath(QStringLiteral("/org/gnome/SessionManager/Gone"))};
    }
};

class FakeGnomeInhibitor : public QObject
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.gnome.SessionManager.Inhibitor")
public:
    FakeGnomeInhibitor(QString app, QString reason, uint flags) : m_app(app), m_reason(reason), m_flags(flags)
    {
    }
public Q_SLOTS:
    QString GetAppId() { return m_app; }
    QString GetReason() { return m_reason; }
    uint GetFlags() { return m_flags; }

private:
    QString m_app, m_reason;
    uint m_flags;
};

class FakeLogindSession : public QObject
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.freedesktop.login1.Session")
    Q_PROPERTY(QString Type READ type)
    Q_PROPERTY(bool IdleHint READ idleHint)
    Q_PROPERTY(quint64 IdleSinceHintMonotonic READ idleSince)
public:
    void set(const QString& type, bool hint, quint64 sinceUs)
    {
        const QMutexLocker lock(&m_mutex);
        m_type = type;
        m_hint = hint;
        m_since = sinceUs;
    }
    QString type() const
    {
        const QMutexLocker lock(&m_mutex);
        return m_type;
    }
    bool idleHint() const
    {
        const QMutexLocker lock(&m_mutex);
        return m_hint;
    }
    quint64 idleSince() const
    {
        const QMutexLocker lock(&m_mutex);
        return m_since;
    }

private:
    mutable QMutex m_mutex;
    QString m_type = QStringLiteral("x11");
    bool m_hint = false;
    quint64 m_since = 0;
};

class FakeLogindManager : public QObject
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.freedesktop.login1.Manager")
public Q_SLOTS:
    QList<FakeInhibitor> ListInhibitors()
    {
        return {{QStringLiteral("sleep"), QStringLiteral("transmission"), QStringLiteral("downloading"),
                 QStringLiteral("block"), 1000, 42},
                {QStringLiteral("shutdown:sleep:idle"), QStringLiteral("gsd-power"), QStringLiteral("lid"),
                 QStringLiteral("delay"), 1000, 43},
                {QStringLiteral("idle"), QStringLiteral("backup"), QStringLiteral("nightly"),
                 QStringLiteral("block"), 0, 44}};
    }
};

class FakeKdeScreenSaver : public QObject
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.freedesktop.ScreenSaver")
public Q_SLOTS:
    uint GetSessionIdleTime() { return 2500; }
};

class FakePolicyAgent : public QObject
{
    Q_OBJECT
    Q_CLASSINFO("D-Bus Interface", "org.kde.Solid.PowerManagement.PolicyAgent")
public Q_SLOTS:
    bool HasInhibition(uint types) { return (types & 4) != 0; } // ChangeScreenSettings held
    QList<FakeInhibition> ListInhibitions()
    {
        return {{QStringLiteral("vlc"), QStringLiteral("Playing a video")}};
    }
};

class TestIdleDBus : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void init();
    void cleanupTestCase();
    void mutterReadsItsIdleTime();
    void autoPrefersMutterOverX11();
    void inhibitorsOfLogindAndGnomeCombined();
    void logindTextSessionIsPreciseAndFirst();
    void logindGraphicalSessionIsALowerBound();
    void kdeScreenSaverCountsMilliseconds();
    void otherScreenSaverCountsSeconds();
    void hungServiceCostsOneTimeout();

private:
    void serve(const QString& name, bool on);

    QProcess m_daemon;
    QString m_skip;
    QThread m_thread;
    QDBusConnection m_fakes{QString()};
    FakeMutter* m_mutter = nullptr;
    FakeLogindSession* m_session = nullptr;
    QList<QObject*> m_objects;
    XvfbServer m_xvfb;
    QString m_noXvfb;
};

void TestIdleDBus::initTestCase()
{
    if (QStandardPaths::findExecutable(QStringLiteral("dbus-daemon")).isEmpty()) {
        m_skip = QStringLiteral("dbus-daemon is not installed: install the package dbus-daemon");
        return;
    }
    // A private bus: the test never touches the developer's session, and the same daemon plays the system
    // bus.
    m_daemon.start(QStringLiteral("dbus-daemon"), {QStringLiteral("--session"), QStringLiteral("--nofork"),
                                                   QStringLiteral("--print-address")});
    QVERIFY(m_daemon.waitForStarted(10'000));
    QByteArray address;
    while (!address.contains('\n') && m_daemon.waitForReadyRead(10'000))
        address += m_daemon.readAllStandardOutput();
    address = address.trimmed();
    QVERIFY2(!address.isEmpty(), "dbus-daemon did not print its address");
    // Before anything asks Qt for the session or system bus: Qt connects on first use, from these.
    qputenv("DBUS_SESSION_BUS_ADDRESS", address);
    qputenv("DBUS_SYSTEM_BUS_ADDRESS", address);

    qDBusRegisterMetaType<FakeInhibitor>();
    qDBusRegisterMetaType<QList<FakeInhibitor>>();
    qDBusRegisterMetaType<FakeInhibition>();
    qDBusRegisterMetaType<QList<FakeInhibition>>();

    // The fakes live on their own connection and thread: the sources' calls block the main thread until the
    // answer comes (or 200 ms pass), so an answer from the main thread could never come.
    m_fakes = QDBusConnection::connectToBus(QString::fromUtf8(address), QStringLiteral("fakes"));
    QVERIFY2(m_fakes.isConnected(), qPrintable(m_fakes.lastError().message()));
    m_thread.start();
    const auto add = [&](QObject* object, const QString& path) {
        object->moveToThread(&m_thread);
        m_objects.append(object);
        QVERIFY(m_fakes.registerObject(
            path, object, QDBusConnection::ExportAllSlots | QDBusConnection::ExportAllProperties));
    };
    m_mutter = new FakeMutter;
    m_session = new FakeLogindSession;
    add(m_mutter, QStringLiteral("/org/gnome/Mutter/IdleMonitor/Core"));
    add(new FakeGnomeSession, QStringLiteral("/org/gnome/SessionManager"));
    add(new FakeGnomeInhibitor(QStringLiteral("firefox"), QStringLiteral("video playing"), 8 | 4),
        QStringLiteral("/org/gnome/SessionManager/Inhibitor1"));
    add(new FakeGnomeInhibitor(QStringLiteral("transmission"), QStringLiteral("downloading"), 4),
        QStringLiteral("/org/gnome/SessionManager/Inhibitor2"));
    add(m_session, QStringLiteral("/org/freedesktop/login1/session/auto"));
    add(new FakeLogindManager, QStringLiteral("/org/freedesktop/login1"));
    add(new FakeKdeScreenSaver, QStringLiteral("/org/freedesktop/ScreenSaver"));
    add(new FakePolicyAgent, QStringLiteral("/org/kde/Solid/PowerManagement/PolicyAgent"));

    m_noXvfb = m_xvfb.start();
}

void TestIdleDBus::serve(const QString& name, bool on)
{
    if (on)
        QVERIFY2(m_fakes.registerService(name), qPrintable(m_fakes.lastError().message()));
    else
        m_fakes.unregisterService(name);
}

void TestIdleDBus::init()
{
    if (!m_skip.isEmpty())
        QSKIP(qPrintable(m_skip));
    // A GNOME session on X11, unless a test says otherwise.
    m_mutter->idleMs = 4321;
    m_mutter->hang = false;
    m_session->set(QStringLiteral("x11"), false, 0);
    for (const char* name :
         {"org.gnome.Mutter.IdleMonitor", "org.gnome.SessionManager", "org.freedesktop.login1"})
        serve(QLatin1String(name), true);
    for (const char* name :
         {"org.freedesktop.ScreenSaver", "org.kde.screensaver", "org.kde.Solid.PowerManagement.PolicyAgent"})
        serve(QLatin1String(name), false);
    if (m_noXvfb.isEmpty())
        qputenv("DISPLAY", m_xvfb.display().toLatin1());
    else
        qunsetenv("DISPLAY");
}

void TestIdleDBus::cleanupTestCase()
{
    if (m_fakes.isConnected())
        QDBusConnection::disconnectFromBus(QStringLiteral("fakes"));
    m_thread.quit();
    m_thread.wait();
    qDeleteAll(m_objects);
    m_xvfb.kill();
    if (m_daemon.state() == QProcess::Running) {
        m_daemon.kill();
        m_daemon.waitForFinished();
    }
}

void TestIdleDBus::mutterReadsItsIdleTime()
{
    MutterIdleSource source;
    IdleReading reading = source.readIdle();
    QVERIFY(reading.available);
    QVERIFY(reading.precise);
    QCOMPARE(reading.idleMs, qint64(4321));
    m_mutter->idleMs = 12;
    QCOMPARE(source.readIdle().idleMs, qint64(12));
    QVERIFY(!source.readInhibitors()); // GNOME's inhibitors are read by the screensaver source
}

void TestIdleDBus::autoPrefersMutterOverX11()
{
    if (!m_noXvfb.isEmpty())
        QSKIP(qPrintable(m_noXvfb));
    SystemIdleProbe probe(QStringLiteral("auto"));
    IdleObservation observation = probe.sample();
    QVERIFY(observation.known);
    QCOMPARE(observation.source, QStringLiteral("mutter"));
    QCOMPARE(observation.idleMs, qint64(4321));

    // gnome-shell goes away: the X server answers in the same sample.
    serve(QStringLiteral("org.gnome.Mutter.IdleMonitor"), false);
    observation = probe.sample();
    QVERIFY(observation.known);
    QCOMPARE(observation.source, QStringLiteral("x11"));
}

void TestIdleDBus::inhibitorsOfLogindAndGnomeCombined()
{
    SystemIdleProbe probe(QStringLiteral("mutter"));
    IdleObservation observation = probe.sample();
    QCOMPARE(observation.source, QStringLiteral("mutter"));
    QVERIFY(observation.inhibited);
    // logind's idle blocker, then GNOME's idle inhibitor; not the sleep-only, delay-mode or suspend-only
    // ones, and the inhibitor object that vanished is skipped.
    QCOMPARE(observation.inhibitedBy, QStringLiteral("backup (nightly), firefox (video playing)"));

    serve(QStringLiteral("org.gnome.SessionManager"), false);
    serve(QStringLiteral("org.freedesktop.login1"), false);
    SystemIdleProbe fresh(QStringLiteral("mutter"));
    observation = fresh.sample();
    QVERIFY(observation.known);
    QVERIFY(!observation.inhibited);
}

void TestIdleDBus::logindTextSessionIsPreciseAndFirst()
{
    // The agent started from a console login: logind reads the terminal's last access, 7 s ago.
    m_session->set(QStringLiteral("tty"), false, quint64(monotonicUs() - 7'000'000));
    LogindIdleSource source;
    const IdleReading reading = source.readIdle();
    QVERIFY(reading.available);
    QVERIFY(reading.precise);
    QVERIFY2(reading.idleMs >= 7000 && reading.idleMs < 9000, qPrintable(QString::number(reading.idleMs)));

    SystemIdleProbe probe(QStringLiteral("auto"));
    QCOMPARE(probe.sample().source, QStringLiteral("logind"));

    // A terminal logind found nothing on: it does not know.
    m_session->set(QStringLiteral("tty"), false, 0);
    QVERIFY(!LogindIdleSource().readIdle().available);
}

void TestIdleDBus::logindGraphicalSessionIsALowerBound()
{
    LogindIdleSource source;
    IdleReading reading = source.readIdle();
    QVERIFY(reading.available);
    QVERIFY(!reading.precise);
    QCOMPARE(reading.idleMs, qint64(0)); // GNOME has not declared the session idle yet
    m_session->set(QStringLiteral("wayland"), true, quint64(monotonicUs() - 20'000'000));
    reading = source.readIdle();
    QVERIFY(!reading.precise);
    QVERIFY2(reading.idleMs >= 20'000 && reading.idleMs < 22'000,
             qPrintable(QString::number(reading.idleMs)));

    // Nothing precise answers (no Mutter, no X): the lower bound is used, named as logind.
    serve(QStringLiteral("org.gnome.Mutter.IdleMonitor"), false);
    qunsetenv("DISPLAY");
    const IdleObservation observation = SystemIdleProbe(QStringLiteral("auto")).sample();
    QVERIFY(observation.known);
    QCOMPARE(observation.source, QStringLiteral("logind"));
}

void TestIdleDBus::kdeScreenSaverCountsMilliseconds()
{
    serve(QStringLiteral("org.gnome.Mutter.IdleMonitor"), false);
    serve(QStringLiteral("org.gnome.SessionManager"), false);
    for (const char* name :
         {"org.freedesktop.ScreenSaver", "org.kde.screensaver", "org.kde.Solid.PowerManagement.PolicyAgent"})
        serve(QLatin1String(name), true);
    ScreenSaverIdleSource source;
    const IdleReading reading = source.readIdle();
    QVERIFY(reading.available);
    QVERIFY(reading.precise);
    QCOMPARE(reading.idleMs, qint64(2500));
    const std::optional<InhibitorReading> inhibitors = source.readInhibitors();
    QVERIFY(inhibitors);
    QVERIFY(inhibitors->inhibited);
    QCOMPARE(inhibitors->by, QStringList{QStringLiteral("vlc (Playing a video)")});

    // KDE on X11: "auto" takes it over x11 (and over the graphical logind session).
    SystemIdleProbe probe(QStringLiteral("auto"));
    const IdleObservation observation = probe.sample();
    QCOMPARE(observation.source, QStringLiteral("screensaver"));
    QCOMPARE(observation.idleMs, qint64(2500));
    QCOMPARE(observation.inhibitedBy, QStringLiteral("backup (nightly), vlc (Playing a video)"));
}

void TestIdleDBus::otherScreenSaverCountsSeconds()
{
    // xfce4-screensaver, mate-screensaver: the same method, in seconds since the session went idle.
    serve(QStringLiteral("org.gnome.Mutter.IdleMonitor"), false);
    serve(QStringLiteral("org.freedesktop.ScreenSaver"), true);
    ScreenSaverIdleSource source;
    const IdleReading reading = source.readIdle();
    QVERIFY(reading.available);
    QVERIFY(!reading.precise);
    QCOMPARE(reading.idleMs, qint64(2'500'000));
}

void TestIdleDBus::hungServiceCostsOneTimeout()
{
    m_mutter->hang = true;
    MutterIdleSource source;
    QElapsedTimer timer;
    timer.start();
    QVERIFY(!source.readIdle().available);
    const qint64 first = timer.restart();
    QVERIFY2(first >= 150 && first < 2000, qPrintable(QString::number(first)));
    // Left alone now: the next samples do not wait again.
    QVERIFY(!source.readIdle().available);
    QVERIFY(!source.readIdle().available);
    QVERIFY2(timer.elapsed() < 100, qPrintable(QString::number(timer.elapsed())));

    if (m_noXvfb.isEmpty()) {
        SystemIdleProbe probe(QStringLiteral("auto"));
        QCOMPARE(probe.sample().source, QStringLiteral("x11"));
    }
}

QTEST_GUILESS_MAIN(TestIdleDBus)
#include "TestIdleDBus.moc"
