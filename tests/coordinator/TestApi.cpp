// The v1 API over real HTTPS on an ephemeral loopback port, against the real coordinator core with a
// ManualClock: what an agent and an admin see on the wire.
#include "CoordinatorFixture.h"
#include "crypto/KeyRotation.h"
#include "TestSupport.h"

#include "api/ApiHandler.h"
#include "crypto/Sha256.h"
#include "crypto/SignedEnvelope.h"
#include "format/SafeTensors.h"
#include "http/HttpServer.h"
#include "http/HttpsClient.h"
#include "ml/Checkpoint.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

QJsonObject json(const ClientResponse& r)
{
    return QJsonDocument::fromJson(r.body).object();
}

} // namespace

class TestApi : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void agentCycleOverHttps();
    void reissueAfterDeadlineOverHttps();
    void refusals_data();
    void refusals();
    void oversizedUploadRefusedBeforeItsBody();
    void failureReportGivesTheLeaseBack();
    void adminEndpointsNeedTheAdminToken();
    void signingKeyRotationOverHttps();
    void handedBackCheckpointsCountAgainstTheirSenderOverHttps();

private:
    ClientResponse send(const QByteArray& method, const QByteArray& target, const QByteArray& token,
                        const QByteArray& body = {}, const QByteArray& type = "application/json");
    QByteArray enrollAgent(QString* agentId = nullptr);
    qint64 submitTinyJob(const QString& extra = QStringLiteral(R"(, "overlap_epochs": false)"));
    QByteArray resultBody(const TensorBundle& weights, qint64 baseVersion, const QString& nonce, qint64 samples = 64);
    // One task leased over HTTPS, its manifest verified with the coordinator's key; empty when none came.
    test::LeasedTask leaseOverHttps(const QByteArray& agentToken);
    qint64 invalidCount(const QString& agentId);
    TensorBundle exportWeights(qint64 job);

    test::CoordinatorFixture f;
    std::unique_ptr<ApiHandler> m_handler;
    std::unique_ptr<HttpServer> m_server;
    std::unique_ptr<HttpsClient> m_client;
    QString m_dataset;
};

void TestApi::init()
{
    QVERIFY(f.setUp(/*openEnrollment=*/false));
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
    m_handler = std::make_unique<ApiHandler>(*f.core);
    HttpServerOptions options;
    options.certificatePath = f.dir.certificatePath();
    options.privateKeyPath = f.dir.tlsKeyPath();
    options.uploadDir = f.dir.uploadsDir();
    m_server = std::make_unique<HttpServer>(options, *m_handler);
    const Status started = m_server->start();
    QVERIFY2(started.ok(), qPrintable(started.error()));
    m_client = std::make_unique<HttpsClient>(QStringLiteral("127.0.0.1"), m_server->port(), f.dir.certificatePath());
}

void TestApi::cleanup()
{
    m_client.reset();
    if (m_server)
        m_server->stop();
    m_server.reset();
    m_handler.reset();
    f.core.reset();
}

ClientResponse TestApi::send(const QByteArray& method, const QByteArray& target, const QByteArray& token,
                             const QByteArray& body, const QByteArray& type)
{
    auto response = m_client->request(method, target, body, body.isEmpty() ? QByteArray() : type, {}, token);
    if (!response) {
        qWarning() << response.error();
        return {};
    }
    return *response;
}

QByteArray TestApi::enrollAgent(QString* agentId)
{
    const ClientResponse created = send("POST", "/api/v1/admin/tokens", f.init.adminToken, "{}");
    const QByteArray token = json(created).value(QStringLiteral("token")).toString().toLatin1();
    const QJsonObject request{{QStringLiteral("name"), QStringLiteral("box")},
                              {QStringLiteral("platform"), QStringLiteral("linux")},
                              {QStringLiteral("enrollment_token"), QString::fromLatin1(token)}};
    const ClientResponse enrolled =
        send("POST", "/api/v1/agents/enroll", {}, QJsonDocument(request).toJson(QJsonDocument::Compact));
    if (agentId)
        *agentId = json(enrolled).value(QStringLiteral("agent_id")).toString();
    return json(enrolled).value(QStringLiteral("agent_token")).toString().toLatin1();
}

