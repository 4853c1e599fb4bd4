// The system agent of a shared workstation: every session's helper reports its idle time over the session socket
// and the agent takes the most active. Two sessions' stand-ins report as `gleaner-agent session-report` does; the
// agent pauses while either is active and computes again once both are idle. The socket is read-only for them:
// what would change the agent is refused, naming the policy file.
#include "E2eCluster.h"
#include "TestSupport.h"

#include "control/ControlConnection.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QTest>

#include <csignal>
#include <sys/stat.h>

using namespace gleaner;
using namespace gleaner::e2e;

class TestSessionIdle : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void pausesWhileAnySessionIsActive();
};

namespace {

constexpr qint64 kAway = 3'600'000; // an hour without input

struct StandIn
{
    QString session;
    std::unique_ptr<agent::ControlConnection> socket;
    Result<QJsonObject> report(qint64 idleMs)
    {
        return socket->call(QStringLiteral("report_idle"),
                            QJsonObject{{QStringLiteral("session"), session},
                                        {QStringLiteral("idle_ms"), double(idleMs)},
                                        {QStringLiteral("source"), QStringLiteral("stand-in")}});
    }
};

} // namespace

void TestSessionIdle::pausesWhileAnySessionIsActive()
{
    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    QVERIFY2(cluster.initCoordinator(), "init");
    QVERIFY2(cluster.startCoordinator(), "serve");
    QJsonObject job = E2eCluster::fashionJob();
    job.insert(QStringLiteral("name"), QStringLiteral("shared-desk"));
    job.insert(QStringLiteral("shards"), 4);
    job.insert(QStringLiteral("local_epochs"), 20); // a subtask outlasts the test
    job.insert(QStringLiteral("deadline_seconds"), 600);
    QVERIFY2(cluster.submitJob(job), "submit");
    auto agent = cluster.enrollAgent(QStringLiteral("shared-desk"));
    QVERIFY2(agent, qPrintable(agent ? QString() : agent.error()));
    const QString dir = cluster.agent(*agent).dir;
    QVERIFY(test::writeFile(dir + QStringLiteral("/preferences.json"),
                            R"({"idle_seconds": 5, "max_cores": 1, "other_cpu_limit_percent": 100})"));
    const QString policy = dir + QStringLiteral("/organisation-policy.json");
    QVERIFY(test::writeFile(policy, R"({"preferences": {"pause_on_battery": true}, "locked": ["pause_on_battery"]})"));
    const QString socketPath = scratch->path() + QStringLiteral("/sessions.sock");
    QVERIFY(cluster.startAgent(*agent, {QStringLiteral("--session-socket"), socketPath, QStringLiteral("--policy-file"),
                                        policy, QStringLiteral("--progress-interval"), QStringLiteral("2"),
                                        QStringLiteral("--keep-on-stop")}));

    StandIn first{QStringLiteral("c1"), nullptr};
    StandIn second{QStringLiteral("c2"), nullptr};
    QVERIFY2(waitUntil(
                 [&] {
                     auto a = agent::ControlConnection::openSocket(socketPath);
                     if (!a)
                         return false;
                     first.socket = std::move(*a);
                     return true;
                 },
                 30'000),
             qPrintable(cluster.agentLog(*agent).right(3000)));
    auto b = agent::ControlConnection::openSocket(socketPath);
    QVERIFY2(b, qPrintable(b ? QString() : b.error()));
    second.socket = std::move(*b);
    struct stat info{};
    QCOMPARE(::stat(QFile::encodeName(socketPath).constData(), &info), 0);
    QCOMPARE(info.st_mode & 0777, mode_t(0666)); // every desk user may report

    // Reads what the agent decided, both stand-ins reporting meanwhile (a report lasts 30 s).
    const auto decided = [&](qint64 firstIdle, qint64 secondIdle, const QStringList& codes, int timeoutMs) {
        QString last;
        const bool reached = waitUntil(
            [&] {
                if (!first.report(firstIdle) || (second.socket && !second.report(secondIdle)))
                    return false;
                auto status = first.socket->call(QStringLiteral("status"));
                if (!status)
                    return false;
                last = status->value(QStringLiteral("reason_code")).toString();
                return codes.contains(last);
            },
            timeoutMs, 300);
        return reached ? QString() : QStringLiteral("reason_code stayed %1, expected %2\n%3")
                                         .arg(last, codes.join(u'|'), cluster.agentLog(*agent).right(3000));
    };

    // Both sessions in use: the agent waits.
    QString failed = decided(0, 0, {QStringLiteral("idle_wait")}, 20'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    auto status = first.socket->call(QStringLiteral("status"));
    QVERIFY2(status, qPrintable(status ? QString() : status.error()));
    QCOMPARE(status->value(QStringLiteral("policy")).toObject().value(QStringLiteral("idle_source")).toString(),
             QStringLiteral("sessions"));
    QCOMPARE(status->value(QStringLiteral("read_only")).toBool(), true);
    // One away, one still there: the most active session decides.
    failed = decided(kAway, 0, {QStringLiteral("idle_wait")}, 20'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    QTest::qWait(1000);
    failed = decided(kAway, 0, {QStringLiteral("idle_wait")}, 5'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    // Both away: it computes.
    failed = decided(kAway, kAway, {QStringLiteral("computing")}, 30'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    // The first comes back: it pauses; away again: it computes.
    failed = decided(0, kAway, {QStringLiteral("user_active")}, 20'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    failed = decided(kAway, kAway, {QStringLiteral("computing")}, 30'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    // Then the second.
    failed = decided(kAway, 0, {QStringLiteral("user_active")}, 20'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    // The second logs out (its helper's connection closes): only the first, away, is left.
    second.socket.reset();
    failed = decided(kAway, 0, {QStringLiteral("computing")}, 30'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));

    // The socket is read-only for desk sessions: every change is refused, naming the policy file.
    for (const QString& command : {QStringLiteral("pause"), QStringLiteral("finish"), QStringLiteral("set_preferences")}) {
        auto refused = first.socket->call(command, QJsonObject{{QStringLiteral("values"),
                                                                QJsonObject{{QStringLiteral("pause_on_battery"), false}}}});
        QVERIFY2(!refused, qPrintable(command));
        QVERIFY2(refused.error().contains(policy), qPrintable(refused.error()));
    }
    // A connection speaks for one session; a malformed report is refused.
    auto other = first.socket->call(QStringLiteral("report_idle"),
                                    QJsonObject{{QStringLiteral("session"), QStringLiteral("c9")},
                                                {QStringLiteral("idle_ms"), 0}});
    QVERIFY(!other);
    QVERIFY2(other.error().contains(QStringLiteral("one connection speaks for one session")), qPrintable(other.error()));
    auto malformed = first.socket->call(QStringLiteral("report_idle"),
                                        QJsonObject{{QStringLiteral("session"), QStringLiteral("../x")},
                                                    {QStringLiteral("idle_ms"), -5}});
    QVERIFY(!malformed);
    auto huge = first.socket->call(QStringLiteral("report_idle"),
                                   QJsonObject{{QStringLiteral("session"), QStringLiteral("c1")},
                                               {QStringLiteral("idle_ms"), 1e300}});
    QVERIFY(!huge);
    // One user cannot take every place on the socket: 8 connections each.
    std::vector<std::unique_ptr<agent::ControlConnection>> more;
    for (int i = 1; i < 8; ++i) {
        auto extra = agent::ControlConnection::openSocket(socketPath);
        QVERIFY2(extra, qPrintable(extra ? QString() : extra.error()));
        more.push_back(std::move(*extra));
    }
    QVERIFY(!agent::ControlConnection::openSocket(socketPath, 2000));
    more.clear();

    // SIGHUP re-reads the policy instead of stopping the agent; a new lock takes effect at once.
    QVERIFY(test::writeFile(policy, R"({"preferences": {"pause_on_battery": true, "idle_seconds": 900},
                                       "locked": ["pause_on_battery", "idle_seconds"]})"));
    ::kill(pid_t(cluster.agentPid(*agent)), SIGHUP);
    QVERIFY2(waitUntil(
                 [&] {
                     auto prefs = first.socket->call(QStringLiteral("preferences"));
                     return prefs && prefs->value(QStringLiteral("locked")).toArray().contains(QStringLiteral("idle_seconds"));
                 },
                 10'000),
             qPrintable(cluster.agentLog(*agent).right(3000)));
    QVERIFY(cluster.agentRunning(*agent));
    QVERIFY2(cluster.agentLog(*agent).contains(QStringLiteral("re-read")), qPrintable(cluster.agentLog(*agent).right(3000)));
    // Away for an hour is more than 900 s: still computing, under the new policy.
    failed = decided(kAway, 0, {QStringLiteral("computing")}, 10'000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed));
    cluster.stopAll();
}

QTEST_GUILESS_MAIN(TestSessionIdle)
#include "TestSessionIdle.moc"
