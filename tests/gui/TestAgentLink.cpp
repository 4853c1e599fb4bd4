// AgentLink against a FakeAgent on a real control socket: what it asks on connecting, how pushed events keep
// its status current, what its actions send, how a refusal reaches the user, that it comes back after the
// agent restarts, and that it starts an agent for an enrolled folder (and says why when that fails).
#include "AgentLink.h"
#include "FakeAgent.h"
#include "GuiTestSupport.h"
#include "TestSupport.h"
#include "control/ControlClient.h"
#include "control/ControlProtocol.h"
#include "control/ControlServer.h"

#include <QDateTime>
#include <QDir>
#include <QJsonArray>
#include <QSignalSpy>
#include <QTest>

using namespace gleaner;
using namespace gleaner::gui;
using namespace gleaner::gui::test;
using gleaner::test::scratchDir;

namespace {

QJsonObject agentEvent(const QString& name, const QJsonObject& members)
{
    return agent::controlEvent(name, members);
}

} // namespace

class TestAgentLink : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void asksForStatusAndPreferencesOnConnecting();
    void pushedEventsKeepTheStatusCurrent();
    void theLogKeepsTheLast200Lines();
    void theAgentsEarlierLogJoinsInTimeOrder();
    void actionsSendTheirCommands();
    void aRefusedActionIsReported();
    void anActionWithoutAgentIsReported();
    void reconnectsAfterTheAgentRestarts();
    void startsAnAgentForAnEnrolledFolder();
    void doesNotStartAnAgentForAFolderNotEnrolled();
    void aStartThatFailsSaysWhy();
    void anAgentThatDoesNotComeUpShowsItsLog();
    void aSilentAgentDoesNotShowAnOlderRunsLog();
};

void TestAgentLink::asksForStatusAndPreferencesOnConnecting()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    agent.setStatus(realisticStatus(dir->path()));
    agent.setLocked({QStringLiteral("idle_seconds")});
    QVERIFY(agent.start(dir->path()).ok());

    AgentLink link(dir->path(), nullptr);
    QSignalSpy connected(&link, &AgentLink::connectedChanged);
    link.start();
    QTRY_VERIFY(link.isConnected());
    QTRY_COMPARE(link.state(), QStringLiteral("training"));
    QCOMPARE(link.reason(), QStringLiteral("Training: the computer has been idle for 12 min"));
    QCOMPARE(link.reasonCode(), QStringLiteral("computing"));
    QCOMPARE(link.status().value(u"subtasks").toArray().size(), 2);
    QTRY_COMPARE(link.preferences().value(u"locked").toArray(), QJsonArray{QStringLiteral("idle_seconds")});
    QCOMPARE(agent.receivedCommands().mid(0, 2),
             (QStringList{QStringLiteral("status"), QStringLiteral("preferences")}));
    QCOMPARE(connected.size(), 1);
    QVERIFY(link.log().last().message.contains(QStringLiteral("Connected to the Gleaner agent")));
}

void TestAgentLink::pushedEventsKeepTheStatusCurrent()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    agent.setStatus(realisticStatus(dir->path()));
    QVERIFY(agent.start(dir->path()).ok());
    AgentLink link(dir->path(), nullptr);
    link.start();
    QTRY_COMPARE(link.state(), QStringLiteral("training"));
    QTRY_COMPARE(agent.server()->subscriberCount(), 1);
    QSignalSpy changed(&link, &AgentLink::changed);

    agent.pushEvent(
        agentEvent(QStringLiteral("state"), {{QStringLiteral("state"), QStringLiteral("waiting")},
                                             {QStringLiteral("reason"), QStringLiteral("On battery")},
                                             {QStringLiteral("reason_code"), QStringLiteral("on_battery")}}));
    QTRY_COMPARE(link.reasonCode(), QStringLiteral("on_battery"));
    QCOMPARE(link.reason(), QStringLiteral("On battery"));
    QVERIFY(changed.size() >= 1);

    agent.pushEvent(
        agentEvent(QStringLiteral("progress"), {{QStringLiteral("lease_id"), QStringLiteral("L-17")},
                                                {QStringLiteral("step"), 700},
                                                {QStringLiteral("of"), 1000}}));
    QTRY_COMPARE(link.status().value(u"subtasks").toArray().at(0).toObject().value(u"step").toInt(), 700);

    agent.pushEvent(
        agentEvent(QStringLiteral("preferences"),
                   {{QStringLiteral("values"), QJsonObject{{QStringLiteral("idle_seconds"), 600}}},
                    {QStringLiteral("locked"), QJsonArray{}}}));
    QTRY_COMPARE(link.preferences().value(u"values").toObject().value(u"idle_seconds").toInt(), 600);

    // A subtask that ends changes the totals, which no event carries: the link asks for the status again.
    agent.clearRequests();
    QJsonObject status = agent.status();
    QJsonObject totals = status.value(u"totals").toObject();
    totals.insert(QStringLiteral("subtasks_done"), 42);
    status.insert(QStringLiteral("totals"), totals);
    status.insert(QStringLiteral("subtasks"), QJsonArray{status.value(u"subtasks").toArray().at(1)});
    agent.setStatus(status);
    agent.pushEvent(
        agentEvent(QStringLiteral("subtask"), {{QStringLiteral("lease_id"), QStringLiteral("L-17")},
                                               {QStringLiteral("state"), QStringLiteral("done")}}));
    QVERIFY(agent.waitForRequest(QStringLiteral("status")));
    QTRY_COMPARE(link.status().value(u"totals").toObject().value(u"subtasks_done").toInt(), 42);
    QCOMPARE(link.status().value(u"subtasks").toArray().size(), 1);
}