qint64 TestApi::submitTinyJob(const QString& extra)
{
    const ClientResponse submitted =
        send("POST", "/api/v1/admin/jobs", f.init.adminToken, test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60, extra));
    if (submitted.status != 201)
        qWarning() << submitted.body;
    const qint64 id = json(submitted).value(QStringLiteral("id")).toInteger();
    for (int i = 0; i < 200; ++i) {
        f.core->drain();
        const ClientResponse status = send("GET", "/api/v1/admin/jobs/" + QByteArray::number(id), f.init.adminToken);
        if (json(status).value(QStringLiteral("state")).toString() == u"running")
            return id;
        QTest::qWait(20);
    }
    return -1;
}

QByteArray TestApi::resultBody(const TensorBundle& weights, qint64 baseVersion, const QString& nonce, qint64 samples)
{
    TensorBundle result = weights;
    result.metadata().clear();
    result.setMetadata(QStringLiteral("gleaner.nonce"), nonce);
    result.setMetadata(QStringLiteral("gleaner.base_version"), QString::number(baseVersion));
    result.setMetadata(QStringLiteral("gleaner.samples"), QString::number(samples));
    result.setMetadata(QStringLiteral("gleaner.loss"), QStringLiteral("0.25"));
    result.setMetadata(QStringLiteral("gleaner.train_seconds"), QStringLiteral("1.5"));
    return SafeTensors::serialize(result);
}

test::LeasedTask TestApi::leaseOverHttps(const QByteArray& agentToken)
{
    const ClientResponse leased = send("POST", "/api/v1/work/lease", agentToken, R"({"max_tasks": 1, "cached": []})");
    const QJsonArray tasks = json(leased).value(QStringLiteral("tasks")).toArray();
    if (tasks.isEmpty())
        return {};
    auto key = VerifyKey::fromPem(f.init.signingPublicKeyPem);
    auto envelope = SignedEnvelope::fromJson(tasks.first().toObject());
    auto manifest = envelope ? SignedEnvelope::verify(*key, *envelope) : Result<QJsonObject>(fail(envelope.error()));
    if (!manifest)
        return {};
    return {tasks.first().toObject().value(QStringLiteral("lease_id")).toString(), *manifest};
}

qint64 TestApi::invalidCount(const QString& agentId)
{
    const QJsonObject agents = json(send("GET", "/api/v1/admin/agents", f.init.adminToken));
    for (const auto& a : agents.value(QStringLiteral("agents")).toArray())
        if (a.toObject().value(QStringLiteral("id")).toString() == agentId)
            return a.toObject().value(QStringLiteral("invalid")).toInteger();
    return -1;
}

TensorBundle TestApi::exportWeights(qint64 job)
{
    f.core->drain();
    const ClientResponse r = send("GET", "/api/v1/admin/jobs/" + QByteArray::number(job) + "/weights", f.init.adminToken);
    auto bundle = SafeTensors::parse(r.body);
    return bundle ? *bundle : TensorBundle();
}

