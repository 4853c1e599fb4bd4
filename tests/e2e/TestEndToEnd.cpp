// Gleaner end to end, as a lab would run it: a real gleaner-coordinator and real gleaner-agent processes on
// the loopback interface, training Fashion-MNIST in real gleaner-worker processes, with the faults issue 4
// names: an agent killed mid-subtask, an agent killed and restarted, a file altered on the coordinator's
// disk, a manifest whose signature does not verify, the coordinator killed and restarted mid-job.
#include "E2eCluster.h"
#include "ProcessProbe.h"
#include "TestSupport.h"
#include "http/HttpsClient.h"

#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QHash>
#include <QJsonDocument>
#include <QProcess>
#include <QRegularExpression>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QTest>
#include <QUrl>

#include <linux/landlock.h>
#include <sys/syscall.h>
#include <unistd.h>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {

// A job whose subtasks keep a worker busy for a while on one core: a CNN, `localEpochs` passes over each
// shard.
QJsonObject cnnJob(const QString& name, int shards, int localEpochs, int deadlineSeconds)
{
    QJsonObject job = E2eCluster::fashionJob();
    job.insert(QStringLiteral("name"), name);
    job.insert(QStringLiteral("model"), QJsonObject{{QStringLiteral("arch"), QStringLiteral("cnn")},
                                                    {QStringLiteral("input_shape"), QJsonArray{1, 28, 28}},
                                                    {QStringLiteral("num_classes"), 10}});
    job.insert(QStringLiteral("shards"), shards);
    job.insert(QStringLiteral("local_epochs"), localEpochs);
    job.insert(QStringLiteral("max_epochs"), 1);
    job.insert(QStringLiteral("target_accuracy"), 0.99);
    job.insert(QStringLiteral("deadline_seconds"), deadlineSeconds);
    return job;
}

QJsonObject smallMlpJob(const QString& name)
{
    QJsonObject job = E2eCluster::fashionJob();
    job.insert(QStringLiteral("name"), name);
    job.insert(QStringLiteral("shards"), 2);
    job.insert(QStringLiteral("max_epochs"), 1);
    job.insert(QStringLiteral("target_accuracy"), 0.99);
    return job;
}

qint64 counter(const QJsonObject& record, const char* name)
{
    return record.value(QLatin1StringView(name)).toInteger(-1);
}

// "epoch 1: 0.712, epoch 2: 0.774, ..." from a job's validation history.
QString accuracies(const QJsonObject& job)
{
    QStringList parts;
    for (const auto& value : job.value(QStringLiteral("history")).toArray()) {
        const QJsonObject h = value.toObject();
        parts << QStringLiteral("epoch %1: %2")
                     .arg(h.value(QStringLiteral("epoch")).toInteger())
                     .arg(h.value(QStringLiteral("accuracy")).toDouble(), 0, 'f', 3);
    }
    return parts.join(QStringLiteral(", "));
}

QStringList lines(const QString& text, const QRegularExpression& pattern)
{
    QStringList found;
    for (auto it = pattern.globalMatch(text); it.hasNext();)
        found << it.next().captured(0);
    return found;
}

} // namespace

class TestEndToEnd : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void init();
    void cleanup();
    void twoAgentsReachTheTargetAccuracy();
    void compressedTransfersReachTheTarget();
    void killedAgentsSubtaskIsCarriedByTheOther();
    void restartedAgentResumesFromItsCheckpoint();
    void stoppedAgentHandsItsSubtaskBack();
    void batchAgentsLeaveAtTheirRuntimeAndWhenTheQueueIsEmpty();
    void alteredShardIsRefusedAndReported();
    void brokenSignatureIsRefusedWithBackoff();
    void coordinatorKilledAndRestartedMidJob();
    void pausedAgentKeepsItsLease();
    void restartWhileCoordinatorDownRunsOneWorkerPerLease();
    void oneOfTwoCoordinatorsKilledMidJob();

private:
    // Enrolls and starts agents named `names` with `options`; their indices.
    QList<int> startAgents(const QStringList& names, const QStringList& options);
    // Polls `gleaner-agent status --json` until a subtask trains between its first and last step.
    bool waitForTrainingStep(int agent, int timeoutMs);
    // nginx sent the agents' downloads from the shared folder (X-Accel-Redirect), answers Range with If-Range
    // under the coordinator's entity tag, and serves the folder to no one directly.
    void checkFilesSentByProxy();

    std::unique_ptr<QTemporaryDir> m_scratch;
    std::unique_ptr<E2eCluster> m_cluster;
    QElapsedTimer m_caseTime;
};

void TestEndToEnd::initTestCase()
{
    QVERIFY2(QFileInfo::exists(test::fashionMnistDir() + QStringLiteral("/train-images-idx3-ubyte.gz")),
             qPrintable(QStringLiteral("Fashion-MNIST is missing from %1; install dataset-fashion-mnist")
                            .arg(test::fashionMnistDir())));
    QVERIFY2(QFileInfo(workerProgram()).isExecutable(), qPrintable(workerProgram()));
}

void TestEndToEnd::init()
{
    m_caseTime.start();
    m_scratch = test::scratchDir();
    m_cluster = std::make_unique<E2eCluster>(m_scratch->path());
    E2E_VERIFY(m_cluster->initCoordinator());
    E2E_VERIFY(m_cluster->startCoordinator());
}

void TestEndToEnd::cleanup()
{
    if (QTest::currentTestFailed() && m_cluster) {
        qWarning().noquote() << m_cluster->logTails(60);
        if (qEnvironmentVariableIsSet("GLEANER_KEEP_TEST_DATA")) {
            m_scratch->setAutoRemove(false);
            qWarning().noquote() << "logs and data kept in" << m_scratch->path();
        } else {
            qWarning("set GLEANER_KEEP_TEST_DATA=1 to keep a failing case's logs and data folders");
        }
    }
    m_cluster.reset(); // every process it started, by pid
    m_scratch.reset();
    qInfo("%s took %.1f s", QTest::currentTestFunction(), double(m_caseTime.elapsed()) / 1000.0);
}

QList<int> TestEndToEnd::startAgents(const QStringList& names, const QStringList& options)
{
    QList<int> agents;
    for (const QString& name : names) {
        auto agent = m_cluster->enrollAgent(name);
        if (!agent) {
            qWarning().noquote() << agent.error();
            return {};
        }
        if (auto started = m_cluster->startAgent(*agent, options); !started) {
            qWarning().noquote() << started.error();
            return {};
        }
        agents << *agent;
    }
    return agents;
}

bool TestEndToEnd::waitForTrainingStep(int agent, int timeoutMs)
{
    return waitUntil(
        [&] {
            const QJsonObject status =
                m_cluster->agentCli(agent, QStringLiteral("status"), {QStringLiteral("--json")}).json();
            for (const auto& value : status.value(QStringLiteral("subtasks")).toArray()) {
                const QJsonObject subtask = value.toObject();
                const qint64 step = subtask.value(QStringLiteral("step")).toInteger();
                if (subtask.value(QStringLiteral("state")).toString() == u"training" && step > 0 &&
                    step < subtask.value(QStringLiteral("of")).toInteger())
                    return true;
            }
            return false;
        },
        timeoutMs, 200);
}