void TestAgentLink::theLogKeepsTheLast200Lines()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    QVERIFY(agent.start(dir->path()).ok());
    AgentLink link(dir->path(), nullptr);
    link.start();
    QTRY_VERIFY(link.isConnected());
    QTRY_COMPARE(agent.server()->subscriberCount(), 1);
    for (int i = 0; i < 250; ++i)
        agent.pushEvent(agentEvent(QStringLiteral("log"),
                                   {{QStringLiteral("level"), QStringLiteral("info")},
                                    {QStringLiteral("message"), QStringLiteral("line %1").arg(i)}}));
    QTRY_COMPARE(link.log().last().message, QStringLiteral("line 249"));
    QCOMPARE(link.log().size(), AgentLink::kMaxLogLines);
    QCOMPARE(link.log().first().message, QStringLiteral("line 50"));
    QVERIFY(link.logTotal() >= 251);
}

// The status carries the agent's recent log: lines from before the link connected are shown, in time order,
// and none twice after a reconnection.
void TestAgentLink::theAgentsEarlierLogJoinsInTimeOrder()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    const qint64 past = QDateTime::currentMSecsSinceEpoch() - 60'000;
    const auto line = [](qint64 timeMs, const QString& message) {
        return QJsonObject{{QStringLiteral("level"), QStringLiteral("info")},
                           {QStringLiteral("message"), message},
                           {QStringLiteral("time_ms"), timeMs}};
    };
    QJsonObject status = realisticStatus(dir->path());
    status.insert(QStringLiteral("log"), QJsonArray{line(past, QStringLiteral("agent started")),
                                                    line(past + 1000, QStringLiteral("desktop policy on"))});
    agent.setStatus(status);
    QVERIFY(agent.start(dir->path()).ok());
    AgentLink link(dir->path(), nullptr);
    link.start();
    QTRY_VERIFY(link.isConnected());
    QTRY_VERIFY(link.log().size() >= 3);
    QStringList messages;
    for (const LogLine& l : link.log())
        messages << l.message;
    QCOMPARE(messages.mid(0, 2),
             (QStringList{QStringLiteral("agent started"), QStringLiteral("desktop policy on")}));

    // After the agent comes back, the same history is not shown again.
    agent.stop();
    QTRY_VERIFY(!link.isConnected());
    QVERIFY(agent.start(dir->path()).ok());
    QTRY_VERIFY_WITH_TIMEOUT(link.isConnected(), 15'000);
    QTest::qWait(300); // the status reply after reconnecting
    int shown = 0;
    for (const LogLine& l : link.log())
        shown += l.message == u"agent started" ? 1 : 0;
    QCOMPARE(shown, 1);
}

void TestAgentLink::actionsSendTheirCommands()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    QVERIFY(agent.start(dir->path()).ok());
    AgentLink link(dir->path(), nullptr);
    link.start();
    QTRY_VERIFY(link.isConnected());
    QTRY_COMPARE(link.state(), QStringLiteral("waiting"));

    link.pause();
    QVERIFY(agent.waitForRequest(QStringLiteral("pause")));
    QTRY_COMPARE(link.reasonCode(), QStringLiteral("paused_by_user"));
    link.resume();
    QVERIFY(agent.waitForRequest(QStringLiteral("resume")));
    QTRY_COMPARE(link.state(), QStringLiteral("waiting"));
    link.snooze(3600);
    QVERIFY(agent.waitForRequest(QStringLiteral("snooze")));
    QCOMPARE(agent.lastArgs(QStringLiteral("snooze")), (QJsonObject{{QStringLiteral("seconds"), 3600}}));
    QTRY_COMPARE(link.reasonCode(), QStringLiteral("snoozed"));
    // The status asked after the action brings the snooze's end, which the state event does not carry.
    QTRY_VERIFY(snoozedUntil(link.status()).isValid());
    link.finish();
    QVERIFY(agent.waitForRequest(QStringLiteral("finish")));
    QTRY_COMPARE(link.state(), QStringLiteral("finishing"));
}