void TestApi::agentCycleOverHttps()
{
    const ClientResponse info = send("GET", "/api/v1/info", {});
    QCOMPARE(info.status, 200);
    auto key = VerifyKey::fromPem(json(info).value(QStringLiteral("signing_public_key")).toString().toLatin1());
    QVERIFY(key.ok());

    const QByteArray agentToken = enrollAgent();
    QVERIFY(agentToken.startsWith("gag_"));
    const qint64 job = submitTinyJob();
    QVERIFY(job > 0);
    const TensorBundle before = exportWeights(job);
    QVERIFY(!before.isEmpty());

    const ClientResponse leased = send("POST", "/api/v1/work/lease", agentToken, R"({"max_tasks": 1, "cached": []})");
    QCOMPARE(leased.status, 200);
    const QJsonObject task = json(leased).value(QStringLiteral("tasks")).toArray().first().toObject();
    auto envelope = SignedEnvelope::fromJson(task);
    QVERIFY(envelope.ok());
    auto manifest = SignedEnvelope::verify(*key, *envelope);
    QVERIFY2(manifest.ok(), qPrintable(manifest.error()));

    // Every file of the manifest downloads, hashes to its name, and carries that name as its ETag.
    for (const auto& value : manifest->value(QStringLiteral("files")).toArray()) {
        const QJsonObject file = value.toObject();
        const QByteArray sha = file.value(QStringLiteral("sha256")).toString().toLatin1();
        const ClientResponse got = send("GET", "/api/v1/files/" + sha, agentToken);
        QCOMPARE(got.status, 200);
        QCOMPARE(Sha256::toHex(Sha256::hash(got.body)).toLatin1(), sha);
        QCOMPARE(got.body.size(), file.value(QStringLiteral("size")).toInteger());
        QCOMPARE(got.header("ETag"), '"' + sha + '"');
    }

    const QByteArray leaseId = task.value(QStringLiteral("lease_id")).toString().toLatin1();
    const ClientResponse progress =
        send("POST", "/api/v1/work/" + leaseId + "/progress", agentToken, R"({"step": 1, "of": 4, "loss": 1.2})");
    QCOMPARE(progress.status, 200);
    QCOMPARE(json(progress).value(QStringLiteral("abort")).toBool(), false);

    TensorBundle client = before;
    for (const auto& entry : client.entries())
        for (float& v : client.mutableValues<float>(entry))
            v -= 0.03f; // a plausible local epoch: a far move is refused (TestHostileUpdates)
    const QString nonce = manifest->value(QStringLiteral("nonce")).toString();
    const ClientResponse uploaded = send("PUT", "/api/v1/work/" + leaseId + "/result", agentToken,
                                         resultBody(client, 0, nonce), "application/octet-stream");
    QCOMPARE(uploaded.status, 202);
    const ClientResponse again = send("PUT", "/api/v1/work/" + leaseId + "/result", agentToken,
                                      resultBody(client, 0, nonce), "application/octet-stream");
    QCOMPARE(again.status, 409); // the lease is closed: never folded in twice, and refused before its body
    QVERIFY(json(again).value(QStringLiteral("error")).toString().contains(u"duplicate"));

    // VC-ASGD, epoch 1: W <- 1/2 W + 1/2 W_c, exactly.
    const TensorBundle after = exportWeights(job);
    for (const auto& entry : before.entries()) {
        const auto w0 = before.values<float>(entry);
        const auto c = client.values<float>(*client.find(entry.name));
        const auto w1 = after.values<float>(*after.find(entry.name));
        for (size_t i = 0; i < w0.size(); ++i)
            QCOMPARE(w1[i], 0.5f * w0[i] + 0.5f * c[i]);
    }
    const QJsonObject status = json(send("GET", "/api/v1/admin/jobs/" + QByteArray::number(job), f.init.adminToken));
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 1);
    // One kept-alive connection carried it all, but for the refused duplicate: a request refused before its body
    // is read ends its connection (the unread body cannot be skipped safely).
    QCOMPARE(m_client->connectionsOpened(), 2);
}

