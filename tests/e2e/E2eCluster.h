#pragma once
// A small Gleaner deployment on the loopback interface for end-to-end tests and benchmarks: one real
// gleaner-coordinator process (init, serve, restarted on the same port) and N real gleaner-agent processes,
// each enrolled in its own data folder and training in its own gleaner-worker children, all under one scratch
// folder. Everything is driven as an operator would drive it: the command lines, the logs, the files on disk.
//
//     E2eCluster cluster(scratch->path());
//     QVERIFY2(cluster.initCoordinator(), ...);   // picks a free port once
//     QVERIFY(cluster.startCoordinator());
//     auto job = cluster.submitJob(E2eCluster::fashionJob());
//     auto a = cluster.enrollAgent(u"a1"_s);
//     cluster.startAgent(*a, E2eCluster::quickAgentOptions());
//     auto done = cluster.waitForJobState(*job, u"completed"_s, 240'000);
//
// Every process it started is stopped by pid in stopAll() (also run by the destructor), including the workers
// a killed agent left behind, found by their task folder. Agents log with timestamps and categories
// ("12:00:01.234 gleaner.agent.net: ...", network requests included) into <root>/<name>.log, appended across
// restarts; the coordinator into <root>/coordinator.log.

#include "PostgresServer.h"
#include "RedisServer.h"
#include "Result.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QString>
#include <QStringList>

#include <csignal>
#include <functional>
#include <memory>
#include <vector>

// A Result's failure as the test's failure message (in a QtTest slot).
#define E2E_VERIFY(result)                                                                                   \
    do {                                                                                                     \
        const auto& e2eResult = (result);                                                                    \
        QVERIFY2(e2eResult.ok(), qPrintable(e2eResult.error()));                                             \
    } while (false)

namespace gleaner::e2e {

struct CliRun
{
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
    QJsonObject json() const;
    // "exit 1: <stderr>" for a failure message.
    QString describe() const;
};

// A file in the coordinator's blob store, classified by its content.
struct BlobFile
{
    QString sha256;
    QString path;
    QString role;        // "shard", "test", "weights", "model" or "other"
    int shardIndex = -1; // gleaner.shard.index of a shard
    qint64 size = 0;
};

struct AgentHandle
{
    QString name;
    QString dir;
    QString id;
    QString logPath;
    QStringList options; // of the last start
    std::unique_ptr<QProcess> process;
};

class E2eCluster
{
public:
    explicit E2eCluster(QString root);
    ~E2eCluster();
    E2eCluster(const E2eCluster&) = delete;
    E2eCluster& operator=(const E2eCluster&) = delete;

    // SIGKILL to every agent, every worker under an agent's task folder and the coordinator, then waits for
    // them.
    void stopAll();