void TestAgentLink::aRefusedActionIsReported()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    QVERIFY(agent.start(dir->path()).ok());
    AgentLink link(dir->path(), nullptr);
    link.start();
    QTRY_VERIFY(link.isConnected());
    QSignalSpy failed(&link, &AgentLink::actionFailed);
    link.snooze(0); // the agent refuses 0 seconds
    QTRY_COMPARE(failed.size(), 1);
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(message.startsWith(QStringLiteral("Could not snooze the agent: snooze needs")),
             qPrintable(message));
    QCOMPARE(link.log().last().level, QStringLiteral("error"));
}

void TestAgentLink::anActionWithoutAgentIsReported()
{
    const auto dir = scratchDir();
    AgentLink link(dir->path(), nullptr);
    link.setStartGraceMs(50);
    link.start();
    QSignalSpy failed(&link, &AgentLink::actionFailed);
    link.pause();
    QCOMPARE(failed.size(), 1);
    QVERIFY2(failed.at(0).at(0).toString().startsWith(QStringLiteral("Could not pause the agent: ")),
             qPrintable(failed.at(0).at(0).toString()));
    QCOMPARE(link.state(), QStringLiteral("offline"));
}

void TestAgentLink::reconnectsAfterTheAgentRestarts()
{
    const auto dir = scratchDir();
    FakeAgent agent;
    agent.setStatus(realisticStatus(dir->path()));
    QVERIFY(agent.start(dir->path()).ok());
    AgentLink link(dir->path(), nullptr);
    link.start();
    QTRY_COMPARE(link.state(), QStringLiteral("training"));

    agent.stop();
    QTRY_VERIFY(!link.isConnected());
    QCOMPARE(link.state(), QStringLiteral("offline"));
    QVERIFY2(link.reason().contains(QStringLiteral("not running")), qPrintable(link.reason()));
    // What the agent said about its work stays readable while it is away.
    QCOMPARE(link.status().value(u"totals").toObject().value(u"subtasks_done").toInt(), 41);

    QJsonObject status = agent.status();
    status.insert(QStringLiteral("state"), QStringLiteral("waiting"));
    status.insert(QStringLiteral("reason"), QStringLiteral("no work"));
    agent.setStatus(status);
    agent.clearRequests();
    QVERIFY(agent.start(dir->path()).ok());
    QTRY_VERIFY_WITH_TIMEOUT(link.isConnected(), 10000);
    QTRY_COMPARE(link.state(), QStringLiteral("waiting"));
    QVERIFY(agent.receivedCommands().contains(QStringLiteral("status")));
    // Subscribed again: events come.
    QTRY_COMPARE(agent.server()->subscriberCount(), 1);
    agent.pushEvent(
        agentEvent(QStringLiteral("state"), {{QStringLiteral("state"), QStringLiteral("training")},
                                             {QStringLiteral("reason"), QStringLiteral("idle")}}));
    QTRY_COMPARE(link.state(), QStringLiteral("training"));
}

void TestAgentLink::startsAnAgentForAnEnrolledFolder()
{
    const auto dir = scratchDir();
    QVERIFY(markEnrolled(dir->path()));
    FakeAgent agent;
    FakeLauncher launcher;
    launcher.onStart = [&](const QString& folder) { return agent.start(folder); };
    AgentLink link(dir->path(), &launcher);
    link.setStartGraceMs(100);
    QCOMPARE(link.reason(), QStringLiteral("Connecting to the Gleaner agent…"));
    link.start();
    QTRY_COMPARE(launcher.started, QStringList{dir->path()});
    QTRY_VERIFY(link.isConnected());
    QTRY_COMPARE(link.state(), QStringLiteral("waiting"));

    // Once: an agent that goes away later is not started again behind the user's back.
    agent.stop();
    QTRY_VERIFY(!link.isConnected());
    QTest::qWait(300);
    QCOMPARE(launcher.started.size(), 1);
    // ... but the user can.
    link.startAgent();
    QCOMPARE(launcher.started.size(), 2);
    QTRY_VERIFY(link.isConnected());
}

