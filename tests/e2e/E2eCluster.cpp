#include "E2eCluster.h"

#include "ProcessProbe.h"
#include "TestSupport.h"

#include <QDeadlineTimer>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QTest>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gleaner::e2e {
namespace {

constexpr int kJobPollMs = 500;
constexpr int kLogPollMs = 200;

QString compact(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

CliRun runProgram(const QString& program, const QStringList& arguments,
                  const QProcessEnvironment& environment, int timeoutMs)
{
    QProcess process;
    process.setProcessEnvironment(environment);
    process.start(program, arguments);
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished(5'000);
        CliRun run{-1, process.readAllStandardOutput(), process.readAllStandardError()};
        run.err += QStringLiteral("\n(%1 %2 did not finish within %3 s: %4)")
                       .arg(program, arguments.join(u' '))
                       .arg(timeoutMs / 1000)
                       .arg(process.errorString())
                       .toUtf8();
        return run;
    }
    return CliRun{process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
                  process.readAllStandardOutput(), process.readAllStandardError()};
}

// A server started for a test dies with the test program, even when that crashes or ctest kills it at its
// timeout.
void dieWithParent(QProcess& process)
{
    process.setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGKILL); });
}

// Sends `signal` to a QProcess's child and waits for it; SIGKILL when it does not end in `waitMs`.
bool signalAndWait(QProcess& process, int signal, int waitMs)
{
    if (process.state() == QProcess::NotRunning)
        return true;
    ::kill(pid_t(process.processId()), signal);
    if (process.waitForFinished(waitMs))
        return true;
    return false;
}

QString tail(const QString& path, int lines)
{
    const QStringList all = QString::fromUtf8(test::readFile(path)).split(u'\n');
    return all.mid(std::max<qsizetype>(0, all.size() - lines)).join(u'\n');
}

} // namespace

QJsonObject CliRun::json() const
{
    return QJsonDocument::fromJson(out).object();
}

QString CliRun::describe() const
{
    return QStringLiteral("exit %1: %2%3")
        .arg(exitCode)
        .arg(QString::fromUtf8(err.trimmed()), QString::fromUtf8(out.left(500)));
}

bool waitUntil(const std::function<bool()>& condition, int timeoutMs, int pollMs)
{
    const QDeadlineTimer deadline(timeoutMs);
    while (!condition()) {
        if (deadline.hasExpired())
            return false;
        QTest::qWait(int(std::min<qint64>(pollMs, std::max<qint64>(1, deadline.remainingTime()))));
    }
    return true;
}

QString workerProgram()
{
    return QFileInfo(QStringLiteral(GLEANER_AGENT_BIN)).absolutePath() + QStringLiteral("/gleaner-worker");
}

E2eCluster::E2eCluster(QString root) : m_root(std::move(root)) {}

E2eCluster::~E2eCluster()
{
    stopAll();
}