    // ---- the coordinator
    // `gleaner-coordinator init` on a free loopback port, kept for every later start. With GLEANER_TEST_POSTGRES
    // set in the environment, the coordinator's state goes to a PostgreSQL server started for this cluster.
    Status initCoordinator();
    // `serve`; waits for its "port N" line (and checks N is the port chosen at init).
    Status startCoordinator(int timeoutMs = 30'000);
    // Sends `signal` and waits for the process to end.
    void stopCoordinator(int signal = SIGTERM);
    bool coordinatorRunning() const;
    quint16 port() const { return m_port; }
    // The URL agents use: the coordinator's, or nginx's in front of it.
    QString url() const;
    bool behindProxy() const { return m_proxyPort != 0; }
    // The lines of nginx's access log whose request contains `part` (all of them for none).
    QStringList proxiedRequests(const QString& part = {}) const;
    QString coordinatorDir() const { return m_root + QStringLiteral("/coordinator"); }
    // With GLEANER_TEST_COORDINATORS=N (N > 1, on PostgreSQL and Redis, behind nginx): the deployment has N
    // coordinators, the first made with init --shared-dir, the others with init --join; nginx balances over
    // all. The first is the one the CLI talks to, and the one stopCoordinator() stops.
    int coordinatorCount() const { return int(m_others.size()) + 1; }
    // Their ports, the first's first.
    QList<quint16> coordinatorPorts() const;
    QString otherCoordinatorDir(int i) const { return m_root + QStringLiteral("/coordinator-%1").arg(i + 2); }
    QString otherCoordinatorLog(int i) const
    {
        return m_root + QStringLiteral("/coordinator-%1.log").arg(i + 2);
    }
    // Whether nginx sends the files itself from the shared folder (several coordinators, made with
    // --accel-redirect /_gleaner/blobs/): the coordinators answer downloads with X-Accel-Redirect.
    bool proxySendsFiles() const { return !m_others.empty(); }
    // The PEM file of the deployment's certificate, and its admin token.
    QString certificatePath() const { return coordinatorDir() + QStringLiteral("/tls/cert.pem"); }
    QByteArray adminToken() const;
    quint16 proxyPort() const { return quint16(m_proxyPort); }
    // Where blobs/ and updates/ are: the shared folder of several coordinators, or the coordinator's own.
    QString storageDir() const;
    // The PostgreSQL server the coordinator keeps its state on (GLEANER_TEST_POSTGRES), and its database's name;
    // null when the state is in gleaner.db.
    test::PostgresServer* postgres() const { return m_postgres.get(); }
    // The Redis the coordinator keeps its jobs' weights in (GLEANER_TEST_REDIS set), or none.
    test::RedisServer* redis() const { return m_redis.get(); }
    static QString postgresDatabase() { return QStringLiteral("e2e"); }
    QString coordinatorLog() const;

    // gleaner-coordinator ARGS --data-dir <coordinatorDir> (another coordinator's of the deployment while the
    // first is down).
    CliRun coordinator(const QStringList& arguments, int timeoutMs = 60'000) const;
    Result<qint64> submitJob(const QJsonObject& spec);
    // `job status ID --json`; empty when the coordinator does not answer.
    QJsonObject jobStatus(qint64 id) const;
    // Polls `job status` every 0.5 s until `until` holds; fails with the last status after `timeoutMs`.
    Result<QJsonObject> waitForJob(qint64 id, const std::function<bool(const QJsonObject&)>& until,
                                   int timeoutMs, const QString& what);
    Result<QJsonObject> waitForJobState(qint64 id, const QString& state, int timeoutMs);
    // `agent list --json`: the coordinator's record of the agent named `name` (done, timed_out, invalid,
    // failed, ...); empty when unknown or the coordinator does not answer.
    QJsonObject agentRecord(const QString& name) const;
    QJsonArray agentRecords() const;
    // Polls agentRecord(name) every 0.5 s until `until` holds.
    Result<QJsonObject> waitForAgentRecord(const QString& name,
                                           const std::function<bool(const QJsonObject&)>& until,
                                           int timeoutMs, const QString& what);
    // The files of the coordinator's blob store, classified.
    QList<BlobFile> blobs() const;

    // ---- agents
    // Creates an enrollment token (once) and runs `gleaner-agent enroll` into <root>/<name>; the agent's
    // index.
    Result<int> enrollAgent(const QString& name);
    // `gleaner-agent run --data-dir DIR OPTIONS`, its output appended to its log.
    Status startAgent(int agent, const QStringList& options);
    // Starts it again with the options of its last start.
    Status restartAgent(int agent);
    // Sends `signal` to the agent process (not its workers) and waits up to `waitMs` for it to end; false
    // when it still runs.
    bool stopAgent(int agent, int signal = SIGKILL, int waitMs = 15'000);
    bool agentRunning(int agent) const;
    qint64 agentPid(int agent) const;
    const AgentHandle& agent(int agent) const { return *m_agents.at(size_t(agent)); }
    int agentCount() const { return int(m_agents.size()); }
    // gleaner-agent COMMAND --data-dir DIR ARGS (status, pause, resume, finish).
    CliRun agentCli(int agent, const QString& command, const QStringList& arguments = {}) const;

    // The agent's log from byte `from` on (logSize() marks a point, e.g. before a restart).
    QString agentLog(int agent, qint64 from = 0) const;
    qint64 agentLogSize(int agent) const;
    // Waits until the log (from `from`) has a line matching `pattern`; the first such match.
    Result<QRegularExpressionMatch> waitForAgentLog(int agent, const QRegularExpression& pattern,
                                                    int timeoutMs, qint64 from = 0) const;
    // The agent's gleaner-worker processes (by their task folder), running now.
    QList<qint64> workerPids(int agent) const;

    // The last `lines` lines of every log, for a failing test's report.
    QString logTails(int lines = 40) const;

    // The brief's job: an MLP on 6,000 Fashion-MNIST images in 6 shards, target 80 % within 10 epochs.
    static QJsonObject fashionJob();
    // `--dedicated --threads 1 --checkpoint-interval 5 --progress-interval 2`: trains at once, one core each.
    static QStringList quickAgentOptions();

private:
    QProcessEnvironment environment() const;

    QString m_root;
    quint16 m_port = 0;
    // With GLEANER_TEST_POSTGRES set: the server whose database the coordinator keeps its state in (init
    // --database), started by initCoordinator() and stopped after everything else.
    std::unique_ptr<test::PostgresServer> m_postgres;
    std::unique_ptr<test::RedisServer> m_redis;
    // GLEANER_TEST_NGINX set: nginx (installers/scale-out/local-nginx.sh) in front of the coordinator, on this
    // port; agents use it, and the coordinator signs its URL.
    int m_proxyPort = 0;
    bool m_proxyRunning = false;
    Status startProxy();
    void stopProxy();
    std::unique_ptr<QProcess> m_coordinator;
    // The other coordinators of the deployment (GLEANER_TEST_COORDINATORS): their ports and processes.
    struct OtherCoordinator
    {
        quint16 port = 0;
        std::unique_ptr<QProcess> process;
    };
    std::vector<OtherCoordinator> m_others;
    Status startOthers(int timeoutMs);
    QString m_enrollmentToken;
    std::vector<std::unique_ptr<AgentHandle>> m_agents;
};

// Waits, processing events, until `condition` holds or `timeoutMs` passed; checks every `pollMs`.
bool waitUntil(const std::function<bool()>& condition, int timeoutMs, int pollMs = 100);

// The path of the gleaner-worker next to the gleaner-agent used.
QString workerProgram();

} // namespace gleaner::e2e