void TestApi::reissueAfterDeadlineOverHttps()
{
    const QByteArray slow = enrollAgent();
    const QByteArray fast = enrollAgent();
    const qint64 job = submitTinyJob();
    QVERIFY(job > 0);
    const ClientResponse first = send("POST", "/api/v1/work/lease", slow, R"({"max_tasks": 2})");
    QCOMPARE(json(first).value(QStringLiteral("tasks")).toArray().size(), 2);
    const ClientResponse none = send("POST", "/api/v1/work/lease", fast, "{}");
    QVERIFY(json(none).value(QStringLiteral("tasks")).toArray().isEmpty());
    QVERIFY(json(none).value(QStringLiteral("retry_after")).toInt() > 0);

    f.clock.advance(60'001); // past the 60 s deadline, without sleeping
    const ClientResponse second = send("POST", "/api/v1/work/lease", fast, R"({"max_tasks": 2})");
    QCOMPARE(json(second).value(QStringLiteral("tasks")).toArray().size(), 2);
}

void TestApi::refusals_data()
{
    QTest::addColumn<QByteArray>("method");
    QTest::addColumn<QByteArray>("target");
    QTest::addColumn<QByteArray>("token");
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("message");
    QTest::newRow("no token") << QByteArray("POST") << QByteArray("/api/v1/work/lease") << QByteArray() << QByteArray("{}") << 401 << "Authorization";
    QTest::newRow("unknown token") << QByteArray("POST") << QByteArray("/api/v1/work/lease") << QByteArray("gag_nope") << QByteArray("{}") << 401 << "not valid";
    QTest::newRow("agent token on admin API") << QByteArray("GET") << QByteArray("/api/v1/admin/jobs") << QByteArray("AGENT") << QByteArray() << 401 << "admin token";
    QTest::newRow("bad JSON") << QByteArray("POST") << QByteArray("/api/v1/work/lease") << QByteArray("AGENT") << QByteArray("{nope") << 400 << "JSON object";
    QTest::newRow("unknown endpoint") << QByteArray("GET") << QByteArray("/api/v1/nothing") << QByteArray("AGENT") << QByteArray() << 404 << "no such endpoint";
    QTest::newRow("not the API") << QByteArray("GET") << QByteArray("/etc/passwd") << QByteArray() << QByteArray() << 404 << "no such endpoint";
    QTest::newRow("path traversal in files") << QByteArray("GET") << QByteArray("/api/v1/files/..%2f..%2fconfig.json") << QByteArray("AGENT") << QByteArray() << 404 << "SHA-256";
    QTest::newRow("unknown file") << QByteArray("GET") << QByteArray("/api/v1/files/") + QByteArray(64, 'a') << QByteArray("AGENT") << QByteArray() << 404 << "SHA-256";
    QTest::newRow("unknown lease result") << QByteArray("PUT") << QByteArray("/api/v1/work/abc/result") << QByteArray("AGENT") << QByteArray("x") << 404 << "not open";
    QTest::newRow("invalid result") << QByteArray("PUT") << QByteArray("LEASE") << QByteArray("AGENT") << QByteArray("not safetensors") << 422 << "not a valid safetensors file";
    QTest::newRow("enroll without token") << QByteArray("POST") << QByteArray("/api/v1/agents/enroll") << QByteArray() << QByteArray(R"({"name": "x"})") << 401 << "enrollment token";
    QTest::newRow("wrong method") << QByteArray("DELETE") << QByteArray("/api/v1/info") << QByteArray() << QByteArray() << 405 << "GET";
}

void TestApi::refusals()
{
    QFETCH(QByteArray, method);
    QFETCH(QByteArray, target);
    QFETCH(QByteArray, token);
    QFETCH(QByteArray, body);
    QFETCH(int, status);
    QFETCH(QString, message);
    const QByteArray agentToken = enrollAgent();
    if (token == "AGENT")
        token = agentToken;
    if (target == "LEASE") {
        QVERIFY(submitTinyJob() > 0);
        const ClientResponse leased = send("POST", "/api/v1/work/lease", agentToken, "{}");
        target = "/api/v1/work/"
                 + json(leased).value(QStringLiteral("tasks")).toArray().first()[QStringLiteral("lease_id")].toString().toLatin1()
                 + "/result";
    }
    const ClientResponse r = send(method, target, token, body);
    QCOMPARE(r.status, status);
    const QString error = json(r).value(QStringLiteral("error")).toString();
    QVERIFY2(error.contains(message), qPrintable(error));
    QCOMPARE(send("GET", "/api/v1/info", {}).status, 200); // and the server is still healthy
}

void TestApi::oversizedUploadRefusedBeforeItsBody()
{
    const QByteArray agentToken = enrollAgent();
    QVERIFY(submitTinyJob() > 0);
    const ClientResponse leased = send("POST", "/api/v1/work/lease", agentToken, "{}");
    const QByteArray leaseId =
        json(leased).value(QStringLiteral("tasks")).toArray().first()[QStringLiteral("lease_id")].toString().toLatin1();
    // The tiny model is a few kilobytes: 8 MB is far past its size plus slack.
    const ClientResponse r = send("PUT", "/api/v1/work/" + leaseId + "/result", agentToken, QByteArray(8 << 20, 'x'),
                                  "application/octet-stream");
    QCOMPARE(r.status, 413);
    QCOMPARE(send("GET", "/api/v1/info", {}).status, 200);
}

void TestApi::failureReportGivesTheLeaseBack()
{
    QString sickId;
    const QByteArray sick = enrollAgent(&sickId);
    const QByteArray other = enrollAgent();
    const qint64 job = submitTinyJob();
    QVERIFY(job > 0);
    const ClientResponse leased = send("POST", "/api/v1/work/lease", sick, R"({"max_tasks": 1})");
    const QJsonObject task = json(leased).value(QStringLiteral("tasks")).toArray().first().toObject();
    const QByteArray leaseId = task.value(QStringLiteral("lease_id")).toString().toLatin1();
    const QByteArray path = "/api/v1/work/" + leaseId + "/fail";
    const QByteArray report = R"({"stage": "download", "reason": "shard 1: SHA-256 mismatch"})";
    const auto error = [](const ClientResponse& r) {
        return json(r).value(QStringLiteral("error")).toString();
    };

    // Refusals leave the lease as it was.
    ClientResponse r = send("GET", path, sick);
    QCOMPARE(r.status, 405);
    QCOMPARE(r.header("Allow"), QByteArray("POST"));
    QCOMPARE(send("POST", path, {}, report).status, 401);
    QCOMPARE(send("POST", path, f.init.adminToken, report).status, 401);
    r = send("POST", path, sick, R"(["download"])");
    QCOMPARE(r.status, 400);
    QVERIFY2(error(r).contains(u"JSON object"), qPrintable(error(r)));
    r = send("POST", path, sick, R"({"reason": "x", "stage": "unpacking"})");
    QCOMPARE(r.status, 400);
    QVERIFY2(error(r).startsWith(u"stage:"), qPrintable(error(r)));
    r = send("POST", path, sick, R"({"stage": "worker"})");
    QCOMPARE(r.status, 400);
    QVERIFY2(error(r).startsWith(u"reason:"), qPrintable(error(r)));
    QCOMPARE(
        send("POST", path, sick, R"({"stage": "other", "reason": ")" + QByteArray(64 * 1024, 'x') + R"("})")
            .status,
        413);
    r = send("POST", path, other, report);
    QCOMPARE(r.status, 409);
    QVERIFY2(error(r).contains(u"belongs to another agent"), qPrintable(error(r)));
    r = send("POST", "/api/v1/work/" + QByteArray(32, 'a') + "/fail", sick, report);
    QCOMPARE(r.status, 404);
    QVERIFY2(error(r).contains(u"is not known"), qPrintable(error(r)));

    r = send("POST", path, sick, report);
    QCOMPARE(r.status, 200);
    QCOMPARE(json(r), (QJsonObject{{QStringLiteral("released"), true}}));

    // Closed: the repeat, a progress report and an upload (before its body) get the same 409.
    const QString closed =
        QStringLiteral("lease %1 is closed: the agent reported it failed").arg(QString::fromLatin1(leaseId));
    r = send("POST", path, sick, report);
    QCOMPARE(r.status, 409);
    QCOMPARE(error(r), closed);
    r = send("POST", "/api/v1/work/" + leaseId + "/progress", sick, "{}");
    QCOMPARE(r.status, 409);
    QCOMPARE(error(r), closed);
    r = send("PUT", "/api/v1/work/" + leaseId + "/result", sick, resultBody(exportWeights(job), 0, {}),
             "application/octet-stream");
    QCOMPARE(r.status, 409);
    QCOMPARE(error(r), closed);

    // Its workunit went straight back to the queue: the other agent gets both shards now, not in 60 s.
    const ClientResponse reissued = send("POST", "/api/v1/work/lease", other, R"({"max_tasks": 2})");
    QCOMPARE(json(reissued).value(QStringLiteral("tasks")).toArray().size(), 2);
    const QJsonArray agents = json(send("GET", "/api/v1/admin/agents", f.init.adminToken))
                                  .value(QStringLiteral("agents"))
                                  .toArray();
    for (const auto& a : agents)
        QCOMPARE(a.toObject().value(QStringLiteral("failed")).toInteger(),
                 a.toObject().value(QStringLiteral("id")).toString() == sickId ? 1 : 0);
    QCOMPARE(agents.size(), 2);
}

void TestApi::adminEndpointsNeedTheAdminToken()
{
    const ClientResponse refused = send("GET", "/api/v1/admin/agents", "gla_wrong");
    QCOMPARE(refused.status, 401);
    QString agentId;
    const QByteArray agentToken = enrollAgent(&agentId);
    const ClientResponse agents = send("GET", "/api/v1/admin/agents", f.init.adminToken);
    QCOMPARE(agents.status, 200);
    QCOMPARE(json(agents).value(QStringLiteral("agents")).toArray().size(), 1);
    QCOMPARE(send("POST", "/api/v1/admin/agents/" + agentId.toLatin1() + "/revoke", f.init.adminToken).status, 200);
    const ClientResponse revoked = send("POST", "/api/v1/work/lease", agentToken, "{}");
    QCOMPARE(revoked.status, 403);
    QVERIFY(json(revoked).value(QStringLiteral("error")).toString().contains(u"revoked"));
}

void TestApi::signingKeyRotationOverHttps()
{
    // The key list is public; a rotation needs the admin token; lease replies name the key in force.
    const ClientResponse before = send("GET", "/api/v1/signing-keys", {});
    QCOMPARE(before.status, 200);
    const QString first = json(before).value(QStringLiteral("fingerprint")).toString();
    QCOMPARE(first, VerifyKey::fromPem(f.init.signingPublicKeyPem)->fingerprint());
    QCOMPARE(json(before).value(QStringLiteral("rotations")).toArray().size(), 0);
    QCOMPARE(send("POST", "/api/v1/signing-keys", {}).status, 405);

    const QByteArray agentToken = enrollAgent();
    QCOMPARE(send("POST", "/api/v1/admin/signing-key/rotate", agentToken).status, 401);
    QCOMPARE(json(send("POST", "/api/v1/work/lease", agentToken, "{}")).value(QStringLiteral("signing_key")).toString(),
             first);

    const ClientResponse rotated = send("POST", "/api/v1/admin/signing-key/rotate", f.init.adminToken);
    QCOMPARE(rotated.status, 200);
    const QString second = json(rotated).value(QStringLiteral("fingerprint")).toString();
    QVERIFY(second != first);
    const QJsonObject after = json(send("GET", "/api/v1/admin/signing-key", f.init.adminToken));
    QCOMPARE(after.value(QStringLiteral("fingerprint")).toString(), second);
    auto chain = KeyRotation::listFromJson(after.value(QStringLiteral("rotations")));
    QVERIFY(chain.ok());
    QVERIFY(KeyRotation::follow(*VerifyKey::fromPem(f.init.signingPublicKeyPem), *chain, second).ok());
    QCOMPARE(json(send("POST", "/api/v1/work/lease", agentToken, "{}")).value(QStringLiteral("signing_key")).toString(),
             second);
}

// A hostile agent that leaves hands its lease back over the wire with a forged checkpoint: a genuine one with
// `samples` raised by 16 and its checksum recomputed. It is refused (the checker thread's checks), counted
// against the hostile agent, and never named to the next agent. A genuine checkpoint is kept; when the result the
// honest agent trained on from it is refused, that counts against the agent that handed it back, not against the
// honest one, and the workunit starts afresh.
void TestApi::handedBackCheckpointsCountAgainstTheirSenderOverHttps()
{
    QString hostileId, honestId;
    const QByteArray hostile = enrollAgent(&hostileId);
    const QByteArray honest = enrollAgent(&honestId);
    QVERIFY(submitTinyJob() > 0);

    const test::LeasedTask forgedLease = leaseOverHttps(hostile);
    QVERIFY(!forgedLease.leaseId.isEmpty());
    auto forged = SafeTensors::parse(f.checkpointOf(forgedLease, 2));
    QVERIFY(forged.ok());
    auto info = ml::CheckpointInfo::readFrom(*forged);
    QVERIFY2(info.ok(), qPrintable(info.error()));
    info->samples += 16;
    info->writeTo(*forged);
    ClientResponse handed = send("PUT", "/api/v1/work/" + forgedLease.leaseId.toLatin1() + "/handback", hostile,
                                 SafeTensors::serialize(*forged), "application/octet-stream");
    QCOMPARE(handed.status, 200);
    QCOMPARE(json(handed).value(QStringLiteral("checkpoint")).toString(), QStringLiteral("refused"));
    QVERIFY2(json(handed).value(QStringLiteral("reason")).toString().contains(u"samples is"), handed.body.constData());
    QCOMPARE(invalidCount(hostileId), 1);

    // The honest agent trains the workunit from step 0; its result is taken.
    const test::LeasedTask fresh = leaseOverHttps(honest);
    QVERIFY(!fresh.leaseId.isEmpty());
    QVERIFY(!fresh.manifest.contains(QStringLiteral("resume")));
    ClientResponse uploaded =
        send("PUT", "/api/v1/work/" + fresh.leaseId.toLatin1() + "/result", honest,
             resultBody(f.leaseBase(fresh.leaseId), fresh.manifest.value(QStringLiteral("base_version")).toInteger(),
                        fresh.manifest.value(QStringLiteral("nonce")).toString()),
             "application/octet-stream");
    QCOMPARE(uploaded.status, 202);

    // A genuine checkpoint, kept; the result trained on from it is refused: the sender is counted, not the resumer.
    const test::LeasedTask genuineLease = leaseOverHttps(hostile);
    QVERIFY(!genuineLease.leaseId.isEmpty());
    handed = send("PUT", "/api/v1/work/" + genuineLease.leaseId.toLatin1() + "/handback", hostile,
                  f.checkpointOf(genuineLease, 2), "application/octet-stream");
    QCOMPARE(handed.status, 200);
    QCOMPARE(json(handed).value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    const test::LeasedTask resumed = leaseOverHttps(honest);
    QVERIFY(resumed.manifest.contains(QStringLiteral("resume")));
    uploaded = send("PUT", "/api/v1/work/" + resumed.leaseId.toLatin1() + "/result", honest,
                    resultBody(f.leaseBase(resumed.leaseId),
                               resumed.manifest.value(QStringLiteral("base_version")).toInteger(),
                               resumed.manifest.value(QStringLiteral("nonce")).toString(), 1000000),
                    "application/octet-stream");
    QCOMPARE(uploaded.status, 422);
    QCOMPARE(invalidCount(honestId), 0);
    QCOMPARE(invalidCount(hostileId), 2);
    const test::LeasedTask again = leaseOverHttps(honest);
    QVERIFY(!again.leaseId.isEmpty());
    QVERIFY(!again.manifest.contains(QStringLiteral("resume")));
}

QTEST_GUILESS_MAIN(TestApi)
#include "TestApi.moc"