// (a) Two agents train the 6,000-image job to the target; both contributed, nothing was refused or failed,
// and what each agent counts as done is what the coordinator counts.
void TestEndToEnd::checkFilesSentByProxy()
{
    // Every download the coordinators allowed, nginx sent from the blob folder.
    const QStringList files = m_cluster->proxiedRequests(QStringLiteral("GET /api/v1/files/"));
    QVERIFY2(!files.isEmpty(), "nginx passed on no file download");
    static const QRegularExpression sent(QStringLiteral("\" (200|206) [1-9]"));
    qint64 accelerated = 0;
    for (const QString& line : files) {
        if (!sent.match(line).hasMatch())
            continue;
        QVERIFY2(line.contains(QStringLiteral(" accel=/_gleaner/blobs/")),
                 qPrintable(QStringLiteral("a coordinator sent a file itself: %1").arg(line)));
        ++accelerated;
    }
    QVERIFY2(accelerated > 0, qPrintable(files.join(u'\n')));
    qInfo("nginx sent %lld file downloads from the shared folder", accelerated);

    // The largest blob, part of it as an agent resumes it.
    QString largest;
    for (QDirIterator it(m_cluster->storageDir() + QStringLiteral("/blobs"), QDir::Files,
                         QDirIterator::Subdirectories);
         it.hasNext();) {
        const QString file = it.next();
        if (largest.isEmpty() || QFileInfo(file).size() > QFileInfo(largest).size())
            largest = file;
    }
    QVERIFY(!largest.isEmpty());
    const QByteArray bytes = test::readFile(largest);
    QVERIFY(bytes.size() > 1000);
    const QByteArray sha = QFileInfo(largest).fileName().toLatin1();
    coordinator::HttpsClient client(QStringLiteral("127.0.0.1"), m_cluster->proxyPort(),
                                    m_cluster->certificatePath());
    const QByteArray target = "/api/v1/files/" + sha;
    auto partial =
        client.request("GET", target, {}, {}, {{"Range", "bytes=1000-"}, {"If-Range", '"' + sha + '"'}},
                       m_cluster->adminToken());
    QVERIFY2(partial, qPrintable(partial.error()));
    QCOMPARE(partial->status, 206);
    QCOMPARE(partial->header("ETag"), '"' + sha + '"');
    QCOMPARE(partial->header("Content-Range"),
             "bytes 1000-" + QByteArray::number(bytes.size() - 1) + '/' + QByteArray::number(bytes.size()));
    QVERIFY(partial->body == bytes.mid(1000));
    // A partial copy of another file is sent again whole.
    auto whole = client.request("GET", target, {}, {}, {{"Range", "bytes=1000-"}, {"If-Range", "\"older\""}},
                                m_cluster->adminToken());
    QVERIFY2(whole, qPrintable(whole.error()));
    QCOMPARE(whole->status, 200);
    QVERIFY(whole->body == bytes);
    // Still only for those the coordinators admit, and the folder itself is nginx's internal location only.
    auto anonymous = client.request("GET", target);
    QVERIFY2(anonymous, qPrintable(anonymous.error()));
    QCOMPARE(anonymous->status, 401);
    QVERIFY(anonymous->body != bytes);
    auto direct = client.request("GET", "/_gleaner/blobs/" + sha.left(2) + '/' + sha, {}, {}, {},
                                 m_cluster->adminToken());
    QVERIFY2(direct, qPrintable(direct.error()));
    QCOMPARE(direct->status, 404);
}

