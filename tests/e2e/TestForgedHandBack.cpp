// A hostile agent that leaves hands back a forged checkpoint, against a real gleaner-coordinator and a real
// gleaner-agent on the loopback interface. The hostile agent is this test, speaking the protocol over HTTPS: it
// trains two mini-batches of its subtask with the same libtorch code a worker runs, raises the checkpoint's
// `samples` by 16, recomputes the checksum (as anyone can) and hands the lease back. The forgery must count against
// its sender; the honest agent that trains the workunit next must not be counted nor quarantined, and the job must
// complete.
#include "E2eCluster.h"
#include "TestSupport.h"
#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "http/HttpsClient.h"
#include "ml/Checkpoint.h"
#include "ml/Trainer.h"
#include "spec/ModelSpec.h"
#include "spec/OptimizerSpec.h"

#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {

QJsonObject json(const coordinator::ClientResponse& r)
{
    return QJsonDocument::fromJson(r.body).object();
}

} // namespace

class TestForgedHandBack : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void cleanup();
    void forgedCheckpointCountsAgainstItsSenderNotTheNextAgent();

private:
    // A request as the hostile agent (or the admin) sends it; a failed request is the test's failure.
    coordinator::ClientResponse send(const QByteArray& method, const QByteArray& target, const QByteArray& token,
                                     const QByteArray& body = {}, const QByteArray& type = "application/json");
    // A genuine checkpoint of the lease's subtask after two mini-batches, trained from the files it names.
    QByteArray checkpointOf(const QJsonObject& manifest, const QByteArray& token);

    std::unique_ptr<QTemporaryDir> m_scratch;
    std::unique_ptr<E2eCluster> m_cluster;
    std::unique_ptr<coordinator::HttpsClient> m_client;
};

void TestForgedHandBack::initTestCase()
{
    QVERIFY2(QFileInfo::exists(test::fashionMnistDir() + QStringLiteral("/train-images-idx3-ubyte.gz")),
             qPrintable(QStringLiteral("Fashion-MNIST is missing from %1; install dataset-fashion-mnist")
                            .arg(test::fashionMnistDir())));
    m_scratch = test::scratchDir();
    m_cluster = std::make_unique<E2eCluster>(m_scratch->path());
    E2E_VERIFY(m_cluster->initCoordinator());
    E2E_VERIFY(m_cluster->startCoordinator());
    m_client = std::make_unique<coordinator::HttpsClient>(QStringLiteral("127.0.0.1"), m_cluster->port(),
                                                          m_cluster->certificatePath());
}

void TestForgedHandBack::cleanup()
{
    if (QTest::currentTestFailed() && m_cluster)
        qWarning().noquote() << m_cluster->logTails(60);
}

coordinator::ClientResponse TestForgedHandBack::send(const QByteArray& method, const QByteArray& target,
                                                     const QByteArray& token, const QByteArray& body,
                                                     const QByteArray& type)
{
    auto response = m_client->request(method, target, body, body.isEmpty() ? QByteArray() : type, {}, token);
    if (!response) {
        qWarning().noquote() << method << target << response.error();
        return {};
    }
    return *response;
}

QByteArray TestForgedHandBack::checkpointOf(const QJsonObject& manifest, const QByteArray& token)
{
    QByteArray shardBytes, weightsBytes;
    for (const auto& value : manifest.value(QStringLiteral("files")).toArray()) {
        const QJsonObject file = value.toObject();
        const QByteArray sha = file.value(QStringLiteral("sha256")).toString().toLatin1();
        const QString role = file.value(QStringLiteral("role")).toString();
        if (role == u"shard")
            shardBytes = send("GET", "/api/v1/files/" + sha, token).body;
        else if (role == u"weights")
            weightsBytes = send("GET", "/api/v1/files/" + sha, token).body;
    }
    auto shardBundle = SafeTensors::parse(shardBytes);
    auto weights = SafeTensors::parse(weightsBytes);
    if (!shardBundle || !weights)
        return {};
    auto shard = ml::Dataset::fromBundle(*shardBundle, QStringLiteral("shard"));
    if (!shard)
        return {};
    const QJsonObject hyper = manifest.value(QStringLiteral("hyperparameters")).toObject();
    ml::TrainRequest request;
    request.model = *ModelSpec::fromJson(manifest.value(QStringLiteral("model")).toObject());
    request.optimizer = *OptimizerSpec::fromJson(hyper.value(QStringLiteral("optimizer")).toObject());
    request.localEpochs = hyper.value(QStringLiteral("local_epochs")).toInt();
    request.batchSize = hyper.value(QStringLiteral("batch_size")).toInt();
    request.steps = hyper.value(QStringLiteral("steps")).toInteger(0);
    request.seed = quint64(hyper.value(QStringLiteral("seed")).toInteger());
    request.threads = 1;
    request.checkpointPath = m_scratch->filePath(QStringLiteral("hostile-checkpoint.safetensors"));
    request.checkpointIntervalSeconds = 0;
    ml::TrainHooks hooks;
    hooks.betweenBatches = [](const ml::TrainProgress& p) {
        return p.step >= 2 ? ml::TrainControl::CheckpointAndStop : ml::TrainControl::Continue;
    };
    auto stopped = ml::Trainer::train(request, *weights, *shard, hooks);
    if (!stopped || stopped->status != ml::TrainOutcome::Status::Stopped)
        return {};
    return test::readFile(request.checkpointPath);
}

