// The desktop policy's rules (agent/policy/PolicyEngine): one table of situations, each a sequence of
// observations with the decision and the exact reason a volunteer reads for every step. All time comes from
// the observations; nothing sleeps and nothing reads the machine.
#include "TestSupport.h"
#include "policy/PolicyEngine.h"
#include "policy/PreferenceStore.h"

#include <QJsonArray>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

// Monday 2024-01-01 12:00 UTC: the moment step times count from.
const QDateTime kMonday(QDate(2024, 1, 1), QTime(12, 0), Qt::UTC);

// An observation built step by step: by default a desktop on mains power whose user has been away for 10 min,
// with 8 cores and quiet other programs, at kMonday.
struct Obs
{
    Observation o = [] {
        Observation base;
        base.nowMs = kMonday.toMSecsSinceEpoch();
        base.localTime = kMonday;
        base.idle = {true, QStringLiteral("x11"), 600'000, false, {}};
        base.power = {true, false, 100};
        base.cpu = {true, 3.0};
        base.cores = 8;
        return base;
    }();

    operator const Observation&() const { return o; }

    // `seconds` after kMonday, both as nowMs and as the local time.
    Obs at(double seconds) const
    {
        Obs c = *this;
        c.o.nowMs = kMonday.toMSecsSinceEpoch() + qint64(seconds * 1000);
        c.o.localTime = kMonday.addMSecs(qint64(seconds * 1000));
        return c;
    }
    // A local time in the first week of 2024 ("Tue 02:00"; "Mon2" is the Monday after).
    Obs local(const char* dayAndTime) const
    {
        static const QStringList days{QStringLiteral("Mon"), QStringLiteral("Tue"), QStringLiteral("Wed"),
                                      QStringLiteral("Thu"), QStringLiteral("Fri"), QStringLiteral("Sat"),
                                      QStringLiteral("Sun"), QStringLiteral("Mon2")};
        const QStringList parts = QString::fromLatin1(dayAndTime).split(u' ');
        QTime time = QTime::fromString(parts[1], QStringLiteral("HH:mm:ss"));
        if (!time.isValid())
            time = QTime::fromString(parts[1], QStringLiteral("HH:mm"));
        Obs c = *this;
        c.o.localTime = QDateTime(QDate(2024, 1, 1).addDays(days.indexOf(parts[0])), time, Qt::UTC);
        c.o.nowMs = c.o.localTime.toMSecsSinceEpoch();
        return c;
    }
    Obs idle(qint64 ms) const
    {
        Obs c = *this;
        c.o.idle.idleMs = ms;
        return c;
    }
    Obs noIdleSource() const
    {
        Obs c = *this;
        c.o.idle = {};
        return c;
    }
    Obs inhibited(const char* by = "") const
    {
        Obs c = *this;
        c.o.idle.inhibited = true;
        c.o.idle.inhibitedBy = QString::fromUtf8(by);
        return c;
    }
    Obs battery(int percent = -1) const
    {
        Obs c = *this;
        c.o.power = {true, true, percent};
        return c;
    }
    Obs powerUnknown() const
    {
        Obs c = *this;
        c.o.power = {false, true, -1}; // a stale flag without `known` must not count
        return c;
    }
    Obs cpu(double otherPercent) const
    {
        Obs c = *this;
        c.o.cpu = {true, otherPercent};
        return c;
    }
    Obs cpuUnknown() const
    {
        Obs c = *this;
        c.o.cpu = {false, 95};
        return c;
    }
    Obs programs(const QStringList& names) const
    {
        Obs c = *this;
        c.o.pauseProgramsRunning = names;
        return c;
    }
    Obs cores(int n) const
    {
        Obs c = *this;
        c.o.cores = n;
        return c;
    }
};

struct Step
{
    Observation observation;
    QString code;
    QString reason;
};

Step step(const Obs& obs, const char* code, const QString& reason)
{
    return {obs.o, QString::fromLatin1(code), reason};
}

using Steps = QList<Step>;

Decision::Mode modeOf(const QString& code)
{
    if (code == u"computing")
        return Decision::Mode::Compute;
    if (code == u"schedule" || code == u"idle_wait" || code == u"idle_unknown")
        return Decision::Mode::Wait;
    return Decision::Mode::Pause;
}

// The resources of a decision in one line, so a row states them compactly.
QString resources(const Decision& d)
{
    return QStringLiteral("threads=%1 share=%2 memory_mb=%3 gpu=%4 idle=%5")
        .arg(d.threads)
        .arg(d.cpuShare)
        .arg(d.memoryCapBytes / (1024 * 1024))
        .arg(int(d.gpuAllowed))
        .arg(int(d.userIdle));
}

const QString kIdleUnknown =
    QStringLiteral("Waiting: cannot tell whether the computer is in use (no idle source); "
                   "turn off \"only when idle\" to compute anyway");
const QString kComputingAlongside =
    QStringLiteral("Computing: \"only when idle\" is off, so Gleaner computes while you work");
const QString kNoName =
    QStringLiteral("Paused: a program keeps the screen awake (a video or a presentation)");

QString tail(int percent, int limit, const QString& below)
{
    return QStringLiteral(
               "Paused: other programs use %1% of the CPU (limit %2%); resuming once below %3% for 30 s")
        .arg(percent)
        .arg(limit)
        .arg(below);
}

QString busy(int percent, int limit = 25)
{
    return QStringLiteral("Paused: other programs use %1% of the CPU (limit %2%)").arg(percent).arg(limit);
}

} // namespace