void TestEndToEnd::twoAgentsReachTheTargetAccuracy()
{
    // The brief's job; with two agents the accuracy passes 0.80 between epochs 8 and 10 (0.75 after epoch 2,
    // then about +0.006 an epoch), so the bound on epochs leaves room: the target is what is checked.
    QJsonObject spec = E2eCluster::fashionJob();
    spec.insert(QStringLiteral("max_epochs"), 20);
    auto job = m_cluster->submitJob(spec);
    E2E_VERIFY(job);
    const QList<int> agents =
        startAgents({QStringLiteral("a1"), QStringLiteral("a2")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 2);

    auto done = m_cluster->waitForJobState(*job, QStringLiteral("completed"), 240'000);
    E2E_VERIFY(done);
    const double accuracy = done->value(QStringLiteral("accuracy")).toDouble();
    QVERIFY2(accuracy >= 0.80,
             qPrintable(QStringLiteral("completed at %1 accuracy: %2")
                            .arg(accuracy)
                            .arg(QString::fromUtf8(QJsonDocument(*done).toJson(QJsonDocument::Compact)))));
    qInfo("reached %.3f accuracy with %lld updates; %s", accuracy,
          done->value(QStringLiteral("updates")).toInteger(), qPrintable(accuracies(*done)));
    if (m_cluster->behindProxy()) {
        // Everything went through nginx: the agents know no other address, and the manifests name its URL.
        const QStringList results = m_cluster->proxiedRequests(QStringLiteral("/result"));
        QVERIFY2(results.size() >= done->value(QStringLiteral("updates")).toInteger(),
                 qPrintable(QStringLiteral("nginx passed on %1 result uploads").arg(results.size())));
        qInfo("through nginx: %lld requests, %lld of them result uploads",
              qint64(m_cluster->proxiedRequests().size()), qint64(results.size()));
        // Several coordinators: every one of them leased work and took results, whichever issued the lease.
        for (const quint16 port : m_cluster->coordinatorPorts()) {
            const QString upstream = QStringLiteral("upstream=127.0.0.1:%1 ").arg(port);
            const auto answered = [&](const QString& part) {
                return qint64(m_cluster->proxiedRequests(part).filter(upstream).size());
            };
            const qint64 leases = answered(QStringLiteral("/work/lease"));
            const qint64 uploads = answered(QStringLiteral("/result"));
            qInfo("coordinator on port %u: %lld lease requests, %lld result uploads", unsigned(port), leases,
                  uploads);
            if (m_cluster->coordinatorCount() > 1)
                QVERIFY2(
                    leases > 0 && uploads > 0,
                    qPrintable(QStringLiteral("the coordinator on port %1 answered %2 lease requests and %3 "
                                              "result uploads")
                                   .arg(port)
                                   .arg(leases)
                                   .arg(uploads)));
        }
        if (m_cluster->proxySendsFiles())
            checkFilesSentByProxy();
    }

    for (const int agent : agents) {
        const QString name = m_cluster->agent(agent).name;
        const QJsonObject record = m_cluster->agentRecord(name);
        QVERIFY2(counter(record, "done") >= 1, qPrintable(name + QStringLiteral(" did nothing: ") +
                                                          QString::fromUtf8(QJsonDocument(record).toJson())));
        QCOMPARE(counter(record, "invalid"), 0);
        QCOMPARE(counter(record, "failed"), 0);
        // The agent's own count (its control socket) agrees with the coordinator's once in-flight uploads
        // ended.
        qint64 agentDone = -1;
        const bool agrees = waitUntil(
            [&] {
                const CliRun status =
                    m_cluster->agentCli(agent, QStringLiteral("status"), {QStringLiteral("--json")});
                agentDone = status.json()
                                .value(QStringLiteral("totals"))
                                .toObject()
                                .value(QStringLiteral("subtasks_done"))
                                .toInteger(-1);
                return agentDone == counter(m_cluster->agentRecord(name), "done");
            },
            15'000, 500);
        QVERIFY2(agrees,
                 qPrintable(QStringLiteral("%1: the agent counts %2 subtasks done, the coordinator %3")
                                .arg(name)
                                .arg(agentDone)
                                .arg(counter(m_cluster->agentRecord(name), "done"))));
    }
}

// Two agents on compressed uploads (top-k updates with error feedback) and sparse publications (patches instead
// of weights files): the job still reaches its target, the bytes each side counts agree, and patches did the
// downloading of the weights once agents held an earlier version. One agent is stopped and started again midway:
// what its uploads left out is kept in its data folder and goes on with the job.
void TestEndToEnd::compressedTransfersReachTheTarget()
{
    QJsonObject spec = E2eCluster::fashionJob();
    spec.insert(QStringLiteral("max_epochs"), 20);
    spec.insert(QStringLiteral("aggregation"), test::jsonObject(QByteArray(R"({"rule": "adaptive-nesterov"})")));
    spec.insert(QStringLiteral("upload"), test::jsonObject(QByteArray(R"({"encoding": "topk", "density": 0.05})")));
    spec.insert(QStringLiteral("download"), test::jsonObject(QByteArray(R"({"density": 0.1})")));
    auto job = m_cluster->submitJob(spec);
    E2E_VERIFY(job);
    const QList<int> agents =
        startAgents({QStringLiteral("a1"), QStringLiteral("a2")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 2);

    const QString residual = m_cluster->agent(agents[0]).dir + QStringLiteral("/residual/job-%1.safetensors").arg(*job);
    E2E_VERIFY(m_cluster->waitForAgentLog(agents[0], QRegularExpression(QStringLiteral("result accepted")), 120'000));
    QVERIFY2(waitUntil([&] { return QFileInfo::exists(residual); }, 30'000),
             qPrintable(QStringLiteral("no residual kept at %1").arg(residual)));
    QVERIFY(m_cluster->stopAgent(agents[0], SIGTERM, 60'000));
    const qint64 mark = m_cluster->agentLogSize(agents[0]);
    const QDateTime restarted = QDateTime::currentDateTimeUtc();
    E2E_VERIFY(m_cluster->restartAgent(agents[0]));
    // The restarted agent hands its residual to its next subtask and keeps the one that subtask leaves. (Once the
    // job ends the file may be gone: the residual of a subtask cut short by the job's end goes with its folder.)
    QVERIFY2(waitUntil(
                 [&] {
                     const QFileInfo kept(residual);
                     return kept.exists() && kept.lastModified() > restarted;
                 },
                 120'000),
             qPrintable(QStringLiteral("no residual kept at %1 after the restart").arg(residual)));

    auto done = m_cluster->waitForJobState(*job, QStringLiteral("completed"), 300'000);
    E2E_VERIFY(done);
    const double accuracy = done->value(QStringLiteral("accuracy")).toDouble();
    QVERIFY2(accuracy >= 0.80, qPrintable(QStringLiteral("completed at %1").arg(accuracy)));
    const QJsonObject transfer = done->value(QStringLiteral("transfer")).toObject();
    qInfo("reached %.3f accuracy; transfer %s", accuracy,
          QJsonDocument(transfer).toJson(QJsonDocument::Compact).constData());
    QVERIFY2(transfer.value(QStringLiteral("upload_ratio")).toDouble() >= 8.0,
             QJsonDocument(transfer).toJson(QJsonDocument::Compact).constData());
    const QJsonObject byRole = transfer.value(QStringLiteral("downloaded_bytes_by_role")).toObject();
    QVERIFY2(byRole.value(QStringLiteral("weights-patch")).toInteger() > 0,
             QJsonDocument(transfer).toJson(QJsonDocument::Compact).constData());
    // After the restart the agent went on without a complaint about its residual.
    const QString after = m_cluster->agentLog(agents[0], mark);
    QVERIFY2(after.contains(QStringLiteral("result accepted")), qPrintable(after.left(2000)));
    QVERIFY2(!after.contains(QStringLiteral("residual")), qPrintable(after.left(4000)));

    // What the agents say they sent and fetched is what the coordinator counted, once uploads in flight ended.
    qint64 largestShard = 0;
    for (const BlobFile& blob : m_cluster->blobs())
        if (blob.role == u"shard")
            largestShard = std::max(largestShard, blob.size);
    qint64 up = 0, down = 0;
    const bool agrees = waitUntil(
        [&] {
            up = down = 0;
            for (const int agent : agents) {
                const QJsonObject totals = m_cluster->agentCli(agent, QStringLiteral("status"), {QStringLiteral("--json")})
                                               .json()
                                               .value(QStringLiteral("totals"))
                                               .toObject();
                up += totals.value(QStringLiteral("uploaded_bytes")).toInteger();
                down += totals.value(QStringLiteral("downloaded_bytes")).toInteger();
            }
            // Downloads up to one file, which the stop may have cut off in flight (sent by the coordinator,
            // never received by the agent): a weights file or a shard, whichever is larger. Uploads up to
            // one: a leaving agent finishes an upload in flight, but one its grace period cut off after the
            // coordinator had the whole body is accepted there, while the agent, started again, sends it once
            // more, hears 409 "duplicate" and drops it uncounted.
            const QJsonObject now = m_cluster->jobStatus(*job).value(QStringLiteral("transfer")).toObject();
            const qint64 sent = now.value(QStringLiteral("downloaded_bytes")).toInteger();
            const qint64 received = now.value(QStringLiteral("uploaded_bytes")).toInteger();
            const qint64 oneUpload = 2 * now.value(QStringLiteral("upload_bytes_per_update")).toInteger();
            return up <= received && received - up <= oneUpload && down <= sent &&
                   sent - down <=
                       std::max(now.value(QStringLiteral("weights_bytes")).toInteger(), largestShard);
        },
        15'000, 500);
    QVERIFY2(agrees, qPrintable(QStringLiteral("agents: %1 bytes up, %2 down; coordinator: %3")
                                    .arg(up)
                                    .arg(down)
                                    .arg(QString::fromUtf8(QJsonDocument(m_cluster->jobStatus(*job).value(
                                                                             QStringLiteral("transfer")).toObject())
                                                               .toJson(QJsonDocument::Compact)))));
}

// (b) An agent SIGKILLed while its worker trains: its worker checkpoints and exits on the end of its stdin,
// the lease expires at the coordinator, the other agent trains the workunit and the job completes.
void TestEndToEnd::killedAgentsSubtaskIsCarriedByTheOther()
{
    // Four CNN subtasks of a few seconds each; a lease lasts 10 s without progress.
    auto job = m_cluster->submitJob(cnnJob(QStringLiteral("kill-agent"), 4, 2, 10));
    E2E_VERIFY(job);
    const QList<int> agents =
        startAgents({QStringLiteral("victim"), QStringLiteral("survivor")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 2);
    const int victim = agents[0];

    E2E_VERIFY(m_cluster->waitForAgentLog(victim, QRegularExpression(QStringLiteral("Training \\d+ subtask")),
                                          90'000));
    QVERIFY2(waitForTrainingStep(victim, 60'000), "the victim's worker never reported a training step");
    const QList<qint64> workers = m_cluster->workerPids(victim);
    QVERIFY2(!workers.isEmpty(), "the victim trains, but no gleaner-worker runs in its task folder");
    QVERIFY(m_cluster->stopAgent(victim, SIGKILL));

    // No worker is left behind: each sees the end of its stdin, writes a checkpoint and exits.
    const bool workersGone =
        waitUntil([&] { return std::none_of(workers.begin(), workers.end(), processAlive); }, 30'000);
    QVERIFY2(workersGone, "a worker of the killed agent still runs 30 s after the agent was killed");
    const QStringList checkpoints = QDir(m_cluster->agent(victim).dir + QStringLiteral("/tasks"))
                                        .entryList({QStringLiteral("*")}, QDir::Dirs | QDir::NoDotAndDotDot);
    QCOMPARE(checkpoints.size(), 1);
    QVERIFY2(QFileInfo::exists(m_cluster->agent(victim).dir + QStringLiteral("/tasks/") +
                               checkpoints.first() + QStringLiteral("/checkpoint.safetensors")),
             "the orphaned worker stopped without writing its checkpoint");

    // 104 to 190 s on a 2-core machine, depending on what else the suite trains meanwhile: a hang detector.
    auto done = m_cluster->waitForJobState(*job, QStringLiteral("completed"), 360'000);
    E2E_VERIFY(done);
    const QJsonObject victimRecord = m_cluster->agentRecord(m_cluster->agent(victim).name);
    QVERIFY2(counter(victimRecord, "timed_out") >= 1,
             qPrintable(QStringLiteral("the killed agent's lease never expired: ") +
                        QString::fromUtf8(QJsonDocument(victimRecord).toJson())));
    QVERIFY(counter(m_cluster->agentRecord(m_cluster->agent(agents[1]).name), "done") >= 1);
}

// (c) An agent SIGKILLed after its worker wrote a checkpoint and started again: the new worker resumes from
// the checkpoint (not from step 0) and the same lease's result is accepted.
void TestEndToEnd::restartedAgentResumesFromItsCheckpoint()
{
    // Two CNN subtasks of 3,000 images, several passes each: a subtask that trains for a while on one core.
    auto job = m_cluster->submitJob(cnnJob(QStringLiteral("resume"), 2, 4, 60));
    E2E_VERIFY(job);
    QStringList options = E2eCluster::quickAgentOptions();
    options[options.indexOf(QStringLiteral("--checkpoint-interval")) + 1] = QStringLiteral("1");
    const QList<int> agents = startAgents({QStringLiteral("phoenix")}, options);
    QCOMPARE(agents.size(), 1);
    const int agent = agents[0];

    auto started = m_cluster->waitForAgentLog(
        agent, QRegularExpression(QStringLiteral("--task \\S+/tasks/([0-9a-f]+) ")), 90'000);
    E2E_VERIFY(started);
    const QString lease = started->captured(1);
    const QString checkpoint = m_cluster->agent(agent).dir + QStringLiteral("/tasks/") + lease +
                               QStringLiteral("/checkpoint.safetensors");
    QVERIFY2(waitUntil([&] { return QFileInfo::exists(checkpoint); }, 90'000),
             qPrintable(QStringLiteral("no checkpoint appeared at %1").arg(checkpoint)));

    const QList<qint64> workers = m_cluster->workerPids(agent);
    QVERIFY(m_cluster->stopAgent(agent, SIGKILL));
    QVERIFY2(waitUntil([&] { return std::none_of(workers.begin(), workers.end(), processAlive); }, 30'000),
             "the killed agent's worker did not exit");
    QVERIFY(QFileInfo::exists(checkpoint));

    const qint64 mark = m_cluster->agentLogSize(agent);
    E2E_VERIFY(m_cluster->restartAgent(agent));
    auto resumed = m_cluster->waitForAgentLog(
        agent,
        QRegularExpression(
            QStringLiteral("lease %1: worker resumed from its checkpoint at step (\\d+) of (\\d+)")
                .arg(lease)),
        90'000, mark);
    E2E_VERIFY(resumed);
    const qint64 step = resumed->captured(1).toLongLong();
    const qint64 of = resumed->captured(2).toLongLong();
    qInfo("lease %s resumed at step %lld of %lld", qPrintable(lease), step, of);
    QVERIFY2(step > 0 && step < of, qPrintable(resumed->captured(0)));
    E2E_VERIFY(m_cluster->waitForAgentLog(
        agent, QRegularExpression(QStringLiteral("lease %1: result accepted").arg(lease)), 180'000, mark));
    const QString after = m_cluster->agentLog(agent, mark);
    QVERIFY2(after.contains(QStringLiteral("resuming lease %1").arg(lease)), qPrintable(after.left(2000)));
    QCOMPARE(counter(m_cluster->agentRecord(m_cluster->agent(agent).name), "timed_out"), 0);
}

// (c2) An agent SIGTERMed mid-subtask (a preempted instance, a Slurm job at its limit) hands its lease back with the
// checkpoint its worker wrote: a second agent gets the workunit within seconds, not at the lease's 10-minute
// deadline, resumes at the step the first reached, and the job holds one fold of that workunit.
void TestEndToEnd::stoppedAgentHandsItsSubtaskBack()
{
    // One workunit, several passes over 3,000 images: only a hand-back can give it to the second agent in time.
    auto job = m_cluster->submitJob(cnnJob(QStringLiteral("hand-back"), 1, 4, 600));
    E2E_VERIFY(job);
    QStringList options = E2eCluster::quickAgentOptions();
    options[options.indexOf(QStringLiteral("--checkpoint-interval")) + 1] = QStringLiteral("600");
    options << QStringLiteral("--grace") << QStringLiteral("20");
    const QList<int> first = startAgents({QStringLiteral("preempted")}, options);
    QCOMPARE(first.size(), 1);
    QVERIFY2(waitForTrainingStep(first[0], 90'000), "the first agent's worker never reported a training step");
    // Past its first few steps: the checkpoint on the stop holds work worth keeping.
    QVERIFY(waitUntil(
        [&] {
            const QJsonObject status =
                m_cluster->agentCli(first[0], QStringLiteral("status"), {QStringLiteral("--json")}).json();
            const QJsonArray subtasks = status.value(QStringLiteral("subtasks")).toArray();
            return !subtasks.isEmpty() && subtasks.first().toObject().value(QStringLiteral("step")).toInteger() >= 20;
        },
        60'000, 200));

    QElapsedTimer sinceStop;
    sinceStop.start();
    QVERIFY2(m_cluster->stopAgent(first[0], SIGTERM, 30'000), "the agent did not exit within its grace period");
    const QString firstLog = m_cluster->agentLog(first[0]);
    const QRegularExpression handed(QStringLiteral("lease ([0-9a-f]{32}) handed back: the next agent resumes it at "
                                                   "step (\\d+)"));
    const QRegularExpressionMatch handedBack = handed.match(firstLog);
    QVERIFY2(handedBack.hasMatch(), qPrintable(firstLog.right(3000)));
    const QString lease = handedBack.captured(1);
    const qint64 handedStep = handedBack.captured(2).toLongLong();
    QVERIFY2(handedStep >= 20, qPrintable(handedBack.captured(0)));
    // Nothing of the subtask is left on the first agent: its folder went with the hand-back.
    QVERIFY(QDir(m_cluster->agent(first[0]).dir + QStringLiteral("/tasks"))
                .entryList(QDir::Dirs | QDir::NoDotAndDotDot)
                .isEmpty());

    const QList<int> second = startAgents({QStringLiteral("successor")}, E2eCluster::quickAgentOptions());
    QCOMPARE(second.size(), 1);
    auto resumed = m_cluster->waitForAgentLog(
        second[0],
        QRegularExpression(QStringLiteral("worker resumed from the checkpoint lease %1 handed back, at step (\\d+) of "
                                          "(\\d+)")
                               .arg(lease)),
        90'000);
    E2E_VERIFY(resumed);
    qInfo("handed back at step %lld; the successor resumed at %s of %s, %.1f s after the stop", handedStep,
          qPrintable(resumed->captured(1)), qPrintable(resumed->captured(2)), double(sinceStop.elapsed()) / 1000.0);
    QCOMPARE(resumed->captured(1).toLongLong(), handedStep);
    QVERIFY(handedStep < resumed->captured(2).toLongLong());
    QVERIFY2(sinceStop.elapsed() < 120'000, "the workunit waited for something like the lease's deadline");

    auto done = m_cluster->waitForJobState(*job, QStringLiteral("completed"), 240'000);
    E2E_VERIFY(done);
    // One workunit, one fold: the hand-back added no update of its own, and the resumed result counted once.
    QCOMPARE(done->value(QStringLiteral("updates_received")).toInteger(), 1);
    QCOMPARE(done->value(QStringLiteral("updates")).toInteger(), 1);
    const QJsonObject firstRecord = m_cluster->agentRecord(m_cluster->agent(first[0]).name);
    QCOMPARE(counter(firstRecord, "timed_out"), 0);
    QCOMPARE(counter(firstRecord, "failed"), 0);
    QCOMPARE(counter(m_cluster->agentRecord(m_cluster->agent(second[0]).name), "done"), 1);
}

// (c3) Batch mode, as a cluster job runs it: an agent whose --max-runtime ends mid-subtask hands the subtask back and
// exits 0; another, --until-empty, finishes the job and exits 0 once the coordinator has had no work for it.
void TestEndToEnd::batchAgentsLeaveAtTheirRuntimeAndWhenTheQueueIsEmpty()
{
    // Two subtasks of six passes over 3,000 images (564 steps): each trains for longer than the first agent's
    // runtime, which ends after about 130 steps on a quiet 2-core machine.
    auto job = m_cluster->submitJob(cnnJob(QStringLiteral("batch"), 2, 6, 600));
    E2E_VERIFY(job);
    QStringList timed = E2eCluster::quickAgentOptions();
    // A grace that fits a checkpoint of a few MB at the 1 MB/s an agent assumes before it measured its uplink.
    timed << QStringLiteral("--until-empty") << QStringLiteral("--max-runtime") << QStringLiteral("24")
          << QStringLiteral("--grace") << QStringLiteral("15") << QStringLiteral("--kind") << QStringLiteral("batch");
    const QList<int> first = startAgents({QStringLiteral("timed")}, timed);
    QCOMPARE(first.size(), 1);
    QVERIFY2(waitUntil([&] { return !m_cluster->agentRunning(first[0]); }, 60'000),
             "the agent outlived its --max-runtime");
    QCOMPARE(m_cluster->agent(first[0]).process->exitStatus(), QProcess::NormalExit);
    QCOMPARE(m_cluster->agent(first[0]).process->exitCode(), 0);
    const QString log = m_cluster->agentLog(first[0]);
    QVERIFY2(log.contains(u"leaving (--max-runtime 24 s is up)"), qPrintable(log.right(3000)));
    QVERIFY2(log.contains(u"handed back: the next agent resumes it at step"), qPrintable(log.right(3000)));
    QCOMPARE(m_cluster->agentRecord(m_cluster->agent(first[0]).name)
                 .value(QStringLiteral("hardware"))
                 .toObject()
                 .value(QStringLiteral("kind"))
                 .toString(),
             QStringLiteral("batch"));

    QStringList drain = E2eCluster::quickAgentOptions();
    drain << QStringLiteral("--until-empty") << QStringLiteral("--idle-exit") << QStringLiteral("3");
    const QList<int> second = startAgents({QStringLiteral("drain")}, drain);
    QCOMPARE(second.size(), 1);
    // One agent trains both subtasks of a CNN job here: at ten passes each, 221 s alone and over 480 s beside
    // two other trainings of the suite on a slow 2-core machine (6 steps a second), hence six passes; the
    // bound is a hang detector with room for such a machine, not a speed target.
    E2E_VERIFY(m_cluster->waitForJobState(*job, QStringLiteral("completed"), 480'000));
    QVERIFY2(waitUntil([&] { return !m_cluster->agentRunning(second[0]); }, 30'000),
             "the --until-empty agent did not stop once the queue was empty");
    QCOMPARE(m_cluster->agent(second[0]).process->exitCode(), 0);
    const QString drained = m_cluster->agentLog(second[0]);
    QVERIFY2(drained.contains(u"worker resumed from the checkpoint lease"), qPrintable(drained.right(3000)));
    QVERIFY2(drained.contains(u"has had no work for this agent"), qPrintable(drained.right(3000)));
    QCOMPARE(m_cluster->jobStatus(*job).value(QStringLiteral("updates_received")).toInteger(), 2);
}

// (d) A shard altered on the coordinator's disk after import: the agent refuses it with both hashes in its
// log, reports the lease failed and never runs a worker for it.
void TestEndToEnd::alteredShardIsRefusedAndReported()
{
    auto job = m_cluster->submitJob(smallMlpJob(QStringLiteral("altered")));
    E2E_VERIFY(job);
    E2E_VERIFY(m_cluster->waitForJobState(*job, QStringLiteral("running"), 60'000));
    // The last shard: the coordinator hands out the lowest pending shard first, so the agent trains shard 0
    // before it meets the altered one.
    QString original, altered;
    for (const BlobFile& blob : m_cluster->blobs())
        if (blob.role == u"shard" && blob.shardIndex == 1) {
            QByteArray bytes = test::readFile(blob.path);
            bytes[bytes.size() - 1] = char(bytes.back() ^ 0x01); // a pixel of the last image
            QFile::setPermissions(blob.path, QFile::ReadOwner | QFile::WriteOwner);
            QVERIFY(test::writeFile(blob.path, bytes));
            original = blob.sha256;
            altered =
                QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex());
        }
    QVERIFY2(!original.isEmpty(), "no blob of shard 1 in the coordinator's blob store");

    const QList<int> agents = startAgents({QStringLiteral("careful")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 1);
    const int agent = agents[0];
    auto refused = m_cluster->waitForAgentLog(
        agent, QRegularExpression(QStringLiteral("the shard file of lease ([0-9a-f]+) was refused: [^\\n]*")),
        90'000);
    E2E_VERIFY(refused);
    const QString line = refused->captured(0);
    const QString lease = refused->captured(1);
    QVERIFY2(line.contains(original) && line.contains(altered),
             qPrintable(QStringLiteral("the refusal does not name both hashes (%1, %2): %3")
                            .arg(original, altered, line)));

    auto reported = m_cluster->waitForAgentRecord(
        m_cluster->agent(agent).name, [](const QJsonObject& r) { return counter(r, "failed") >= 1; }, 30'000,
        QStringLiteral("a failed lease"));
    E2E_VERIFY(reported);
    const QString log = m_cluster->agentLog(agent);
    QVERIFY2(!log.contains(QStringLiteral("/tasks/") + lease),
             qPrintable(QStringLiteral("a worker ran for the refused lease %1").arg(lease)));
    QVERIFY(!QFileInfo::exists(m_cluster->agent(agent).dir + QStringLiteral("/tasks/") + lease));
    QVERIFY2(!QFileInfo::exists(m_cluster->agent(agent).dir + QStringLiteral("/cache/") + original.left(2) +
                                u'/' + original),
             "the altered file was kept in the cache under the name of the intact one");
}

// (e) The agent's pinned coordinator key replaced by another Ed25519 key: every manifest fails its signature
// check, each lease is reported failed, no worker starts, and the agent backs off between leases.
void TestEndToEnd::brokenSignatureIsRefusedWithBackoff()
{
    auto job = m_cluster->submitJob(smallMlpJob(QStringLiteral("forged")));
    E2E_VERIFY(job);
    auto agent = m_cluster->enrollAgent(QStringLiteral("suspicious"));
    E2E_VERIFY(agent);
    const QString pinned = m_cluster->agent(*agent).dir + QStringLiteral("/coordinator-key.pem");
    QProcess openssl;
    openssl.start(
        QStringLiteral("sh"),
        {QStringLiteral("-c"), QStringLiteral("openssl genpkey -algorithm ed25519 | openssl pkey -pubout")});
    QVERIFY(openssl.waitForFinished(30'000));
    const QByteArray otherKey = openssl.readAllStandardOutput();
    QVERIFY2(openssl.exitCode() == 0 && otherKey.startsWith("-----BEGIN PUBLIC KEY"),
             openssl.readAllStandardError().constData());
    QVERIFY(otherKey != test::readFile(pinned));
    QVERIFY(test::writeFile(pinned, otherKey));

    E2E_VERIFY(m_cluster->startAgent(*agent, E2eCluster::quickAgentOptions()));
    E2E_VERIFY(m_cluster->waitForAgentLog(
        *agent, QRegularExpression(QStringLiteral("lease [0-9a-f]+ failed:")), 60'000));
    QElapsedTimer window;
    window.start();
    const qint64 from = m_cluster->agentLogSize(*agent);
    QTest::qWait(10'000);
    const QString log = m_cluster->agentLog(*agent, from);
    const double seconds = double(window.elapsed()) / 1000.0;
    const QStringList leases =
        lines(log, QRegularExpression(QStringLiteral("\"POST\" \"\\S+/api/v1/work/lease\" -> 200")));
    const QStringList failures =
        lines(log, QRegularExpression(QStringLiteral("lease [0-9a-f]+ failed: [^\\n]*")));
    qInfo("%lld lease requests and %lld refused manifests in %.1f s", qint64(leases.size()),
          qint64(failures.size()), seconds);
    QVERIFY2(failures.size() >= 1, qPrintable(log.right(3000)));
    for (const QString& failure : failures)
        QVERIFY2(
            failure.contains(QStringLiteral("signature does not verify with the pinned coordinator key")),
            qPrintable(failure));
    // Backing off: 0.5 s + up to 1, 2, 4, 8 s of jitter after successive refusals; a tight loop makes
    // hundreds.
    QVERIFY2(leases.size() <= 8,
             qPrintable(QStringLiteral("%1 leases in %2 s: the agent does not back off\n%3")
                            .arg(leases.size())
                            .arg(seconds)
                            .arg(log.right(4000))));
    const QString whole = m_cluster->agentLog(*agent);
    QVERIFY2(!whole.contains(QStringLiteral("gleaner-worker --task")),
             "a worker was started for a forged manifest");
    QVERIFY(QDir(m_cluster->agent(*agent).dir + QStringLiteral("/tasks")).isEmpty());
    auto reported = m_cluster->waitForAgentRecord(
        m_cluster->agent(*agent).name, [](const QJsonObject& r) { return counter(r, "failed") >= 1; }, 30'000,
        QStringLiteral("a failed lease"));
    E2E_VERIFY(reported);
    QCOMPARE(counter(*reported, "done"), 0);
}

// (f) The coordinator SIGKILLed mid-job and started again on the same port: the agents say they cannot reach
// it, try again with backoff, reconnect, and the job completes (folded with adaptive-nesterov, whose state
// and bases a restart must restore).
void TestEndToEnd::coordinatorKilledAndRestartedMidJob()
{
    QJsonObject spec = E2eCluster::fashionJob();
    spec.insert(QStringLiteral("name"), QStringLiteral("restart"));
    spec.insert(QStringLiteral("target_accuracy"), 0.75);
    // The default job's rule: its state (outer momentum) and the bases of unsnapshotted updates must survive
    // the kill, and the replay must fold as before it.
    spec.insert(QStringLiteral("aggregation"),
                QJsonObject{{QStringLiteral("rule"), QStringLiteral("adaptive-nesterov")}});
    auto job = m_cluster->submitJob(spec);
    E2E_VERIFY(job);
    const QList<int> agents =
        startAgents({QStringLiteral("b1"), QStringLiteral("b2")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 2);
    auto progressed = m_cluster->waitForJob(
        *job, [](const QJsonObject& s) { return s.value(QStringLiteral("updates")).toInteger() >= 2; },
        120'000, QStringLiteral("2 updates in"));
    E2E_VERIFY(progressed);
    QVERIFY2(progressed->value(QStringLiteral("state")).toString() == u"running",
             "the job ended before the kill");

    QList<qint64> marks;
    for (const int agent : agents)
        marks << m_cluster->agentLogSize(agent);
    m_cluster->stopCoordinator(SIGKILL);
    QVERIFY(!m_cluster->coordinatorRunning());
    const QRegularExpression unreachable(QStringLiteral(
        "Cannot reach the coordinator [^\\n]*|[^\\n]* failed: [^\\n]*trying again in [^\\n]*"));
    for (int i = 0; i < agents.size(); ++i)
        E2E_VERIFY(m_cluster->waitForAgentLog(agents[i], unreachable, 45'000, marks[i]));
    QTest::qWait(3'000); // down a little longer: the agents back off
    for (int i = 0; i < agents.size(); ++i) {
        // Attempts while the coordinator is down: each is a "failed:" line of the network log.
        const QStringList attempts =
            lines(m_cluster->agentLog(agents[i], marks[i]),
                  QRegularExpression(QStringLiteral("gleaner.agent.net: \"\\w+\" \"[^\"]+\" failed:")));
        qInfo("agent %s: %lld failed requests while the coordinator was down",
              qPrintable(m_cluster->agent(agents[i]).name), qint64(attempts.size()));
        QVERIFY2(attempts.size() <= 30, qPrintable(attempts.join(u'\n')));
    }

    E2E_VERIFY(m_cluster->startCoordinator());
    for (int i = 0; i < agents.size(); ++i)
        E2E_VERIFY(m_cluster->waitForAgentLog(
            agents[i], QRegularExpression(QStringLiteral("the coordinator \\S+ answers again")), 90'000,
            marks[i]));
    auto done = m_cluster->waitForJobState(*job, QStringLiteral("completed"), 240'000);
    E2E_VERIFY(done);
    qInfo("completed with %lld updates (%lld before the kill); %s",
          done->value(QStringLiteral("updates")).toInteger(),
          progressed->value(QStringLiteral("updates")).toInteger(), qPrintable(accuracies(*done)));
    QVERIFY2(done->value(QStringLiteral("accuracy")).toDouble() >= 0.75,
             qPrintable(QString::fromUtf8(QJsonDocument(*done).toJson(QJsonDocument::Compact))));
    QVERIFY(done->value(QStringLiteral("updates")).toInteger() >=
            progressed->value(QStringLiteral("updates")).toInteger());
}

// Several coordinators of one deployment (GLEANER_TEST_COORDINATORS=2, test_endtoend_p2): the one that does
// the housekeeping is SIGKILLed mid-job and stays down. The agents carry on through the other behind nginx,
// which takes the housekeeping over (snapshots, validation, the end of the job) and folds what the killed one
// had received and not folded; the job reaches its target, and every update received is folded or refused
// with a reason.
void TestEndToEnd::oneOfTwoCoordinatorsKilledMidJob()
{
    if (m_cluster->coordinatorCount() < 2)
        QSKIP("needs several coordinators (GLEANER_TEST_COORDINATORS=2, as test_endtoend_p2 runs it)");
    QJsonObject spec = E2eCluster::fashionJob();
    spec.insert(QStringLiteral("name"), QStringLiteral("one-of-two"));
    spec.insert(QStringLiteral("target_accuracy"), 0.75);
    auto job = m_cluster->submitJob(spec);
    E2E_VERIFY(job);
    const QList<int> agents =
        startAgents({QStringLiteral("c1"), QStringLiteral("c2")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 2);
    auto progressed = m_cluster->waitForJob(
        *job, [](const QJsonObject& s) { return s.value(QStringLiteral("updates")).toInteger() >= 4; },
        120'000, QStringLiteral("4 updates in"));
    E2E_VERIFY(progressed);
    QVERIFY2(progressed->value(QStringLiteral("state")).toString() == u"running",
             "the job ended before the kill");

    QElapsedTimer down;
    down.start();
    m_cluster->stopCoordinator(SIGKILL); // the first: the housekeeper, and the one that imported the job
    QVERIFY(!m_cluster->coordinatorRunning());
    auto done = m_cluster->waitForJobState(*job, QStringLiteral("completed"), 240'000);
    E2E_VERIFY(done);
    qInfo("completed %.1f s after the kill, with %lld updates (%lld before it); %s",
          double(down.elapsed()) / 1000, done->value(QStringLiteral("updates")).toInteger(),
          progressed->value(QStringLiteral("updates")).toInteger(), qPrintable(accuracies(*done)));
    QVERIFY2(done->value(QStringLiteral("accuracy")).toDouble() >= 0.75,
             qPrintable(QString::fromUtf8(QJsonDocument(*done).toJson(QJsonDocument::Compact))));
    // The survivor took the housekeeping over, and ended the job itself.
    const QByteArray survivor = test::readFile(m_cluster->otherCoordinatorLog(0));
    QVERIFY2(survivor.contains("this coordinator does the deployment's housekeeping now") &&
                 survivor.contains("reached the target accuracy"),
             survivor.right(3000).constData());
    // Nothing accepted was dropped: every update received before the job ended went into the weights or was
    // refused at its fold with a reason the admin sees.
    QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QPSQL"), QStringLiteral("one-of-two"));
    const QUrl url(m_cluster->postgres()->url(E2eCluster::postgresDatabase()));
    db.setHostName(url.host());
    db.setPort(url.port());
    db.setUserName(url.userName());
    db.setDatabaseName(url.path().mid(1));
    QVERIFY2(db.open(), qPrintable(db.lastError().text()));
    QSqlQuery lost(db);
    QVERIFY(
        lost.exec(QStringLiteral("SELECT COUNT(*) FROM updates u, jobs j WHERE u.job_id = j.id AND j.id = %1 "
                                 "AND u.applied_version IS NULL AND u.fold_error = '' AND u.received_ms < "
                                 "j.finished_ms - 1000")
                      .arg(*job)));
    QVERIFY(lost.next());
    QCOMPARE(lost.value(0).toLongLong(), 0);
    lost.finish();
    db.close();
    for (const int agent : agents)
        QCOMPARE(counter(m_cluster->agentRecord(m_cluster->agent(agent).name), "invalid"), 0);
}

// (g) An agent paused by its owner (`gleaner-agent pause`) for longer than one deadline_seconds keeps its
// lease: docs/protocol.md 11.2 asks agents to report progress also while paused, so that a short pause does
// not hand the workunit to another agent nor count this one as timed out. (The daemon keeps a paused lease
// for about one deadline_seconds of pause, then lets it go: 14 s of pause with a 10 s deadline is within
// that.)
void TestEndToEnd::pausedAgentKeepsItsLease()
{
    auto job = m_cluster->submitJob(cnnJob(QStringLiteral("paused"), 2, 4, 10));
    E2E_VERIFY(job);
    const QList<int> agents = startAgents({QStringLiteral("owner")}, E2eCluster::quickAgentOptions());
    QCOMPARE(agents.size(), 1);
    const int agent = agents[0];
    QVERIFY2(waitForTrainingStep(agent, 90'000), "the agent's worker never reported a training step");
    // The worker's sandbox reached the status; whether Landlock confines it is the kernel's to say.
    const long landlockAbi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    const QJsonObject sandbox = m_cluster->agentCli(agent, QStringLiteral("status"), {QStringLiteral("--json")})
                                    .json()
                                    .value(QStringLiteral("sandbox"))
                                    .toObject();
    QCOMPARE(sandbox.value(QStringLiteral("landlock")), QJsonValue(landlockAbi > 0));
    // The seccomp filter is the build's own (libseccomp), on every Linux kernel; the status says so in one line.
    QVERIFY2(sandbox.value(QStringLiteral("layers")).toArray().contains(QStringLiteral("seccomp")),
             qPrintable(QJsonDocument(sandbox).toJson()));
    QVERIFY(sandbox.value(QStringLiteral("summary")).toString().contains(u"seccomp"));
    const CliRun human = m_cluster->agentCli(agent, QStringLiteral("status"));
    QVERIFY2(human.out.contains("Sandbox:"), qPrintable(human.describe()));

    const CliRun paused = m_cluster->agentCli(agent, QStringLiteral("pause"));
    QVERIFY2(paused.exitCode == 0, qPrintable(paused.describe()));
    const bool workerPaused = waitUntil(
        [&] {
            const QJsonObject status =
                m_cluster->agentCli(agent, QStringLiteral("status"), {QStringLiteral("--json")}).json();
            const QJsonArray subtasks = status.value(QStringLiteral("subtasks")).toArray();
            return !subtasks.isEmpty() &&
                   subtasks.first().toObject().value(QStringLiteral("state")).toString() == u"paused";
        },
        30'000, 250);
    QVERIFY2(workerPaused, "the worker did not report paused within 30 s");
    QTest::qWait(14'000); // the 10 s deadline, and the coordinator's checks four times a second
    const QJsonObject record = m_cluster->agentRecord(m_cluster->agent(agent).name);
    QVERIFY2(counter(record, "timed_out") == 0,
             qPrintable(QStringLiteral(
                            "the lease expired while its agent was paused by its owner (timed_out %1): the "
                            "agent sent no progress report during the pause")
                            .arg(counter(record, "timed_out"))));
    const CliRun resumed = m_cluster->agentCli(agent, QStringLiteral("resume"));
    QVERIFY2(resumed.exitCode == 0, qPrintable(resumed.describe()));
}

// (h) An agent holding several subtasks restarted while the coordinator is down: each subtask checks its
// lease, fails, and waits to try again. When one check gets through, the daemon continues the others at once;
// each lease must still be trained by one worker, never two in the same task folder (they would write the
// same checkpoint and result files, and the daemon would track only one of them).
void TestEndToEnd::restartWhileCoordinatorDownRunsOneWorkerPerLease()
{
    constexpr int kSubtasks = 3;
    auto job = m_cluster->submitJob(cnnJob(QStringLiteral("twins"), kSubtasks, 4, 120));
    E2E_VERIFY(job);
    const QList<int> agents =
        startAgents({QStringLiteral("twins")},
                    E2eCluster::quickAgentOptions() +
                        QStringList{QStringLiteral("--max-tasks"), QString::number(kSubtasks)});
    QCOMPARE(agents.size(), 1);
    const int agent = agents[0];
    E2E_VERIFY(m_cluster->waitForAgentLog(
        agent, QRegularExpression(QStringLiteral("Training %1 subtask").arg(kSubtasks)), 120'000));
    const QList<qint64> workers = m_cluster->workerPids(agent);
    QVERIFY(m_cluster->stopAgent(agent, SIGKILL));
    QVERIFY2(waitUntil([&] { return std::none_of(workers.begin(), workers.end(), processAlive); }, 30'000),
             "the killed agent's workers did not exit");
    m_cluster->stopCoordinator(SIGKILL);

    const qint64 mark = m_cluster->agentLogSize(agent);
    E2E_VERIFY(m_cluster->restartAgent(agent));
    // Down until every lease failed its check three times: by then each waits on a backoff longer than a
    // check.
    QStringList leases;
    const bool failedThrice = waitUntil(
        [&] {
            const QString log = m_cluster->agentLog(agent, mark);
            leases.clear();
            for (auto it = QRegularExpression(QStringLiteral("resuming lease ([0-9a-f]+)")).globalMatch(log);
                 it.hasNext();)
                leases << it.next().captured(1);
            return leases.size() == kSubtasks &&
                   std::all_of(leases.begin(), leases.end(), [&](const QString& lease) {
                       return log.count(QStringLiteral("checking lease %1 failed").arg(lease)) >= 3;
                   });
        },
        120'000, 500);
    QVERIFY2(failedThrice, qPrintable(m_cluster->agentLog(agent, mark).right(4000)));
    E2E_VERIFY(m_cluster->startCoordinator());
    E2E_VERIFY(
        m_cluster->waitForAgentLog(agent, QRegularExpression(QStringLiteral("answers again")), 90'000, mark));

    // For ten seconds: never two workers in one task folder, and one start per lease in the log.
    QString twins;
    waitUntil(
        [&] {
            QHash<QString, QList<qint64>> byTask;
            for (const auto& [pid, task] :
                 workersUnder(m_cluster->agent(agent).dir + QStringLiteral("/tasks")))
                byTask[task].append(pid);
            for (auto it = byTask.begin(); it != byTask.end(); ++it)
                if (it.value().size() > 1 && twins.isEmpty())
                    twins = QStringLiteral("gleaner-worker processes %1 and %2 both train in %3")
                                .arg(it.value().first())
                                .arg(it.value().last())
                                .arg(it.key());
            return false;
        },
        10'000, 250);
    QHash<QString, int> starts;
    for (const QString& line : lines(m_cluster->agentLog(agent, mark),
                                     QRegularExpression(QStringLiteral("starting \\S+ --task (\\S+)"))))
        ++starts[line.section(u' ', 3, 3)];
    QCOMPARE(starts.size(), kSubtasks);
    for (auto it = starts.begin(); it != starts.end(); ++it)
        QVERIFY2(it.value() == 1,
                 qPrintable(QStringLiteral("%1 workers were started for %2 after the restart; %3")
                                .arg(it.value())
                                .arg(it.key(), twins)));
    QVERIFY2(twins.isEmpty(), qPrintable(twins));
}

QTEST_GUILESS_MAIN(TestEndToEnd)
#include "TestEndToEnd.moc"