void TestForgedHandBack::forgedCheckpointCountsAgainstItsSenderNotTheNextAgent()
{
    QJsonObject spec = E2eCluster::fashionJob();
    spec.insert(QStringLiteral("name"), QStringLiteral("forged-hand-back"));
    spec.insert(QStringLiteral("shards"), 2);
    spec.insert(QStringLiteral("max_epochs"), 1);
    spec.insert(QStringLiteral("target_accuracy"), 0.99);
    auto job = m_cluster->submitJob(spec);
    E2E_VERIFY(job);
    E2E_VERIFY(m_cluster->waitForJobState(*job, QStringLiteral("running"), 60'000));

    // The hostile agent enrolls, leases, trains two mini-batches and hands back the forgery.
    const QByteArray admin = m_cluster->adminToken();
    const QByteArray enrollment =
        json(send("POST", "/api/v1/admin/tokens", admin, "{}")).value(QStringLiteral("token")).toString().toLatin1();
    QVERIFY(!enrollment.isEmpty());
    const QJsonObject enrolled =
        json(send("POST", "/api/v1/agents/enroll", {},
                  QJsonDocument(QJsonObject{{QStringLiteral("name"), QStringLiteral("hostile")},
                                            {QStringLiteral("platform"), QStringLiteral("linux")},
                                            {QStringLiteral("enrollment_token"), QString::fromLatin1(enrollment)}})
                      .toJson(QJsonDocument::Compact)));
    const QByteArray hostile = enrolled.value(QStringLiteral("agent_token")).toString().toLatin1();
    QVERIFY(!hostile.isEmpty());
    QJsonObject task;
    QElapsedTimer waited;
    waited.start();
    while (task.isEmpty() && waited.elapsed() < 30'000) {
        const QJsonArray tasks =
            json(send("POST", "/api/v1/work/lease", hostile, R"({"max_tasks": 1, "cached": []})"))
                .value(QStringLiteral("tasks"))
                .toArray();
        if (!tasks.isEmpty())
            task = tasks.first().toObject();
        else
            QTest::qWait(500);
    }
    QVERIFY2(!task.isEmpty(), "the hostile agent got no lease");
    const QByteArray leaseId = task.value(QStringLiteral("lease_id")).toString().toLatin1();
    // The manifest as signed (this test trusts its own coordinator; the agent's verification is tested elsewhere).
    const QJsonObject manifest =
        QJsonDocument::fromJson(task.value(QStringLiteral("manifest")).toString().toUtf8()).object();
    QVERIFY2(!manifest.isEmpty(), qPrintable(QJsonDocument(task).toJson()));
    auto forged = SafeTensors::parse(checkpointOf(manifest, hostile));
    E2E_VERIFY(forged);
    auto info = ml::CheckpointInfo::readFrom(*forged);
    E2E_VERIFY(info);
    info->samples += 16;
    info->writeTo(*forged);
    const coordinator::ClientResponse handed = send("PUT", "/api/v1/work/" + leaseId + "/handback", hostile,
                                                    SafeTensors::serialize(*forged), "application/octet-stream");
    QCOMPARE(handed.status, 200);
    QCOMPARE(json(handed).value(QStringLiteral("checkpoint")).toString(), QStringLiteral("refused"));
    QVERIFY2(json(handed).value(QStringLiteral("reason")).toString().contains(u"samples is"), handed.body.constData());

    // An honest agent runs the job to its end, never counted for the forgery; its sender is.
    auto honest = m_cluster->enrollAgent(QStringLiteral("honest"));
    E2E_VERIFY(honest);
    E2E_VERIFY(m_cluster->startAgent(*honest, E2eCluster::quickAgentOptions()));
    E2E_VERIFY(m_cluster->waitForJobState(*job, QStringLiteral("completed"), 120'000));
    const QJsonObject honestRecord = m_cluster->agentRecord(QStringLiteral("honest"));
    QCOMPARE(honestRecord.value(QStringLiteral("invalid")).toInteger(-1), 0);
    QCOMPARE(honestRecord.value(QStringLiteral("quarantined")).toBool(), false);
    QCOMPARE(honestRecord.value(QStringLiteral("done")).toInteger(), 2);
    QCOMPARE(m_cluster->agentRecord(QStringLiteral("hostile")).value(QStringLiteral("invalid")).toInteger(-1), 1);
}

QTEST_GUILESS_MAIN(TestForgedHandBack)
#include "TestForgedHandBack.moc"