Status E2eCluster::startProxy()
{
    const QString script = test::sourceDir() + QStringLiteral("/installers/scale-out/local-nginx.sh");
    QStringList arguments{script,
                          QStringLiteral("start"),
                          m_root + QStringLiteral("/nginx"),
                          QStringLiteral("--cert"),
                          coordinatorDir() + QStringLiteral("/tls/cert.pem"),
                          QStringLiteral("--key"),
                          coordinatorDir() + QStringLiteral("/tls/key.pem"),
                          QStringLiteral("--port"),
                          QString::number(m_proxyPort),
                          QStringLiteral("--upstream"),
                          QStringLiteral("127.0.0.1:%1").arg(m_port)};
    for (const OtherCoordinator& other : m_others)
        arguments << QStringLiteral("--upstream") << QStringLiteral("127.0.0.1:%1").arg(other.port);
    if (proxySendsFiles())
        arguments << QStringLiteral("--blobs") << storageDir() + QStringLiteral("/blobs");
    const CliRun started = runProgram(QStringLiteral("bash"), arguments, environment(), 30'000);
    if (started.exitCode != 0)
        return fail(QStringLiteral("local-nginx.sh start: %1").arg(started.describe()));
    m_proxyRunning = true;
    return {};
}

QStringList E2eCluster::proxiedRequests(const QString& part) const
{
    QStringList lines;
    for (const QString& line :
         QString::fromUtf8(test::readFile(m_root + QStringLiteral("/nginx/access.log"))).split(u'\n'))
        if (!line.isEmpty() && (part.isEmpty() || line.contains(part)))
            lines << line;
    return lines;
}

void E2eCluster::stopProxy()
{
    if (!m_proxyRunning)
        return;
    runProgram(QStringLiteral("bash"),
               {test::sourceDir() + QStringLiteral("/installers/scale-out/local-nginx.sh"), QStringLiteral("stop"),
                m_root + QStringLiteral("/nginx")},
               environment(), 30'000);
    m_proxyRunning = false;
}

void E2eCluster::stopAll()
{
    for (const auto& agent : m_agents)
        if (agent->process)
            signalAndWait(*agent->process, SIGKILL, 10'000);
    // A killed agent's workers outlive it (they checkpoint on the end of their stdin): end them too, by pid.
    for (const auto& agent : m_agents)
        for (const qint64 pid : workerPidsUnder(agent->dir + QStringLiteral("/tasks")))
            ::kill(pid_t(pid), SIGKILL);
    for (const auto& agent : m_agents)
        waitUntil([&] { return workerPidsUnder(agent->dir + QStringLiteral("/tasks")).isEmpty(); }, 5'000);
    if (m_coordinator)
        signalAndWait(*m_coordinator, SIGKILL, 10'000);
    for (OtherCoordinator& other : m_others)
        if (other.process)
            signalAndWait(*other.process, SIGKILL, 10'000);
    stopProxy();
}

QProcessEnvironment E2eCluster::environment() const
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_MESSAGE_PATTERN"),
               QStringLiteral("%{time hh:mm:ss.zzz} %{category}: %{message}"));
    // Every request with its status and size: the bytes benchmark and the reconnection checks read them.
    env.insert(QStringLiteral("QT_LOGGING_RULES"), QStringLiteral("gleaner.agent.net.debug=true"));
    return env;
}

// ---- the coordinator
// ------------------------------------------------------------------------------------------

QString E2eCluster::url() const
{
    return QStringLiteral("https://127.0.0.1:%1").arg(m_proxyPort != 0 ? m_proxyPort : m_port);
}

QString E2eCluster::coordinatorLog() const
{
    return m_root + QStringLiteral("/coordinator.log");
}

namespace {

// nginx's workers run as www-data when the test runs as root. As an admin would (docs/scale-out.md), the way
// to the blob folder is opened to their group only: traverse, no listing.
Status letProxyWorkersThrough(const QStringList& folders)
{
    if (::geteuid() != 0)
        return {};
    const struct group* workers = ::getgrnam("www-data");
    if (!workers)
        return fail(QStringLiteral("no group www-data for nginx's workers"));
    for (const QString& folder : folders) {
        const QByteArray path = QFile::encodeName(folder);
        if (::chown(path.constData(), uid_t(-1), workers->gr_gid) != 0 ||
            ::chmod(path.constData(), 0710) != 0)
            return fail(QStringLiteral("cannot open %1 to nginx's workers: %2")
                            .arg(folder, QString::fromLocal8Bit(std::strerror(errno))));
    }
    return {};
}

} // namespace

Status E2eCluster::initCoordinator()
{
    m_port = freeLoopbackPort();
    if (m_port == 0)
        return fail(QStringLiteral("no free port on 127.0.0.1"));
    QStringList arguments{QStringLiteral("init"), QStringLiteral("--data-dir"), coordinatorDir(),
                          QStringLiteral("--listen"), QStringLiteral("127.0.0.1:%1").arg(m_port), QStringLiteral("--json")};
    if (!qEnvironmentVariableIsEmpty("GLEANER_TEST_POSTGRES")) {
        if (const QString missing = test::PostgresServer::missing(); !missing.isEmpty())
            return fail(missing);
        m_postgres = std::make_unique<test::PostgresServer>();
        if (const QString error = m_postgres->start(); !error.isEmpty())
            return fail(error);
        if (const QString error = m_postgres->createDatabase(postgresDatabase()); !error.isEmpty())
            return fail(error);
        arguments << QStringLiteral("--database") << m_postgres->url(postgresDatabase());
    }
    if (!qEnvironmentVariableIsEmpty("GLEANER_TEST_NGINX")) {
        m_proxyPort = freeLoopbackPort();
        if (m_proxyPort == 0)
            return fail(QStringLiteral("no free port on 127.0.0.1 for nginx"));
        arguments << QStringLiteral("--public-url") << url() << QStringLiteral("--trusted-proxy")
                  << QStringLiteral("127.0.0.1");
    }
    if (!qEnvironmentVariableIsEmpty("GLEANER_TEST_REDIS")) {
        if (const QString missing = test::RedisServer::missing(); !missing.isEmpty())
            return fail(missing);
        m_redis = std::make_unique<test::RedisServer>();
        if (const QString error = m_redis->start(); !error.isEmpty())
            return fail(error);
        arguments << QStringLiteral("--redis") << m_redis->url();
    }
    const int coordinators = qEnvironmentVariableIntValue("GLEANER_TEST_COORDINATORS");
    if (coordinators > 1) {
        if (!m_postgres || !m_redis || m_proxyPort == 0)
            return fail(
                QStringLiteral("GLEANER_TEST_COORDINATORS needs GLEANER_TEST_POSTGRES, GLEANER_TEST_REDIS "
                               "and GLEANER_TEST_NGINX"));
        // nginx sends the files from the shared folder (X-Accel-Redirect); the coordinators decide who gets
        // them.
        arguments << QStringLiteral("--shared-dir") << m_root + QStringLiteral("/shared")
                  << QStringLiteral("--accel-redirect") << QStringLiteral("/_gleaner/blobs/");
    }
    const CliRun init = runProgram(QStringLiteral(GLEANER_COORDINATOR_BIN), arguments, environment(), 60'000);
    if (init.exitCode != 0)
        return fail(QStringLiteral("gleaner-coordinator init: %1").arg(init.describe()));
    if (!init.json().value(QStringLiteral("admin_token")).toString().startsWith(u"gla_"))
        return fail(QStringLiteral("gleaner-coordinator init printed no admin token: %1")
                        .arg(QString::fromUtf8(init.out)));
    for (int i = 0; i + 1 < coordinators; ++i) {
        OtherCoordinator other;
        other.port = freeLoopbackPort();
        if (other.port == 0)
            return fail(QStringLiteral("no free port on 127.0.0.1"));
        const CliRun joined =
            runProgram(QStringLiteral(GLEANER_COORDINATOR_BIN),
                       {QStringLiteral("init"), QStringLiteral("--data-dir"), otherCoordinatorDir(i),
                        QStringLiteral("--join"), coordinatorDir(), QStringLiteral("--listen"),
                        QStringLiteral("127.0.0.1:%1").arg(other.port), QStringLiteral("--json")},
                       environment(), 60'000);
        if (joined.exitCode != 0)
            return fail(QStringLiteral("gleaner-coordinator init --join: %1").arg(joined.describe()));
        m_others.push_back(std::move(other));
    }
    if (proxySendsFiles())
        return letProxyWorkersThrough({m_root, storageDir()});
    return {};
}

Status E2eCluster::startCoordinator(int timeoutMs)
{
    if (coordinatorRunning())
        return fail(QStringLiteral("the coordinator runs already"));
    const QString out = m_root + QStringLiteral("/coordinator.out");
    const qint64 from = QFileInfo(out).size();
    m_coordinator = std::make_unique<QProcess>();
    m_coordinator->setProcessEnvironment(environment());
    dieWithParent(*m_coordinator);
    m_coordinator->setStandardOutputFile(out, QIODevice::Append);
    m_coordinator->setStandardErrorFile(coordinatorLog(), QIODevice::Append);
    m_coordinator->start(QStringLiteral(GLEANER_COORDINATOR_BIN),
                         {QStringLiteral("serve"), QStringLiteral("--data-dir"), coordinatorDir()});
    if (!m_coordinator->waitForStarted(10'000))
        return fail(QStringLiteral("cannot start gleaner-coordinator: %1").arg(m_coordinator->errorString()));
    QString line;
    const bool announced = waitUntil(
        [&] {
            const QByteArray text = test::readFile(out).mid(from);
            line = QString::fromUtf8(text.left(text.indexOf('\n')));
            return text.contains('\n') || m_coordinator->state() == QProcess::NotRunning;
        },
        timeoutMs);
    if (!announced || !line.startsWith(u"port "))
        return fail(
            QStringLiteral("gleaner-coordinator serve did not print \"port N\" (got \"%1\"); its log:\n%2")
                .arg(line, tail(coordinatorLog(), 20)));
    if (line.mid(5).toUInt() != m_port)
        return fail(QStringLiteral("the coordinator listens on %1, not on port %2 chosen at init")
                        .arg(line)
                        .arg(m_port));
    // It keeps its state where init was told to: on the PostgreSQL server of this cluster, when there is one.
    const QByteArray where = (m_postgres ? m_postgres->url(postgresDatabase())
                                         : QDir(coordinatorDir()).absolutePath() + QStringLiteral("/gleaner.db"))
                                 .toUtf8();
    const QByteArray said = QByteArray("state in ").append(where);
    if (!waitUntil([&] { return test::readFile(coordinatorLog()).contains(said); }, 5'000))
        return fail(QStringLiteral("the coordinator does not say it keeps its state in %1; its log:\n%2")
                        .arg(QString::fromUtf8(where), tail(coordinatorLog(), 20)));
    if (auto s = startOthers(timeoutMs); !s)
        return s;
    if (m_proxyPort != 0 && !m_proxyRunning)
        if (auto s = startProxy(); !s)
            return s;
    // And its jobs' weights in memory, or in the Redis of this cluster when there is one.
    const QByteArray weights = QByteArray("weights in ").append(m_redis ? m_redis->url().toUtf8() : "memory");
    if (!test::readFile(coordinatorLog()).contains(weights))
        return fail(QStringLiteral("the coordinator does not say it keeps its weights in %1; its log:\n%2")
                        .arg(QString::fromUtf8(weights.mid(11)), tail(coordinatorLog(), 20)));
    return {};
}

Status E2eCluster::startOthers(int timeoutMs)
{
    for (size_t i = 0; i < m_others.size(); ++i) {
        OtherCoordinator& other = m_others[i];
        if (other.process && other.process->state() != QProcess::NotRunning)
            continue;
        const QString out = m_root + QStringLiteral("/coordinator-%1.out").arg(i + 2);
        const qint64 from = QFileInfo(out).size();
        other.process = std::make_unique<QProcess>();
        other.process->setProcessEnvironment(environment());
        dieWithParent(*other.process);
        other.process->setStandardOutputFile(out, QIODevice::Append);
        other.process->setStandardErrorFile(otherCoordinatorLog(int(i)), QIODevice::Append);
        other.process->start(
            QStringLiteral(GLEANER_COORDINATOR_BIN),
            {QStringLiteral("serve"), QStringLiteral("--data-dir"), otherCoordinatorDir(int(i))});
        if (!other.process->waitForStarted(10'000))
            return fail(
                QStringLiteral("cannot start gleaner-coordinator: %1").arg(other.process->errorString()));
        const bool announced = waitUntil(
            [&] {
                return test::readFile(out).mid(from).contains('\n') ||
                       other.process->state() == QProcess::NotRunning;
            },
            timeoutMs);
        if (!announced || !test::readFile(out).mid(from).startsWith("port "))
            return fail(QStringLiteral("coordinator %1 did not start; its log:\n%2")
                            .arg(i + 2)
                            .arg(tail(otherCoordinatorLog(int(i)), 20)));
    }
    return {};
}

QList<quint16> E2eCluster::coordinatorPorts() const
{
    QList<quint16> ports{m_port};
    for (const OtherCoordinator& other : m_others)
        ports << other.port;
    return ports;
}

QByteArray E2eCluster::adminToken() const
{
    return test::readFile(coordinatorDir() + QStringLiteral("/admin-token")).trimmed();
}

QString E2eCluster::storageDir() const
{
    return m_others.empty() ? coordinatorDir() : m_root + QStringLiteral("/shared");
}

void E2eCluster::stopCoordinator(int signal)
{
    if (m_coordinator && !signalAndWait(*m_coordinator, signal, 30'000))
        signalAndWait(*m_coordinator, SIGKILL, 10'000);
}

bool E2eCluster::coordinatorRunning() const
{
    return m_coordinator && m_coordinator->state() != QProcess::NotRunning;
}

CliRun E2eCluster::coordinator(const QStringList& arguments, int timeoutMs) const
{
    // The admin's CLI talks to the coordinator of the data directory it is given: the first one, or while
    // that one is down, another of the deployment that runs.
    QString dir = coordinatorDir();
    for (size_t i = 0; i < m_others.size() && !coordinatorRunning(); ++i)
        if (m_others[i].process && m_others[i].process->state() != QProcess::NotRunning) {
            dir = otherCoordinatorDir(int(i));
            break;
        }
    return runProgram(QStringLiteral(GLEANER_COORDINATOR_BIN),
                      arguments + QStringList{QStringLiteral("--data-dir"), dir}, environment(), timeoutMs);
}

Result<qint64> E2eCluster::submitJob(const QJsonObject& spec)
{
    const QString file =
        m_root + QStringLiteral("/job-%1.json").arg(spec.value(QStringLiteral("name")).toString());
    if (!test::writeFile(file, QJsonDocument(spec).toJson()))
        return fail(QStringLiteral("cannot write %1").arg(file));
    const CliRun submitted =
        coordinator({QStringLiteral("job"), QStringLiteral("submit"), file, QStringLiteral("--json")});
    const qint64 id = submitted.json().value(QStringLiteral("id")).toInteger();
    if (submitted.exitCode != 0 || id <= 0)
        return fail(QStringLiteral("job submit: %1").arg(submitted.describe()));
    return id;
}

QJsonObject E2eCluster::jobStatus(qint64 id) const
{
    const CliRun run = coordinator(
        {QStringLiteral("job"), QStringLiteral("status"), QString::number(id), QStringLiteral("--json")},
        20'000);
    return run.exitCode == 0 ? run.json() : QJsonObject();
}

Result<QJsonObject> E2eCluster::waitForJob(qint64 id, const std::function<bool(const QJsonObject&)>& until,
                                           int timeoutMs, const QString& what)
{
    QJsonObject last;
    const bool reached = waitUntil(
        [&] {
            const QJsonObject status = jobStatus(id);
            if (!status.isEmpty())
                last = status;
            return !status.isEmpty() && until(status);
        },
        timeoutMs, kJobPollMs);
    if (!reached)
        return fail(QStringLiteral("job %1 was not %2 within %3 s; its last status: %4")
                        .arg(id)
                        .arg(what)
                        .arg(timeoutMs / 1000)
                        .arg(compact(last)));
    return last;
}

Result<QJsonObject> E2eCluster::waitForJobState(qint64 id, const QString& state, int timeoutMs)
{
    return waitForJob(
        id, [&](const QJsonObject& s) { return s.value(QStringLiteral("state")).toString() == state; },
        timeoutMs, state);
}

QJsonArray E2eCluster::agentRecords() const
{
    const CliRun run =
        coordinator({QStringLiteral("agent"), QStringLiteral("list"), QStringLiteral("--json")}, 20'000);
    return run.exitCode == 0 ? run.json().value(QStringLiteral("agents")).toArray() : QJsonArray();
}

QJsonObject E2eCluster::agentRecord(const QString& name) const
{
    for (const auto& record : agentRecords())
        if (record.toObject().value(QStringLiteral("name")).toString() == name)
            return record.toObject();
    return {};
}

Result<QJsonObject> E2eCluster::waitForAgentRecord(const QString& name,
                                                   const std::function<bool(const QJsonObject&)>& until,
                                                   int timeoutMs, const QString& what)
{
    QJsonObject last;
    const bool reached = waitUntil(
        [&] {
            last = agentRecord(name);
            return !last.isEmpty() && until(last);
        },
        timeoutMs, kJobPollMs);
    if (!reached)
        return fail(QStringLiteral("the coordinator's record of agent %1 did not show %2 within %3 s: %4")
                        .arg(name, what)
                        .arg(timeoutMs / 1000)
                        .arg(compact(last)));
    return last;
}

QList<BlobFile> E2eCluster::blobs() const
{
    QList<BlobFile> found;
    QDirIterator it(storageDir() + QStringLiteral("/blobs"), QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        BlobFile blob;
        blob.path = it.next();
        blob.sha256 = it.fileName();
        blob.size = it.fileInfo().size();
        QFile file(blob.path);
        if (!file.open(QIODevice::ReadOnly))
            continue;
        const QByteArray head = file.read(8);
        if (head.startsWith('{')) {
            blob.role = QStringLiteral("model");
        } else if (head.size() == 8) {
            // safetensors: a little-endian u64 header length, then the JSON header.
            quint64 length = 0;
            for (int i = 7; i >= 0; --i)
                length = (length << 8) | quint8(head[i]);
            const QJsonObject header =
                QJsonDocument::fromJson(file.read(qint64(std::min<quint64>(length, 1 << 20)))).object();
            const QJsonObject metadata = header.value(QStringLiteral("__metadata__")).toObject();
            if (metadata.contains(QStringLiteral("gleaner.shard.index"))) {
                blob.role = QStringLiteral("shard");
                blob.shardIndex = metadata.value(QStringLiteral("gleaner.shard.index")).toString().toInt();
            } else if (header.contains(QStringLiteral("x")) && header.contains(QStringLiteral("y"))) {
                blob.role = QStringLiteral("test");
            } else if (metadata.contains(QStringLiteral("gleaner.version"))) {
                blob.role = QStringLiteral("weights");
            } else {
                blob.role = QStringLiteral("other"); // the initial weights, snapshots
            }
        }
        found.append(blob);
    }
    return found;
}

// ---- agents
// ---------------------------------------------------------------------------------------------------

Result<int> E2eCluster::enrollAgent(const QString& name)
{
    if (m_enrollmentToken.isEmpty()) {
        const CliRun token =
            coordinator({QStringLiteral("token"), QStringLiteral("create"), QStringLiteral("--json")});
        m_enrollmentToken = token.json().value(QStringLiteral("token")).toString();
        if (token.exitCode != 0 || m_enrollmentToken.isEmpty())
            return fail(QStringLiteral("token create: %1").arg(token.describe()));
    }
    auto agent = std::make_unique<AgentHandle>();
    agent->name = name;
    agent->dir = m_root + u'/' + name;
    agent->logPath = m_root + u'/' + name + QStringLiteral(".log");
    const CliRun enrolled = runProgram(
        QStringLiteral(GLEANER_AGENT_BIN),
        {QStringLiteral("enroll"), url(), QStringLiteral("--token"), m_enrollmentToken,
         QStringLiteral("--ca"), coordinatorDir() + QStringLiteral("/tls/cert.pem"),
         QStringLiteral("--data-dir"), agent->dir, QStringLiteral("--name"), name, QStringLiteral("--json")},
        environment(), 60'000);
    agent->id = enrolled.json().value(QStringLiteral("agent_id")).toString();
    if (enrolled.exitCode != 0 || agent->id.isEmpty())
        return fail(QStringLiteral("gleaner-agent enroll %1: %2").arg(name, enrolled.describe()));
    m_agents.push_back(std::move(agent));
    return int(m_agents.size()) - 1;
}

Status E2eCluster::startAgent(int index, const QStringList& options)
{
    AgentHandle& agent = *m_agents.at(size_t(index));
    if (agent.process && agent.process->state() != QProcess::NotRunning)
        return fail(QStringLiteral("agent %1 runs already").arg(agent.name));
    agent.options = options;
    agent.process = std::make_unique<QProcess>();
    agent.process->setProcessEnvironment(environment());
    dieWithParent(*agent.process);
    agent.process->setProcessChannelMode(QProcess::MergedChannels);
    agent.process->setStandardOutputFile(agent.logPath, QIODevice::Append);
    agent.process->start(QStringLiteral(GLEANER_AGENT_BIN),
                         QStringList{QStringLiteral("run"), QStringLiteral("--data-dir"), agent.dir} +
                             options);
    if (!agent.process->waitForStarted(10'000))
        return fail(QStringLiteral("cannot start gleaner-agent run for %1: %2")
                        .arg(agent.name, agent.process->errorString()));
    return {};
}

Status E2eCluster::restartAgent(int index)
{
    return startAgent(index, m_agents.at(size_t(index))->options);
}

bool E2eCluster::stopAgent(int index, int signal, int waitMs)
{
    AgentHandle& agent = *m_agents.at(size_t(index));
    return !agent.process || signalAndWait(*agent.process, signal, waitMs);
}

bool E2eCluster::agentRunning(int index) const
{
    const AgentHandle& agent = *m_agents.at(size_t(index));
    return agent.process && agent.process->state() != QProcess::NotRunning;
}

qint64 E2eCluster::agentPid(int index) const
{
    return agentRunning(index) ? m_agents.at(size_t(index))->process->processId() : 0;
}

CliRun E2eCluster::agentCli(int index, const QString& command, const QStringList& arguments) const
{
    return runProgram(QStringLiteral(GLEANER_AGENT_BIN),
                      QStringList{command, QStringLiteral("--data-dir"), m_agents.at(size_t(index))->dir} +
                          arguments,
                      environment(), 20'000);
}

QString E2eCluster::agentLog(int index, qint64 from) const
{
    return QString::fromUtf8(test::readFile(m_agents.at(size_t(index))->logPath).mid(from));
}

qint64 E2eCluster::agentLogSize(int index) const
{
    return QFileInfo(m_agents.at(size_t(index))->logPath).size();
}

Result<QRegularExpressionMatch> E2eCluster::waitForAgentLog(int index, const QRegularExpression& pattern,
                                                            int timeoutMs, qint64 from) const
{
    QRegularExpressionMatch match;
    const bool found = waitUntil(
        [&] {
            match = pattern.match(agentLog(index, from));
            return match.hasMatch();
        },
        timeoutMs, kLogPollMs);
    if (!found)
        return fail(QStringLiteral("the log of agent %1 has no line matching /%2/ after %3 s; its end:\n%4")
                        .arg(agent(index).name, pattern.pattern())
                        .arg(timeoutMs / 1000)
                        .arg(tail(agent(index).logPath, 25)));
    return match;
}

QList<qint64> E2eCluster::workerPids(int index) const
{
    return workerPidsUnder(m_agents.at(size_t(index))->dir + QStringLiteral("/tasks"));
}

QString E2eCluster::logTails(int lines) const
{
    QString text =
        QStringLiteral("---- coordinator (%1)\n%2\n").arg(coordinatorLog(), tail(coordinatorLog(), lines));
    for (size_t i = 0; i < m_others.size(); ++i)
        text += QStringLiteral("---- coordinator %1 (%2)\n%3\n")
                    .arg(i + 2)
                    .arg(otherCoordinatorLog(int(i)), tail(otherCoordinatorLog(int(i)), lines));
    for (const auto& agent : m_agents)
        text += QStringLiteral("---- agent %1 (%2)\n%3\n")
                    .arg(agent->name, agent->logPath, tail(agent->logPath, lines));
    return text;
}

QJsonObject E2eCluster::fashionJob()
{
    return test::jsonObject(QStringLiteral(R"({"name": "fashion-small",
        "dataset": {"format": "fashion-mnist", "dir": "%1"}, "limit_train": 6000,
        "model": {"arch": "mlp", "hidden": [64], "input_shape": [1, 28, 28], "num_classes": 10},
        "shards": 6, "local_epochs": 1, "batch_size": 32,
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "aggregation": {"rule": "vc-asgd", "alpha": "epoch"},
        "target_accuracy": 0.80, "max_epochs": 10, "deadline_seconds": 60, "replication": 1, "seed": 7})")
                                .arg(test::fashionMnistDir())
                                .toUtf8());
}

QStringList E2eCluster::quickAgentOptions()
{
    return {QStringLiteral("--dedicated"),
            QStringLiteral("--threads"),
            QStringLiteral("1"),
            QStringLiteral("--checkpoint-interval"),
            QStringLiteral("5"),
            QStringLiteral("--progress-interval"),
            QStringLiteral("2")};
}

} // namespace gleaner::e2e