Q_DECLARE_METATYPE(Steps)

class TestPolicyEngine : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void decisions_data();
    void decisions();
    void resetForgetsComputing();
    void missingLocalTimeFallsBackToNowMs();
    void formatDuration_data();
    void formatDuration();
};

void TestPolicyEngine::decisions_data()
{
    QTest::addColumn<QByteArray>("policy"); // the organisation's file; empty: none
    QTest::addColumn<QByteArray>("user");   // the user's file; empty: none
    QTest::addColumn<Steps>("steps");
    QTest::addColumn<QString>("resources"); // of the last decision; empty: not checked

    const Obs o;
    const QByteArray none;
    const QString unchecked;
    const QStringList steamObs{QStringLiteral("steam"), QStringLiteral("obs")};

    // --- the idle threshold (180 s by default) ---
    QTest::newRow("idle just below the threshold")
        << none << none
        << Steps{step(o.idle(179'999), "idle_wait",
                      QStringLiteral("Waiting: you were active 2 min 59 s ago, starting after 3 min idle"))}
        << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=0 idle=0");
    QTest::newRow("idle exactly at the threshold")
        << none << none
        << Steps{step(o.idle(180'000), "computing",
                      QStringLiteral("Computing: you have been idle for 3 min"))}
        << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=1 idle=1");
    QTest::newRow("idle above the threshold")
        << none << none
        << Steps{step(o.idle(300'500), "computing",
                      QStringLiteral("Computing: you have been idle for 5 min"))}
        << unchecked;
    QTest::newRow("short threshold, just below")
        << none << QByteArray(R"({"idle_seconds": 10})")
        << Steps{step(o.idle(9'999), "idle_wait",
                      QStringLiteral("Waiting: you were active 9 s ago, starting after 10 s idle"))}
        << unchecked;
    QTest::newRow("short threshold, reached")
        << none << QByteArray(R"({"idle_seconds": 10})")
        << Steps{step(o.idle(10'000), "computing", QStringLiteral("Computing: you have been idle for 10 s"))}
        << unchecked;
    QTest::newRow("hours in the reason")
        << none << QByteArray(R"({"idle_seconds": 5400})")
        << Steps{step(
               o.idle(3'725'000), "idle_wait",
               QStringLiteral("Waiting: you were active 1 h 2 min ago, starting after 1 h 30 min idle"))}
        << unchecked;
    QTest::newRow("days in the reason")
        << none << QByteArray(R"({"idle_seconds": 86400})")
        << Steps{step(o.idle(97'200'000), "computing",
                      QStringLiteral("Computing: you have been idle for 1 d 3 h"))}
        << unchecked;
    QTest::newRow("negative idle time counts as 0")
        << none << none
        << Steps{step(o.idle(-5'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 0 s ago, starting after 3 min idle"))}
        << unchecked;

    // --- the grace period and coming back ---
    QTest::newRow("activity during the grace period restarts the wait")
        << none << none
        << Steps{step(o.at(0).idle(60'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 1 min ago, starting after 3 min idle")),
                 step(o.at(60).idle(2'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 2 s ago, starting after 3 min idle")),
                 step(o.at(240).idle(182'000), "computing",
                      QStringLiteral("Computing: you have been idle for 3 min 2 s"))}
        << unchecked;
    QTest::newRow("coming back while computing is user_active until computing again")
        << none << none
        << Steps{step(o.at(0).idle(200'000), "computing",
                      QStringLiteral("Computing: you have been idle for 3 min 20 s")),
                 step(o.at(5).idle(2'400), "user_active",
                      QStringLiteral("Paused: user active (last input 2 s ago); resuming after 3 min idle")),
                 step(o.at(105).idle(100'000), "user_active",
                      QStringLiteral(
                          "Paused: user active (last input 1 min 40 s ago); resuming after 3 min idle")),
                 step(o.at(185).idle(180'000), "computing",
                      QStringLiteral("Computing: you have been idle for 3 min")),
                 step(o.at(186).idle(500), "user_active",
                      QStringLiteral("Paused: user active (last input 0 s ago); resuming after 3 min idle"))}
        << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=0 idle=0");
    QTest::newRow("another pause in between turns user_active into idle_wait")
        << none << none
        << Steps{step(o.at(0), "computing", QStringLiteral("Computing: you have been idle for 10 min")),
                 step(o.at(5).battery(), "on_battery", QStringLiteral("Paused: on battery")),
                 step(o.at(10).idle(3'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 3 s ago, starting after 3 min idle"))}
        << unchecked;

    // --- the schedule ---
    const QByteArray nights(R"({"schedule": ["mon-fri 22:00-06:00"]})");
    QTest::newRow("schedule: across midnight, inside")
        << none << nights
        << Steps{step(o.local("Tue 02:00"), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("schedule: a minute before the start")
        << none << nights
        << Steps{step(o.local("Mon 21:59"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Mon 22:00"))}
        << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=1 idle=1");
    QTest::newRow("schedule: the end is exclusive")
        << none << nights
        << Steps{step(o.local("Tue 06:00"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Tue 22:00"))}
        << unchecked;
    QTest::newRow("schedule: friday night runs into saturday")
        << none << nights
        << Steps{step(o.local("Sat 05:59:59"), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("schedule: saturday waits for monday")
        << none << nights
        << Steps{step(o.local("Sat 12:00"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Mon 22:00"))}
        << unchecked;
    const QByteArray sundayNight(R"({"schedule": ["sun 22:00-06:00"]})");
    QTest::newRow("schedule: sunday night runs into monday")
        << none << sundayNight
        << Steps{step(o.local("Mon 05:30"), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("schedule: monday morning waits for sunday")
        << none << sundayNight
        << Steps{step(o.local("Mon 06:00"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Sun 22:00"))}
        << unchecked;
    const QByteArray longWeekend(R"({"schedule": ["fri-mon"]})");
    QTest::newRow("schedule: fri-mon on a tuesday")
        << none << longWeekend
        << Steps{step(o.local("Tue 10:00"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Fri 00:00"))}
        << unchecked;
    QTest::newRow("schedule: fri-mon late on monday")
        << none << longWeekend
        << Steps{step(o.local("Mon 23:59"), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    const QByteArray lateWednesday(R"({"schedule": ["wed 20:00-24:00"]})");
    QTest::newRow("schedule: up to 24:00")
        << none << lateWednesday
        << Steps{step(o.local("Wed 23:59:59"), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min")),
                 step(o.local("Thu 00:00"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Wed 20:00"))}
        << unchecked;
    QTest::newRow("schedule comes before battery and programs")
        << none << nights
        << Steps{step(o.local("Wed 12:00").battery().programs(steamObs), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Wed 22:00"))}
        << unchecked;

    // --- power ---
    QTest::newRow("on battery") << none << none
                                << Steps{step(o.battery(), "on_battery",
                                              QStringLiteral("Paused: on battery"))}
                                << unchecked;
    QTest::newRow("on battery, the percent stays out of the reason")
        << none << none << Steps{step(o.battery(54), "on_battery", QStringLiteral("Paused: on battery"))}
        << unchecked;
    QTest::newRow("power unknown does not stop")
        << none << none
        << Steps{step(o.powerUnknown(), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("pause_on_battery off")
        << none << QByteArray(R"({"pause_on_battery": false})")
        << Steps{step(o.battery(20), "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;

    // --- the pause list ---
    QTest::newRow("one program") << none << none
                                 << Steps{step(o.programs({QStringLiteral("steam")}), "program_running",
                                               QStringLiteral("Paused: steam is running"))}
                                 << unchecked;
    QTest::newRow("two programs") << none << none
                                  << Steps{step(o.programs(steamObs), "program_running",
                                                QStringLiteral("Paused: steam and obs are running"))}
                                  << unchecked;
    QTest::newRow("three programs")
        << none << none
        << Steps{step(o.programs(steamObs + QStringList{QStringLiteral("blender")}), "program_running",
                      QStringLiteral("Paused: steam, obs and 1 more are running"))}
        << unchecked;
    QTest::newRow("four programs")
        << none << none
        << Steps{step(
               o.programs(steamObs + QStringList{QStringLiteral("blender"), QStringLiteral("kdenlive")}),
               "program_running", QStringLiteral("Paused: steam, obs and 2 more are running"))}
        << unchecked;
    QTest::newRow("a program name with a percent sign stays as it is")
        << none << none
        << Steps{step(o.programs({QStringLiteral("%3"), QStringLiteral("obs"), QStringLiteral("x")}),
                      "program_running", QStringLiteral("Paused: %3, obs and 1 more are running"))}
        << unchecked;
    QTest::newRow("a program comes before the inhibitor and the user")
        << none << none
        << Steps{step(o.programs({QStringLiteral("steam")}).inhibited("firefox").idle(1'000),
                      "program_running", QStringLiteral("Paused: steam is running"))}
        << unchecked;

    // --- inhibitors ---
    QTest::newRow("inhibitor with a name")
        << none << none
        << Steps{step(o.inhibited("firefox (video playing)"), "inhibited",
                      QStringLiteral("Paused: firefox (video playing) keeps the screen awake"))}
        << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=0 idle=0");
    QTest::newRow("inhibitor without a name")
        << none << none << Steps{step(o.inhibited(), "inhibited", kNoName)} << unchecked;
    QTest::newRow("inhibitor before a short idle time")
        << none << none << Steps{step(o.inhibited().idle(1'000), "inhibited", kNoName)} << unchecked;
    QTest::newRow("respect_inhibitors off")
        << none << QByteArray(R"({"respect_inhibitors": false})")
        << Steps{step(o.inhibited("vlc"), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=1 idle=1");
    QTest::newRow("inhibitor with only_when_idle off")
        << none << QByteArray(R"({"only_when_idle": false})")
        << Steps{step(o.inhibited("vlc"), "computing", kComputingAlongside)}
        << QStringLiteral("threads=7 share=1 memory_mb=1024 gpu=0 idle=0");

    // --- no idle source, and only_when_idle off ---
    QTest::newRow("idle unknown") << none << none
                                  << Steps{step(o.noIdleSource(), "idle_unknown", kIdleUnknown)}
                                  << QStringLiteral("threads=7 share=1 memory_mb=0 gpu=0 idle=0");
    QTest::newRow("idle unknown after computing")
        << none << none
        << Steps{step(o.at(0), "computing", QStringLiteral("Computing: you have been idle for 10 min")),
                 step(o.at(5).noIdleSource(), "idle_unknown", kIdleUnknown)}
        << unchecked;
    QTest::newRow("idle unknown with only_when_idle off")
        << none << QByteArray(R"({"only_when_idle": false, "memory_idle_mb": 4096})")
        << Steps{step(o.noIdleSource(), "computing", kComputingAlongside)}
        << QStringLiteral("threads=7 share=1 memory_mb=4096 gpu=0 idle=0");
    QTest::newRow("user active with only_when_idle off")
        << none << QByteArray(R"({"only_when_idle": false, "memory_active_mb": 512, "memory_idle_mb": 8192})")
        << Steps{step(o.idle(1'000), "computing", kComputingAlongside)}
        << QStringLiteral("threads=7 share=1 memory_mb=512 gpu=0 idle=0");
    QTest::newRow("user away with only_when_idle off")
        << none << QByteArray(R"({"only_when_idle": false, "memory_active_mb": 512, "memory_idle_mb": 8192})")
        << Steps{step(o, "computing", kComputingAlongside)}
        << QStringLiteral("threads=7 share=1 memory_mb=8192 gpu=1 idle=1");

    // --- other programs' CPU (limit 25%: calm at or below 20%) ---
    QTest::newRow("cpu over the limit")
        << none << none << Steps{step(o.cpu(63), "cpu_busy", busy(63))} << unchecked;
    QTest::newRow("cpu at the limit")
        << none << none
        << Steps{step(o.cpu(25), "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("cpu just over the limit reads over it")
        << none << none << Steps{step(o.cpu(25.2), "cpu_busy", busy(26))} << unchecked;
    QTest::newRow("cpu unknown does not stop")
        << none << none
        << Steps{step(o.cpuUnknown(), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("cpu limit 100 never stops")
        << none << QByteArray(R"({"other_cpu_limit_percent": 100})")
        << Steps{step(o.cpu(99), "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("cpu dips but not below 80%")
        << none << none
        << Steps{step(o.at(0).cpu(30), "cpu_busy", busy(30)),
                 step(o.at(10).cpu(22), "cpu_busy", tail(22, 25, QStringLiteral("20"))),
                 step(o.at(60).cpu(21), "cpu_busy", tail(21, 25, QStringLiteral("20")))}
        << unchecked;
    QTest::newRow("cpu calm for 29 s is not enough")
        << none << none
        << Steps{step(o.at(0).cpu(40), "cpu_busy", busy(40)),
                 step(o.at(1).cpu(20), "cpu_busy", tail(20, 25, QStringLiteral("20"))),
                 step(o.at(30).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20")))}
        << unchecked;
    QTest::newRow("cpu calm for 30 s resumes")
        << none << none
        << Steps{step(o.at(0).cpu(40), "cpu_busy", busy(40)),
                 step(o.at(1).cpu(20), "cpu_busy", tail(20, 25, QStringLiteral("20"))),
                 step(o.at(31).cpu(10), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("cpu calm interrupted starts over")
        << none << none
        << Steps{step(o.at(0).cpu(40), "cpu_busy", busy(40)),
                 step(o.at(1).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20"))),
                 step(o.at(20).cpu(23), "cpu_busy", tail(23, 25, QStringLiteral("20"))),
                 step(o.at(40).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20"))),
                 step(o.at(69.999).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20"))),
                 step(o.at(70).cpu(10), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("cpu rising again after resuming stops at once")
        << none << none
        << Steps{step(o.at(0).cpu(40), "cpu_busy", busy(40)),
                 step(o.at(1).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20"))),
                 step(o.at(31).cpu(10), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min")),
                 step(o.at(32).cpu(26), "cpu_busy", busy(26))}
        << unchecked;
    QTest::newRow("cpu calm counts while waiting for idle")
        << none << none
        << Steps{step(o.at(0).cpu(40).idle(1'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 1 s ago, starting after 3 min idle")),
                 step(o.at(1).cpu(5).idle(2'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 2 s ago, starting after 3 min idle")),
                 step(o.at(31).cpu(5).idle(181'000), "computing",
                      QStringLiteral("Computing: you have been idle for 3 min 1 s"))}
        << unchecked;
    QTest::newRow("cpu clock stepping back restarts the calm time")
        << none << none
        << Steps{step(o.at(100).cpu(40), "cpu_busy", busy(40)),
                 step(o.at(101).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20"))),
                 step(o.at(50).cpu(10), "cpu_busy", tail(10, 25, QStringLiteral("20"))),
                 step(o.at(80).cpu(10), "computing",
                      QStringLiteral("Computing: you have been idle for 10 min"))}
        << unchecked;
    QTest::newRow("cpu limit 33: calm below 26.4%")
        << none << QByteArray(R"({"other_cpu_limit_percent": 33})")
        << Steps{step(o.at(0).cpu(50), "cpu_busy", busy(50, 33)),
                 step(o.at(1).cpu(27), "cpu_busy", tail(27, 33, QStringLiteral("26.4")))}
        << unchecked;

    // --- resources ---
    QTest::newRow("one core still gets one thread")
        << none << none
        << Steps{step(o.cores(1), "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << QStringLiteral("threads=1 share=1 memory_mb=0 gpu=1 idle=1");
    QTest::newRow("max_cores 4 of 8")
        << none << QByteArray(R"({"max_cores": 4, "cpu_share_percent": 50})")
        << Steps{step(o, "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << QStringLiteral("threads=4 share=0.5 memory_mb=0 gpu=1 idle=1");
    QTest::newRow("max_cores 16 capped at 8")
        << none << QByteArray(R"({"max_cores": 16, "memory_idle_mb": 2048, "gpu": "never"})")
        << Steps{step(o, "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << QStringLiteral("threads=8 share=1 memory_mb=2048 gpu=0 idle=1");
    QTest::newRow("gpu always while the user works")
        << none << QByteArray(R"({"only_when_idle": false, "gpu": "always", "cpu_share_percent": 10})")
        << Steps{step(o.idle(500).cores(2), "computing", kComputingAlongside)}
        << QStringLiteral("threads=1 share=0.1 memory_mb=1024 gpu=1 idle=0");

    // --- the organisation's locks, through PreferenceStore ---
    const QByteArray lockedIdle(R"({"preferences": {"idle_seconds": 600}, "locked": ["idle_seconds"]})");
    QTest::newRow("locked idle_seconds beats the user's")
        << lockedIdle << QByteArray(R"({"idle_seconds": 10})")
        << Steps{step(o.idle(300'000), "idle_wait",
                      QStringLiteral("Waiting: you were active 5 min ago, starting after 10 min idle"))}
        << unchecked;
    QTest::newRow("unlocked organisation value yields to the user's")
        << QByteArray(R"({"preferences": {"idle_seconds": 600}})") << QByteArray(R"({"idle_seconds": 10})")
        << Steps{step(o.idle(11'000), "computing", QStringLiteral("Computing: you have been idle for 11 s"))}
        << unchecked;
    QTest::newRow("locked pause_on_battery at its default")
        << QByteArray(R"({"locked": ["pause_on_battery"]})") << QByteArray(R"({"pause_on_battery": false})")
        << Steps{step(o.battery(80), "on_battery", QStringLiteral("Paused: on battery"))} << unchecked;
    QTest::newRow("locked schedule")
        << QByteArray(R"({"preferences": {"schedule": ["sat,sun"]}, "locked": ["schedule"]})")
        << QByteArray(R"({"schedule": []})")
        << Steps{step(o.local("Wed 09:15"), "schedule",
                      QStringLiteral("Waiting: outside your schedule; next start Sat 00:00"))}
        << unchecked;
    QTest::newRow("organisation turns the GPU off, the user sets cores")
        << QByteArray(R"({"preferences": {"gpu": "never", "max_cores": 2}, "locked": ["gpu"]})")
        << QByteArray(R"({"gpu": "always", "max_cores": 3})")
        << Steps{step(o, "computing", QStringLiteral("Computing: you have been idle for 10 min"))}
        << QStringLiteral("threads=3 share=1 memory_mb=0 gpu=0 idle=1");
}

void TestPolicyEngine::decisions()
{
    QFETCH(QByteArray, policy);
    QFETCH(QByteArray, user);
    QFETCH(Steps, steps);
    QFETCH(QString, resources);

    const auto dir = test::scratchDir();
    const QString policyFile = dir->filePath(QStringLiteral("policy.json"));
    const QString userFile = dir->filePath(QStringLiteral("preferences.json"));
    if (!policy.isEmpty())
        QVERIFY(test::writeFile(policyFile, policy));
    if (!user.isEmpty())
        QVERIFY(test::writeFile(userFile, user));
    const Result<PreferenceStore> store = PreferenceStore::open(userFile, policyFile);
    QVERIFY2(store.ok(), qPrintable(store.error()));
    QCOMPARE(store->warnings(), QStringList());

    PolicyEngine engine;
    Decision last;
    for (qsizetype i = 0; i < steps.size(); ++i) {
        last = engine.evaluate(store->current(), steps[i].observation);
        // The step number is part of the compared text, so a failure says which step went wrong.
        QCOMPARE(QStringLiteral("step %1: %2 | %3").arg(i).arg(last.reasonCode, last.reason),
                 QStringLiteral("step %1: %2 | %3").arg(i).arg(steps[i].code, steps[i].reason));
        QCOMPARE(last.mode, modeOf(steps[i].code));
    }
    if (!resources.isEmpty())
        QCOMPARE(::resources(last), resources);
}

void TestPolicyEngine::resetForgetsComputing()
{
    const Preferences prefs;
    const Obs o;
    PolicyEngine engine;
    QCOMPARE(engine.evaluate(prefs, o.at(0)).reasonCode, QStringLiteral("computing"));
    engine.reset();
    // After a reset (a snooze ended, say) activity is a wait, not an interruption.
    QCOMPARE(engine.evaluate(prefs, o.at(1).idle(1'000)).reasonCode, QStringLiteral("idle_wait"));

    // The CPU hysteresis is forgotten too.
    QCOMPARE(engine.evaluate(prefs, o.at(2).cpu(90)).reasonCode, QStringLiteral("cpu_busy"));
    QCOMPARE(engine.evaluate(prefs, o.at(3).cpu(22)).reasonCode, QStringLiteral("cpu_busy"));
    engine.reset();
    QCOMPARE(engine.evaluate(prefs, o.at(4).cpu(22)).reasonCode, QStringLiteral("computing"));

    // The same inputs give the same decision: the engine holds no other state.
    PolicyEngine fresh;
    QCOMPARE(fresh.evaluate(prefs, o.at(5)), engine.evaluate(prefs, o.at(5)));
}

void TestPolicyEngine::missingLocalTimeFallsBackToNowMs()
{
    Preferences prefs;
    QVERIFY(prefs.set(QStringLiteral("schedule"), QJsonArray{QStringLiteral("mon-sun")}).ok());
    Observation observation = Obs().o;
    observation.localTime = QDateTime();
    PolicyEngine engine;
    QCOMPARE(engine.evaluate(prefs, observation).reasonCode, QStringLiteral("computing"));
}

void TestPolicyEngine::formatDuration_data()
{
    QTest::addColumn<qint64>("ms");
    QTest::addColumn<QString>("text");
    QTest::newRow("negative") << qint64(-3'000) << QStringLiteral("0 s");
    QTest::newRow("under a second") << qint64(999) << QStringLiteral("0 s");
    QTest::newRow("seconds, rounded down") << qint64(40'900) << QStringLiteral("40 s");
    QTest::newRow("59 s") << qint64(59'999) << QStringLiteral("59 s");
    QTest::newRow("a minute") << qint64(60'000) << QStringLiteral("1 min");
    QTest::newRow("minutes") << qint64(180'000) << QStringLiteral("3 min");
    QTest::newRow("minutes and seconds") << qint64(90'000) << QStringLiteral("1 min 30 s");
    QTest::newRow("an hour") << qint64(3'600'000) << QStringLiteral("1 h");
    QTest::newRow("hours and minutes, seconds dropped") << qint64(7'530'000) << QStringLiteral("2 h 5 min");
    QTest::newRow("a day") << qint64(86'400'000) << QStringLiteral("1 d");
    QTest::newRow("a day and hours") << qint64(97'200'000) << QStringLiteral("1 d 3 h");
    QTest::newRow("days") << qint64(3 * 86'400'000LL + 1'000) << QStringLiteral("3 d");
}

void TestPolicyEngine::formatDuration()
{
    QFETCH(qint64, ms);
    QFETCH(QString, text);
    QCOMPARE(PolicyEngine::formatDuration(ms), text);
}

QTEST_GUILESS_MAIN(TestPolicyEngine)
#include "TestPolicyEngine.moc"