void TestAgentLink::doesNotStartAnAgentForAFolderNotEnrolled()
{
    const auto dir = scratchDir();
    FakeLauncher launcher;
    AgentLink link(dir->path(), &launcher);
    link.setStartGraceMs(50);
    link.start();
    QTest::qWait(300);
    QVERIFY(launcher.started.isEmpty());
    QCOMPARE(link.state(), QStringLiteral("offline"));
    QCOMPARE(link.reasonCode(), QStringLiteral("not_enrolled"));
    QVERIFY2(link.reason().contains(QStringLiteral("not enrolled")), qPrintable(link.reason()));
}

void TestAgentLink::aStartThatFailsSaysWhy()
{
    const auto dir = scratchDir();
    QVERIFY(markEnrolled(dir->path()));
    FakeLauncher launcher;
    launcher.onStart = [](const QString&) {
        return Status(fail(QStringLiteral("could not run /nowhere/gleaner-agent")));
    };
    AgentLink link(dir->path(), &launcher);
    QSignalSpy failed(&link, &AgentLink::actionFailed);
    link.setStartGraceMs(50);
    link.start();
    QTRY_COMPARE(failed.size(), 1);
    QCOMPARE(link.state(), QStringLiteral("offline"));
    QCOMPARE(link.reason(),
             QStringLiteral("The Gleaner agent could not be started: could not run /nowhere/gleaner-agent."));
}

void TestAgentLink::anAgentThatDoesNotComeUpShowsItsLog()
{
    const auto dir = scratchDir();
    QVERIFY(markEnrolled(dir->path()));
    // The real launcher with a "gleaner-agent" that prints why it cannot start, as the agent does.
    const QString program = dir->filePath(QStringLiteral("fake-agent.sh"));
    QVERIFY(gleaner::test::writeFile(program,
                                     "#!/bin/sh\necho \"gleaner-agent run: /etc/gleaner/policy.json: "
                                     "unknown key \\\"idle\\\"\" >&2\nexit 1\n"));
    QVERIFY(QFile::setPermissions(program, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
    ProcessAgentLauncher launcher(program);
    AgentLink link(dir->path(), &launcher);
    link.setStartGraceMs(50);
    // Long: an agent that exits at once is noticed by its exit, not by this timeout.
    link.setStartTimeoutMs(60000);
    link.start();
    QTRY_COMPARE(link.reasonCode(), QStringLiteral("agent_starting"));
    QTRY_COMPARE_WITH_TIMEOUT(link.reasonCode(), QStringLiteral("agent_start_failed"), 5000);
    QVERIFY2(link.reason().startsWith(QStringLiteral("The Gleaner agent did not start: gleaner-agent run: "
                                                     "/etc/gleaner/policy.json: unknown key \"idle\"")),
             qPrintable(link.reason()));
    QVERIFY2(link.reason().contains(QDir::toNativeSeparators(dir->filePath(QStringLiteral("agent.log")))),
             qPrintable(link.reason()));
    // The program got what `gleaner-agent run` expects.
    const QByteArray log = gleaner::test::readFile(dir->filePath(QStringLiteral("agent.log")));
    QVERIFY2(log.contains(QByteArray(QByteArray("run --data-dir ") + dir->path().toUtf8())), log.constData());
}

void TestAgentLink::aSilentAgentDoesNotShowAnOlderRunsLog()
{
    const auto dir = scratchDir();
    QVERIFY(markEnrolled(dir->path()));
    QVERIFY(gleaner::test::writeFile(dir->filePath(QStringLiteral("agent.log")),
                                     "=== an earlier start\nan old complaint\n"));
    const QString program = dir->filePath(QStringLiteral("fake-agent.sh"));
    QVERIFY(gleaner::test::writeFile(program, "#!/bin/sh\nexit 1\n"));
    QVERIFY(QFile::setPermissions(program, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
    ProcessAgentLauncher launcher(program);
    AgentLink link(dir->path(), &launcher);
    link.setStartGraceMs(50);
    link.setStartTimeoutMs(60000);
    link.start();
    QTRY_COMPARE_WITH_TIMEOUT(link.reasonCode(), QStringLiteral("agent_start_failed"), 5000);
    QVERIFY2(
        link.reason().startsWith(QStringLiteral("The Gleaner agent stopped as soon as it started and wrote "
                                                "nothing to ")),
        qPrintable(link.reason()));
    QVERIFY2(!link.reason().contains(QStringLiteral("old complaint")), qPrintable(link.reason()));
}

QTEST_MAIN(TestAgentLink)
#include "TestAgentLink.moc"
