// gleaner-coordinator as an admin runs it: init, serve, the job / token / agent commands and their errors, and a
// SIGKILL in the middle of a job after which nothing accepted is lost. Agents are played with HttpsClient.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "format/SafeTensors.h"
#include "http/HttpsClient.h"

#include <QDateTime>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QTest>

#include <csignal>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

struct Run
{
    int exitCode = -1;
    QByteArray out;
    QByteArray err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

Run cli(const QStringList& arguments)
{
    QProcess process;
    process.start(QStringLiteral(GLEANER_COORDINATOR_BIN), arguments);
    if (!process.waitForFinished(60'000))
        process.kill();
    return Run{process.exitCode(), process.readAllStandardOutput(), process.readAllStandardError()};
}

// The body of a result for `task` of a lease reply: the weights its manifest hands out, unchanged (a step of 0
// passes every bound), with the metadata the coordinator checks. Empty when the weights cannot be fetched.
QByteArray unchangedResult(HttpsClient& agent, const QByteArray& agentToken, const QJsonObject& task)
{
    const QJsonObject manifest =
        QJsonDocument::fromJson(task.value(QStringLiteral("manifest")).toString().toUtf8()).object();
    QByteArray weightsSha;
    for (const auto& f : manifest.value(QStringLiteral("files")).toArray())
        if (f.toObject().value(QStringLiteral("role")).toString() == u"weights")
            weightsSha = f.toObject().value(QStringLiteral("sha256")).toString().toLatin1();
    auto weights = agent.request("GET", "/api/v1/files/" + weightsSha, {}, {}, {}, agentToken);
    if (!weights.ok())
        return {};
    auto bundle = SafeTensors::parse(weights->body);
    if (!bundle.ok())
        return {};
    bundle->metadata().clear();
    bundle->setMetadata(QStringLiteral("gleaner.nonce"), manifest.value(QStringLiteral("nonce")).toString());
    bundle->setMetadata(QStringLiteral("gleaner.base_version"), QStringLiteral("0"));
    bundle->setMetadata(QStringLiteral("gleaner.samples"), QStringLiteral("64"));
    return SafeTensors::serialize(*bundle);
}

} // namespace

class TestCoordinatorProcess : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void helpEverywhere_data();
    void helpEverywhere();
    void initRefusesAnExistingDirectory();
    void killedServerLosesNoAcceptedUpdate();
    void killAtEachDurabilityPointLosesNothing_data();
    void killAtEachDurabilityPointLosesNothing();
    void commandErrorsSayWhatToDo();

private:
    bool startServer(const QByteArray& faultPoint = {});
    void stopServer(int signal);
    QStringList dataDir() const { return {QStringLiteral("--data-dir"), m_dir}; }

    std::unique_ptr<QTemporaryDir> m_scratch;
    QString m_dir;
    QString m_dataset;
    QByteArray m_adminToken;
    std::unique_ptr<QProcess> m_server;
    quint16 m_port = 0;
};

void TestCoordinatorProcess::init()
{
    m_scratch = test::scratchDir();
    m_dir = m_scratch->filePath(QStringLiteral("data"));
    m_dataset = m_scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
    const Run created = cli({QStringLiteral("init"), QStringLiteral("--data-dir"), m_dir, QStringLiteral("--listen"),
                             QStringLiteral("127.0.0.1:0"), QStringLiteral("--json")});
    QCOMPARE(created.exitCode, 0);
    m_adminToken = created.json().value(QStringLiteral("admin_token")).toString().toLatin1();
    QVERIFY(m_adminToken.startsWith("gla_"));
    QCOMPARE(created.json().value(QStringLiteral("ca_certificate")).toString(), m_dir + QStringLiteral("/tls/cert.pem"));
    QVERIFY(created.json().value(QStringLiteral("signing_public_key")).toString().startsWith(u"-----BEGIN PUBLIC KEY"));
}

void TestCoordinatorProcess::cleanup()
{
    if (m_server)
        stopServer(SIGKILL);
}

bool TestCoordinatorProcess::startServer(const QByteArray& faultPoint)
{
    m_server = std::make_unique<QProcess>();
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("GLEANER_FAULT_POINT"));
    if (!faultPoint.isEmpty())
        env.insert(QStringLiteral("GLEANER_FAULT_POINT"), QString::fromLatin1(faultPoint));
    m_server->setProcessEnvironment(env);
    m_server->setProcessChannelMode(QProcess::SeparateChannels);
    m_server->start(QStringLiteral(GLEANER_COORDINATOR_BIN), QStringList{QStringLiteral("serve")} + dataDir());
    for (int i = 0; i < 100 && !m_server->canReadLine(); ++i)
        m_server->waitForReadyRead(100);
    const QByteArray line = m_server->readLine().trimmed();
    if (!line.startsWith("port ")) {
        qWarning() << "serve did not start:" << line << m_server->readAllStandardError();
        return false;
    }
    m_port = quint16(line.mid(5).toUInt());
    return m_port != 0;
}

