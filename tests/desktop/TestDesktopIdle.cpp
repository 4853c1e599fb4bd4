// The desktop policy end to end, under a private X server (tests/tools/with-xvfb.sh): a real agent in desktop
// mode with a 5-second idle threshold reads the user's idle time from X11, starts training only once the
// pointer has rested, pauses within a second of input with "user active" as the reason, and resumes the same
// worker from where it paused once the pointer has rested again.

#include "DesktopSupport.h"
#include "TestSupport.h"
#include "policy/Schedule.h"

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QDateTime>
#include <QTest>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {

constexpr int kIdleSeconds = 5;

QJsonObject subtaskOf(const QJsonObject& status, const QString& leaseId)
{
    for (const QJsonValue& value : status.value(QStringLiteral("subtasks")).toArray())
        if (value.toObject().value(QStringLiteral("lease_id")).toString() == leaseId)
            return value.toObject();
    return {};
}

} // namespace

class TestDesktopIdle : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void pausesOnInputAndResumesWhereItStopped();
    void preferencesSnoozeAndTheOrganisationsPolicy();
};

void TestDesktopIdle::pausesOnInputAndResumesWhereItStopped()
{
    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    QVERIFY2(moveThePointer(), "xdotool cannot move the pointer");
    QElapsedTimer sinceInput;
    sinceInput.start();
    // One core, and no CPU limit: other tests running beside this one must not hold the agent back.
    // --keep-on-stop: the restart below is one its owner expects to be short (a logout, a reboot), so the agent
    // keeps its subtask instead of handing it back to the coordinator.
    auto desktop = startDesktopAgent(cluster,
                                     QJsonObject{{QStringLiteral("idle_seconds"), kIdleSeconds},
                                                 {QStringLiteral("max_cores"), 1},
                                                 {QStringLiteral("other_cpu_limit_percent"), 100}},
                                     {QStringLiteral("--keep-on-stop")});
    QVERIFY2(desktop, qPrintable(desktop ? QString() : desktop.error() + cluster.logTails()));
    auto& control = *desktop->control;

    // The agent says where the idle time comes from, and waits while the user was active a moment ago.
    auto status = control.call(QStringLiteral("status"));
    QVERIFY2(status, qPrintable(status ? QString() : status.error()));
    const QJsonObject policy = status->value(QStringLiteral("policy")).toObject();
    QCOMPARE(policy.value(QStringLiteral("idle_source")).toString(), QStringLiteral("x11"));
    QCOMPARE(policy.value(QStringLiteral("dedicated")).toBool(), false);
    if (sinceInput.elapsed() < (kIdleSeconds - 1) * 1000) {
        QCOMPARE(status->value(QStringLiteral("state")).toString(), QStringLiteral("waiting"));
        QCOMPARE(status->value(QStringLiteral("reason_code")).toString(), QStringLiteral("idle_wait"));
    }

    // The pointer rests: after the threshold the agent leases and trains.
    auto training = waitForEvent(
        control,
        [](const QJsonObject& e) {
            return e.value(QStringLiteral("event")).toString() == u"progress" &&
                   e.value(QStringLiteral("step")).toInteger() > 0;
        },
        180'000, QStringLiteral("progress event (training after the idle threshold)"));
    QVERIFY2(training, qPrintable(training ? QString() : training.error() + cluster.logTails()));
    QVERIFY2(sinceInput.elapsed() >= kIdleSeconds * 1000,
             qPrintable(QStringLiteral("trained %1 ms after input").arg(sinceInput.elapsed())));
    const QString lease = training->value(QStringLiteral("lease_id")).toString();
    const QList<qint64> workersBefore = cluster.workerPids(desktop->agent);
    QCOMPARE(workersBefore.size(), 1);

    // Input: the agent pauses within a second and says the user is active.
    drainEvents(control);
    QVERIFY(moveThePointer());
    QElapsedTimer sincePause;
    sincePause.start();
    sinceInput.restart();
    auto paused = waitForEvent(
        control,
        [](const QJsonObject& e) {
            return isStateEvent(e, QStringLiteral("paused"), QStringLiteral("user_active"));
        },
        10'000, QStringLiteral("state paused (user_active)"));
    QVERIFY2(paused, qPrintable(paused ? QString() : paused.error()));
    const qint64 decidedMs = sincePause.elapsed();
    QVERIFY2(paused->value(QStringLiteral("reason")).toString().contains(u"user active"),
             qPrintable(paused->value(QStringLiteral("reason")).toString()));
    QVERIFY2(decidedMs < 1000, qPrintable(QStringLiteral("paused %1 ms after the input").arg(decidedMs)));
    // The worker itself stops between two mini-batches.
    auto workerPaused = waitForEvent(
        control, [](const QJsonObject& e) { return isSubtaskEvent(e, QStringLiteral("paused")); }, 30'000,
        QStringLiteral("subtask paused"));
    QVERIFY2(workerPaused, qPrintable(workerPaused ? QString() : workerPaused.error()));
    qInfo("input to pause decided: %lld ms; to the worker paused: %lld ms", decidedMs, sincePause.elapsed());

    status = control.call(QStringLiteral("status"));
    QVERIFY(status);
    const qint64 pausedAt = subtaskOf(*status, lease).value(QStringLiteral("step")).toInteger();
    QVERIFY(pausedAt > 0);

    // Resting again: training resumes after the threshold, in the same worker, from the same step.
    auto resumed = waitForEvent(
        control, [](const QJsonObject& e) { return isStateEvent(e, QStringLiteral("training")); }, 60'000,
        QStringLiteral("state training after the pause"));
    QVERIFY2(resumed, qPrintable(resumed ? QString() : resumed.error()));
    QVERIFY2(sinceInput.elapsed() >= (kIdleSeconds - 1) * 1000,
             qPrintable(QStringLiteral("resumed %1 ms after input").arg(sinceInput.elapsed())));
    auto progress = waitForEvent(
        control,
        [&](const QJsonObject& e) {
            return e.value(QStringLiteral("event")).toString() == u"progress" &&
                   e.value(QStringLiteral("lease_id")).toString() == lease;
        },
        60'000, QStringLiteral("progress after resuming"));
    QVERIFY2(progress, qPrintable(progress ? QString() : progress.error()));
    const qint64 step = progress->value(QStringLiteral("step")).toInteger();
    QVERIFY2(step >= pausedAt,
             qPrintable(QStringLiteral("step %1 after pausing at %2").arg(step).arg(pausedAt)));
    QCOMPARE(cluster.workerPids(desktop->agent), workersBefore);

    // The agent restarts (a logout, a reboot) while the user is at the machine: the subtask is kept, but no
    // worker starts (not even to load the model) until the pointer has rested again; then it resumes from its
    // checkpoint with the settings it started with.
    desktop->control.reset();
    QVERIFY(cluster.stopAgent(desktop->agent, SIGTERM, 30'000));
    QVERIFY(moveThePointer());
    QVERIFY(cluster.restartAgent(desktop->agent));
    auto reconnected = connectWhenUp(cluster.agent(desktop->agent).dir, 30'000);
    QVERIFY2(reconnected, qPrintable(reconnected ? QString() : reconnected.error()));
    std::unique_ptr<agent::ControlConnection> again = std::move(*reconnected);
    for (int i = 0; i < 3; ++i) { // the user keeps working for a few seconds
        QTest::qWait(1000);
        QVERIFY(moveThePointer());
        QVERIFY2(cluster.workerPids(desktop->agent).isEmpty(), "a worker started while the user was active");
    }
    status = again->call(QStringLiteral("status"));
    QVERIFY(status);
    QCOMPARE(subtaskOf(*status, lease).value(QStringLiteral("state")).toString(), QStringLiteral("paused"));
    auto afterRestart = waitForEvent(
        *again,
        [&](const QJsonObject& e) {
            return e.value(QStringLiteral("event")).toString() == u"progress" &&
                   e.value(QStringLiteral("lease_id")).toString() == lease;
        },
        60'000, QStringLiteral("progress after the restart"));
    QVERIFY2(afterRestart, qPrintable(afterRestart ? QString() : afterRestart.error() + cluster.logTails()));
    QVERIFY(afterRestart->value(QStringLiteral("step")).toInteger() >= pausedAt);
    again.reset();
    cluster.stopAll();
}

// The preferences as an owner and an IT department meet them: `gleaner-agent prefs`, `snooze`, a locked key,
// and a broken policy file that stops the agent instead of being ignored.
void TestDesktopIdle::preferencesSnoozeAndTheOrganisationsPolicy()
{
    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    QVERIFY2(cluster.initCoordinator(), "init");
    QVERIFY2(cluster.startCoordinator(), "serve");
    auto agent = cluster.enrollAgent(QStringLiteral("office"));
    QVERIFY2(agent, qPrintable(agent ? QString() : agent.error()));
    const QString policyFile = scratch->path() + QStringLiteral("/policy.json");

    // A policy file with a typo: the agent refuses to start and names the file and the key.
    test::writeFile(policyFile, R"({"preferences": {"idle_second": 600}})");
    const QStringList options{QStringLiteral("--idle-source"), QStringLiteral("none"),
                              QStringLiteral("--policy-file"), policyFile};
    QVERIFY(cluster.startAgent(*agent, options));
    QVERIFY2(waitUntil([&] { return !cluster.agentRunning(*agent); }, 20'000), "the agent kept running");
    const QString refusal = cluster.agentLog(*agent);
    QVERIFY2(refusal.contains(policyFile) && refusal.contains(u"idle_second"),
             qPrintable(refusal.right(2000)));

    test::writeFile(policyFile, R"({"preferences": {"max_cores": 1, "pause_on_battery": true},
                                   "locked": ["pause_on_battery"]})");
    QVERIFY(cluster.startAgent(*agent, options));
    QVERIFY2(
        waitUntil([&] { return cluster.agentCli(*agent, QStringLiteral("status")).exitCode == 0; }, 30'000),
        qPrintable(cluster.agentLog(*agent).right(2000)));

    auto shown = cluster.agentCli(*agent, QStringLiteral("prefs"), {QStringLiteral("--json")});
    QVERIFY2(shown.exitCode == 0, qPrintable(shown.describe()));
    QCOMPARE(shown.json().value(QStringLiteral("locked")).toArray(),
             QJsonArray{QStringLiteral("pause_on_battery")});
    QCOMPARE(
        shown.json().value(QStringLiteral("values")).toObject().value(QStringLiteral("max_cores")).toInt(),
        1);

    // A locked preference cannot be changed, and the refusal says who set it.
    auto locked = cluster.agentCli(*agent, QStringLiteral("prefs"),
                                   {QStringLiteral("set"), QStringLiteral("pause_on_battery=false")});
    QCOMPARE(locked.exitCode, 1);
    QVERIFY2(locked.err.contains("set by your organisation") && locked.err.contains(policyFile.toUtf8()),
             locked.err.constData());
    // A value out of its limits refuses the whole request.
    auto bad = cluster.agentCli(
        *agent, QStringLiteral("prefs"),
        {QStringLiteral("set"), QStringLiteral("cpu_share_percent=50"), QStringLiteral("idle_seconds=2")});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.contains("idle_seconds"), bad.err.constData());

    auto set =
        cluster.agentCli(*agent, QStringLiteral("prefs"),
                         {QStringLiteral("set"), QStringLiteral("idle_seconds=600"),
                          QStringLiteral("schedule=mon-fri 18:00-08:00;sat,sun"), QStringLiteral("--json")});
    QVERIFY2(set.exitCode == 0, qPrintable(set.describe()));
    const QJsonObject values = set.json().value(QStringLiteral("values")).toObject();
    QCOMPARE(values.value(QStringLiteral("idle_seconds")).toInt(), 600);
    QCOMPARE(values.value(QStringLiteral("schedule")).toArray(),
             (QJsonArray{QStringLiteral("mon-fri 18:00-08:00"), QStringLiteral("sat,sun")}));
    QCOMPARE(values.value(QStringLiteral("cpu_share_percent")).toInt(),
             100); // untouched by the refused request
    // Kept: the owner's file holds what they set, not the organisation's values.
    const QJsonObject kept = QJsonDocument::fromJson(test::readFile(cluster.agent(*agent).dir +
                                                                    QStringLiteral("/preferences.json")))
                                 .object();
    QCOMPARE(kept.value(QStringLiteral("idle_seconds")).toInt(), 600);
    QVERIFY(!kept.contains(QStringLiteral("pause_on_battery")));

    // Snooze pauses with its own reason until resumed.
    auto snooze = cluster.agentCli(*agent, QStringLiteral("snooze"), {QStringLiteral("30")});
    QVERIFY2(snooze.exitCode == 0, qPrintable(snooze.describe()));
    auto status = cluster.agentCli(*agent, QStringLiteral("status"), {QStringLiteral("--json")});
    QCOMPARE(status.json().value(QStringLiteral("state")).toString(), QStringLiteral("paused"));
    QCOMPARE(status.json().value(QStringLiteral("reason_code")).toString(), QStringLiteral("snoozed"));
    QVERIFY(status.json()
                .value(QStringLiteral("policy"))
                .toObject()
                .value(QStringLiteral("snoozed_until_ms"))
                .toDouble() > 0);
    QVERIFY(cluster.agentCli(*agent, QStringLiteral("resume")).exitCode == 0);
    status = cluster.agentCli(*agent, QStringLiteral("status"), {QStringLiteral("--json")});
    QVERIFY(status.json().value(QStringLiteral("reason_code")).toString() != u"snoozed");
    // Without an idle source and with "only when idle" on, the agent cannot know the user is away: it waits.
    // Unless the schedule set above (weekday nights and weekends) rules out this very moment: then it says that.
    const auto schedule = agent::Schedule::parse({QStringLiteral("mon-fri 18:00-08:00"), QStringLiteral("sat,sun")});
    QVERIFY2(schedule.ok(), qPrintable(schedule.error()));
    const bool scheduled = schedule->allows(QDateTime::currentDateTime());
    QCOMPARE(status.json().value(QStringLiteral("reason_code")).toString(),
             scheduled ? QStringLiteral("idle_unknown") : QStringLiteral("schedule"));
    cluster.stopAll();
}

QTEST_GUILESS_MAIN(TestDesktopIdle)
#include "TestDesktopIdle.moc"