void TestCoordinatorProcess::stopServer(int signal)
{
    ::kill(pid_t(m_server->processId()), signal);
    m_server->waitForFinished(30'000);
    m_server.reset();
}

void TestCoordinatorProcess::helpEverywhere_data()
{
    QTest::addColumn<QStringList>("arguments");
    QTest::newRow("top") << QStringList{QStringLiteral("--help")};
    for (const char* command : {"init", "serve", "job submit", "job list", "job status", "job pause", "job resume",
                                "job cancel", "job export", "token create", "token list", "token revoke", "agent list",
                                "agent revoke", "agent release", "job", "token", "agent"})
        QTest::newRow(command) << QString::fromLatin1(command).split(u' ') + QStringList{QStringLiteral("--help")};
}

void TestCoordinatorProcess::helpEverywhere()
{
    QFETCH(QStringList, arguments);
    const Run run = cli(arguments);
    QCOMPARE(run.exitCode, 0);
    QVERIFY2(run.out.contains("usage") || run.out.contains("Usage"), run.out.constData());
}

void TestCoordinatorProcess::initRefusesAnExistingDirectory()
{
    const Run again = cli({QStringLiteral("init"), QStringLiteral("--data-dir"), m_dir});
    QCOMPARE(again.exitCode, 1);
    QVERIFY(again.err.contains("already exists and is not empty"));
    const Run noDir = cli({QStringLiteral("init")});
    QCOMPARE(noDir.exitCode, 2);
    QVERIFY(noDir.err.contains("--data-dir DIR is required"));
}

void TestCoordinatorProcess::killedServerLosesNoAcceptedUpdate()
{
    QVERIFY(startServer());
    const QString spec = m_scratch->filePath(QStringLiteral("job.json"));
    QFile file(spec);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    file.close();
    const Run submitted = cli(QStringList{QStringLiteral("job"), QStringLiteral("submit")} + dataDir()
                              + QStringList{spec, QStringLiteral("--json")});
    QCOMPARE(submitted.exitCode, 0);
    const QString id = QString::number(submitted.json().value(QStringLiteral("id")).toInteger());

    const auto status = [&] {
        return cli(QStringList{QStringLiteral("job"), QStringLiteral("status")} + dataDir()
                   + QStringList{id, QStringLiteral("--json")})
            .json();
    };
    for (int i = 0; i < 100 && status().value(QStringLiteral("state")).toString() != u"running"; ++i)
        QTest::qWait(50);
    QCOMPARE(status().value(QStringLiteral("state")).toString(), QStringLiteral("running"));

    const Run token = cli(QStringList{QStringLiteral("token"), QStringLiteral("create")} + dataDir()
                          + QStringList{QStringLiteral("--json")});
    QCOMPARE(token.exitCode, 0);
    HttpsClient agent(QStringLiteral("127.0.0.1"), m_port, m_dir + QStringLiteral("/tls/cert.pem"));
    const QJsonObject enrollRequest{{QStringLiteral("name"), QStringLiteral("box")},
                                    {QStringLiteral("enrollment_token"), token.json().value(QStringLiteral("token"))}};
    auto enrolled = agent.request("POST", "/api/v1/agents/enroll", QJsonDocument(enrollRequest).toJson(), "application/json");
    QVERIFY(enrolled.ok());
    const QByteArray agentToken =
        QJsonDocument::fromJson(enrolled->body).object().value(QStringLiteral("agent_token")).toString().toLatin1();
    auto leased = agent.request("POST", "/api/v1/work/lease", R"({"max_tasks": 3})", "application/json", {}, agentToken);
    QVERIFY(leased.ok());
    const QJsonArray tasks = QJsonDocument::fromJson(leased->body).object().value(QStringLiteral("tasks")).toArray();
    QCOMPARE(tasks.size(), 3);

    // Three results accepted (202), each fully folded in before the kill.
    for (const auto& task : tasks) {
        const QByteArray body = unchangedResult(agent, agentToken, task.toObject());
        QVERIFY(!body.isEmpty());
        const QByteArray leaseId = task.toObject().value(QStringLiteral("lease_id")).toString().toLatin1();
        auto uploaded = agent.request("PUT", "/api/v1/work/" + leaseId + "/result", body, "application/octet-stream",
                                      {}, agentToken);
        QVERIFY(uploaded.ok());
        QCOMPARE(uploaded->status, 202);
    }
    QTRY_COMPARE_WITH_TIMEOUT(status().value(QStringLiteral("updates")).toInteger(), qint64(3), 10'000);

    // The fourth workunit: the agent cannot run it and gives it back, durably before the answer too.
    auto fourth = agent.request("POST", "/api/v1/work/lease", R"({"max_tasks": 1})", "application/json", {},
                                agentToken);
    QVERIFY(fourth.ok());
    const QByteArray failedLease = QJsonDocument::fromJson(fourth->body)
                                       .object()
                                       .value(QStringLiteral("tasks"))
                                       .toArray()
                                       .first()
                                       .toObject()
                                       .value(QStringLiteral("lease_id"))
                                       .toString()
                                       .toLatin1();
    auto failed = agent.request("POST", "/api/v1/work/" + failedLease + "/fail",
                                R"({"stage": "worker", "reason": "out of memory"})", "application/json", {},
                                agentToken);
    QVERIFY(failed.ok());
    QCOMPARE(failed->status, 200);

    stopServer(SIGKILL); // no snapshot was written: snapshots come every 50 updates by default
    QVERIFY(startServer());
    QTRY_COMPARE_WITH_TIMEOUT(status().value(QStringLiteral("updates")).toInteger(), qint64(3), 10'000);
    QCOMPARE(status().value(QStringLiteral("updates_received")).toInteger(), qint64(3));
    const Run agents = cli(QStringList{QStringLiteral("agent"), QStringLiteral("list")} + dataDir());
    QCOMPARE(agents.exitCode, 0);
    QVERIFY2(agents.out.contains("done 3") && agents.out.contains("failed 1"), agents.out.constData());
    const Run agentsJson = cli(QStringList{QStringLiteral("agent"), QStringLiteral("list")} + dataDir() +
                               QStringList{QStringLiteral("--json")});
    const QJsonObject record = agentsJson.json().value(QStringLiteral("agents")).toArray().first().toObject();
    QCOMPARE(record.value(QStringLiteral("failed")).toInteger(), 1);
    HttpsClient reconnected(QStringLiteral("127.0.0.1"), m_port, m_dir + QStringLiteral("/tls/cert.pem"));
    auto closed = reconnected.request("POST", "/api/v1/work/" + failedLease + "/progress", "{}",
                                      "application/json", {}, agentToken);
    QVERIFY(closed.ok());
    QCOMPARE(closed->status, 409); // not revived by the restart

    const QString out = m_scratch->filePath(QStringLiteral("model.safetensors"));
    const Run exported = cli(QStringList{QStringLiteral("job"), QStringLiteral("export")} + dataDir()
                             + QStringList{id, QStringLiteral("--out"), out});
    QCOMPARE(exported.exitCode, 0);
    auto model = SafeTensors::load(out);
    QVERIFY2(model.ok(), qPrintable(model.error()));
    QCOMPARE(model->metadata().value(QStringLiteral("gleaner.version")), QStringLiteral("3"));

    stopServer(SIGTERM);
}

void TestCoordinatorProcess::killAtEachDurabilityPointLosesNothing_data()
{
    // Each step where the order of durable writes matters (docs/architecture.md, "Durability"): the process ends
    // there as a kill would, and after the restart every result the agent sent counts exactly once.
    QTest::addColumn<QByteArray>("point");
    QTest::newRow("upload moved beside the database") << QByteArray("result.stored:3");
    QTest::newRow("update row committed, no answer yet") << QByteArray("result.recorded:3");
    QTest::newRow("snapshot written, not recorded") << QByteArray("snapshot.written:2");
    QTest::newRow("snapshot recorded, updates' files kept") << QByteArray("snapshot.recorded:2");
    QTest::newRow("snapshot recorded, updates' files removed") << QByteArray("snapshot.cleaned:2");
}

void TestCoordinatorProcess::killAtEachDurabilityPointLosesNothing()
{
    QFETCH(QByteArray, point);
    // A snapshot after every update, so the snapshot's steps are reached too.
    const QString configPath = m_dir + QStringLiteral("/config.json");
    QFile config(configPath);
    QVERIFY(config.open(QIODevice::ReadOnly));
    QJsonObject settings = QJsonDocument::fromJson(config.readAll()).object();
    config.close();
    settings.insert(QStringLiteral("snapshot_every_updates"), 1);
    QVERIFY(config.open(QIODevice::WriteOnly | QIODevice::Truncate));
    config.write(QJsonDocument(settings).toJson());
    config.close();

    QVERIFY(startServer(point));
    const QString spec = m_scratch->filePath(QStringLiteral("job.json"));
    QFile file(spec);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 600, QStringLiteral(R"(, "overlap_epochs": false)")));
    file.close();
    const Run submitted = cli(QStringList{QStringLiteral("job"), QStringLiteral("submit")} + dataDir()
                              + QStringList{spec, QStringLiteral("--json")});
    QCOMPARE(submitted.exitCode, 0);
    const QString id = QString::number(submitted.json().value(QStringLiteral("id")).toInteger());
    const auto status = [&] {
        return cli(QStringList{QStringLiteral("job"), QStringLiteral("status")} + dataDir()
                   + QStringList{id, QStringLiteral("--json")})
            .json();
    };
    QTRY_COMPARE_WITH_TIMEOUT(status().value(QStringLiteral("state")).toString(), QStringLiteral("running"), 20'000);

    const Run token = cli(QStringList{QStringLiteral("token"), QStringLiteral("create")} + dataDir()
                          + QStringList{QStringLiteral("--json")});
    QCOMPARE(token.exitCode, 0);
    auto agent = std::make_unique<HttpsClient>(QStringLiteral("127.0.0.1"), m_port, m_dir + QStringLiteral("/tls/cert.pem"));
    const QJsonObject enrollRequest{{QStringLiteral("name"), QStringLiteral("box")},
                                    {QStringLiteral("enrollment_token"), token.json().value(QStringLiteral("token"))}};
    auto enrolled = agent->request("POST", "/api/v1/agents/enroll", QJsonDocument(enrollRequest).toJson(),
                                   "application/json");
    QVERIFY(enrolled.ok());
    const QByteArray agentToken =
        QJsonDocument::fromJson(enrolled->body).object().value(QStringLiteral("agent_token")).toString().toLatin1();
    auto leased = agent->request("POST", "/api/v1/work/lease", R"({"max_tasks": 4})", "application/json", {}, agentToken);
    QVERIFY(leased.ok());
    const QJsonArray tasks = QJsonDocument::fromJson(leased->body).object().value(QStringLiteral("tasks")).toArray();
    QCOMPARE(tasks.size(), 4);

    // The result of each task: the weights it was handed, unchanged.
    QList<QByteArray> leases;
    QList<QByteArray> bodies;
    for (const auto& task : tasks) {
        leases << task.toObject().value(QStringLiteral("lease_id")).toString().toLatin1();
        bodies << unchangedResult(*agent, agentToken, task.toObject());
        QVERIFY(!bodies.last().isEmpty());
    }
    const auto send = [&](int i) {
        return agent->request("PUT", "/api/v1/work/" + leases[i] + "/result", bodies[i], "application/octet-stream",
                              {}, agentToken);
    };

    // Upload until the fault point ends the process (it may end after an answer, on the weights thread).
    int answered = 0;
    for (; answered < leases.size(); ++answered) {
        auto uploaded = send(answered);
        if (!uploaded.ok())
            break;
        QCOMPARE(uploaded->status, 202);
        QTest::qWait(200);
        if (m_server->state() != QProcess::Running)
            break;
    }
    if (m_server->state() != QProcess::NotRunning && !m_server->waitForFinished(20'000))
        QFAIL(qPrintable(QStringLiteral("the fault point was never reached; the server said:\n")
                         + QString::fromUtf8(m_server->readAllStandardError().right(3000))));
    QCOMPARE(m_server->exitCode(), 86);
    m_server.reset();

    // The agent sends again what it has no answer for: each result counts exactly once.
    QVERIFY(startServer());
    agent = std::make_unique<HttpsClient>(QStringLiteral("127.0.0.1"), m_port, m_dir + QStringLiteral("/tls/cert.pem"));
    for (int i = answered; i < leases.size(); ++i) {
        auto uploaded = send(i);
        QVERIFY(uploaded.ok());
        QVERIFY2(uploaded->status == 202 || (uploaded->status == 409 && uploaded->body.contains("duplicate")),
                 uploaded->body.constData());
    }
    QTRY_COMPARE_WITH_TIMEOUT(status().value(QStringLiteral("updates")).toInteger(), qint64(4), 20'000);
    const QJsonObject final = status();
    QCOMPARE(final.value(QStringLiteral("updates_received")).toInteger(), qint64(4));
    QCOMPARE(final.value(QStringLiteral("updates_not_folded")).toInteger(), qint64(0));
    stopServer(SIGTERM);
    // And once more from the snapshot the clean stop wrote: still four.
    QVERIFY(startServer());
    QCOMPARE(status().value(QStringLiteral("updates")).toInteger(), qint64(4));
    stopServer(SIGTERM);
}

void TestCoordinatorProcess::commandErrorsSayWhatToDo()
{
    const Run notRunning = cli(QStringList{QStringLiteral("job"), QStringLiteral("list")} + dataDir());
    QCOMPARE(notRunning.exitCode, 1);
    QVERIFY2(notRunning.err.contains("is the coordinator running?"), notRunning.err.constData());

    QVERIFY(startServer());
    const Run second = cli(QStringList{QStringLiteral("serve")} + dataDir());
    QCOMPARE(second.exitCode, 1);
    QVERIFY2(second.err.contains("another coordinator is already running"), second.err.constData());
    const Run notAnId = cli(QStringList{QStringLiteral("job"), QStringLiteral("status")} + dataDir() + QStringList{QStringLiteral("abc")});
    QCOMPARE(notAnId.exitCode, 2);
    const Run unknown = cli(QStringList{QStringLiteral("job"), QStringLiteral("status")} + dataDir() + QStringList{QStringLiteral("42")});
    QCOMPARE(unknown.exitCode, 1);
    QVERIFY(unknown.err.contains("no job has id 42"));
    const QString bad = m_scratch->filePath(QStringLiteral("bad.json"));
    QFile file(bad);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(R"({"name": "x", "shards": 0})");
    file.close();
    const Run invalid = cli(QStringList{QStringLiteral("job"), QStringLiteral("submit")} + dataDir() + QStringList{bad});
    QCOMPARE(invalid.exitCode, 1);
    QVERIFY2(invalid.err.contains("job.") || invalid.err.contains("dataset"), invalid.err.constData());
    const Run missingFile = cli(QStringList{QStringLiteral("job"), QStringLiteral("submit")} + dataDir()
                                + QStringList{QStringLiteral("/nonexistent.json")});
    QCOMPARE(missingFile.exitCode, 1);
    QVERIFY(missingFile.err.contains("/nonexistent.json"));
    const Run badDuration = cli(QStringList{QStringLiteral("token"), QStringLiteral("create")} + dataDir()
                                + QStringList{QStringLiteral("--expires"), QStringLiteral("soon")});
    QCOMPARE(badDuration.exitCode, 2);
    QVERIFY(badDuration.err.contains("30m, 12h or 7d"));
    // Days that overflow the expiry time are refused by name, before anything reaches the server.
    const Run hugeDuration = cli(QStringList{QStringLiteral("token"), QStringLiteral("create")} + dataDir()
                                 + QStringList{QStringLiteral("--expires"), QStringLiteral("9999999999999d")});
    QCOMPARE(hugeDuration.exitCode, 2);
    QVERIFY2(hugeDuration.err.contains("\"9999999999999d\" is longer than a token may live"), hugeDuration.err.constData());
    // Without --expires a token lives 7 days; "never" is asked for by name.
    const qint64 before = QDateTime::currentMSecsSinceEpoch();
    QCOMPARE(cli(QStringList{QStringLiteral("token"), QStringLiteral("create")} + dataDir()).exitCode, 0);
    QCOMPARE(cli(QStringList{QStringLiteral("token"), QStringLiteral("create")} + dataDir()
                 + QStringList{QStringLiteral("--expires"), QStringLiteral("never")})
                 .exitCode,
             0);
    const QJsonArray tokens = cli(QStringList{QStringLiteral("token"), QStringLiteral("list")} + dataDir()
                                  + QStringList{QStringLiteral("--json")})
                                  .json()
                                  .value(QStringLiteral("tokens"))
                                  .toArray();
    QVERIFY(tokens.size() >= 2);
    const qint64 expiresMs = tokens[tokens.size() - 2].toObject().value(QStringLiteral("expires_ms")).toInteger();
    QVERIFY2(expiresMs >= before + 7 * 86'400'000LL && expiresMs <= QDateTime::currentMSecsSinceEpoch() + 7 * 86'400'000LL,
             qPrintable(QString::number(expiresMs - before)));
    QVERIFY(tokens.last().toObject().value(QStringLiteral("expires_ms")).isNull());
    const Run wrongDir = cli({QStringLiteral("job"), QStringLiteral("list"), QStringLiteral("--data-dir"), QStringLiteral("/nonexistent")});
    QCOMPARE(wrongDir.exitCode, 1);
    QVERIFY(wrongDir.err.contains("gleaner-coordinator init"));
    stopServer(SIGTERM);
}

QTEST_GUILESS_MAIN(TestCoordinatorProcess)
#include "TestCoordinatorProcess.moc"
