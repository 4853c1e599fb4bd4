// The coordinator's core without HTTP: enrollment, work generation, leases and re-issue with an injected
// clock, result checks, leases given back as failed, VC-ASGD arithmetic, validation, completion, restart and
// the upgrade of an older database.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "aggregation/UpdateChecker.h"
#include "crypto/Sha256.h"
#include "crypto/SignedEnvelope.h"
#include "enrollment/Tokens.h"
#include "format/SafeTensors.h"
#include "ml/WeightMath.h"
#include "scheduling/Scheduler.h"
#include "scheduling/SchedulerTables.h"
#include "store/Database.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QScopeGuard>
#include <QSqlDatabase>
#include <QSqlQuery>

#include <QTest>

#include <cmath>
#include <future>

using namespace gleaner;
using namespace gleaner::coordinator;

using test::shifted;

namespace {

using Task = test::LeasedTask;

QString fileOf(const QJsonObject& manifest, const char* role)
{
    for (const auto& f : manifest.value(QStringLiteral("files")).toArray())
        if (f.toObject().value(QStringLiteral("role")).toString() == QLatin1String(role))
            return f.toObject().value(QStringLiteral("sha256")).toString();
    return {};
}

// The base version a lease answer hands out; -1 unless it is one task.
qint64 baseOf(const HttpResponse& reply)
{
    const QJsonArray tasks =
        QJsonDocument::fromJson(reply.body).object().value(QStringLiteral("tasks")).toArray();
    if (reply.status != 200 || tasks.size() != 1)
        return -1;
    const QJsonObject manifest =
        QJsonDocument::fromJson(tasks[0].toObject().value(QStringLiteral("manifest")).toString().toUtf8())
            .object();
    return manifest.value(QStringLiteral("base_version")).toInteger(-1);
}

} // namespace

class TestCoordinator : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void enrollmentNeedsAValidToken();
    void leaseCarriesASignedManifestWithContentAddressedFiles();
    void manifestNamesThePublicUrl();
    void manifestCarriesTheScheduledRate();
    void agentsBeyondAJobsWidthTrainAnotherJob();
    void exportedWeightsAreTheAverage();
    void nextEpochOverlapsTheTailOfThisOne();
    void resultIsFoldedInWithVcAsgd();
    void staleResultWeighsLessWithFedAsync();
    void missedDeadlineReissuesAndLateResultCountsOnce();
    void badResultsAreRefused_data();
    void badResultsAreRefused();
    void jobCompletesAtTargetAccuracy();
    void restartReplaysReceivedUpdates_data();
    void restartReplaysReceivedUpdates();
    void pseudoGradientRuleContinuesAcrossARestart();
    void declaredCapabilitiesAreCheckedAndKept();
    void invalidSpecIsRefusedWithTheField();
    void oldWeightsFilesAreRemovedOnceUnneeded();
    void updateFilesNoUpdateNamesGoOnceOld();
    void nextLeaseHoldsTheAgentsOwnResult();
    void onePublicationServesTheAgentsParkedMeanwhile();
    void theTickAnswersAParkedLeaseAtItsDeadline();
    void leasesWaitWhileTheFoldsAreBehind();
    void batchNormBuffersAreBlendedAndCountersTakeTheMaximum();
    void identicalJobsKeepTheirSharedWeightsFiles();
    void revokedAgentsWorkGoesBackAtOnce();
    void pausedJobHandsOutNothingButKeepsWorkInFlight();
    void failedLeaseGoesToAnotherAgentAtOnce();
    void failureReportIsCheckedByField_data();
    void failureReportIsCheckedByField();
    void failureOfAnExpiredLeaseLeavesTheDeliveredWorkDone();
    void failedLeaseStaysClosedAcrossARestart();
    void databaseOfSchemaVersion1IsUpgraded();
    void agentsAndLeasesOfAnotherCoordinatorAreServed();
    void secondCoordinatorOnOneDatabaseIsRefused();
    void configFileIsCheckedByField_data();
    void configFileIsCheckedByField();

private:
    std::vector<Task> lease(const QString& agentId, int maxTasks = 1);
    int upload(const QString& agentId, const QString& leaseId, const TensorBundle& weights, qint64 baseVersion,
               QString* error = nullptr);
    TensorBundle serverWeights(qint64 jobId);
    int failLease(const QString& agentId, const QString& leaseId, QString* error = nullptr,
                  const QJsonObject& report = {
                      {QStringLiteral("stage"), QStringLiteral("worker")},
                      {QStringLiteral("reason"), QStringLiteral("the worker ran out of memory")}});
    QJsonObject agentRecord(const QString& agentId);

    test::CoordinatorFixture f;
    QString m_dataset;
};

void TestCoordinator::init()
{
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
}

void TestCoordinator::cleanup()
{
    f.core.reset();
}

std::vector<Task> TestCoordinator::lease(const QString& agentId, int maxTasks)
{
    return f.lease(agentId, maxTasks);
}

int TestCoordinator::upload(const QString& agentId, const QString& leaseId, const TensorBundle& weights,
                            qint64 baseVersion, QString* error)
{
    return f.upload(agentId, leaseId, weights, baseVersion, error);
}

TensorBundle TestCoordinator::serverWeights(qint64 jobId)
{
    return f.serverWeights(jobId);
}

int TestCoordinator::failLease(const QString& agentId, const QString& leaseId, QString* error,
                               const QJsonObject& report)
{
    int status = 0;
    const QJsonObject reply =
        f.call([&] { return f.core->handBacks().failed(agentId, leaseId, report); }, &status);
    if (error)
        *error = reply.value(QStringLiteral("error")).toString();
    // A 200 is {"released": true} and nothing else; any other body makes the caller's status check fail.
    if (status == 200 && reply != QJsonObject{{QStringLiteral("released"), true}})
        return -1;
    return status;
}

QJsonObject TestCoordinator::agentRecord(const QString& agentId)
{
    const QJsonObject agents = f.call([&] { return f.core->enrollment().listAgents(); });
    for (const auto& a : agents.value(QStringLiteral("agents")).toArray())
        if (a.toObject().value(QStringLiteral("id")).toString() == agentId)
            return a.toObject();
    return {};
}

void TestCoordinator::enrollmentNeedsAValidToken()
{
    f.config.openEnrollment = false;
    QVERIFY(f.reopen());
    int status = 0;
    QJsonObject refused = f.call(
        [&] {
            return f.core->enrollment().enroll({{QStringLiteral("name"), QStringLiteral("a")}});
        },
        &status);
    QCOMPARE(status, 401);
    QVERIFY(refused.value(QStringLiteral("error")).toString().contains(u"token create"));

    const QJsonObject token = f.call(
        [&] {
            return f.core->enrollment().createToken({{QStringLiteral("uses"), 1}});
        },
        &status);
    QCOMPARE(status, 201);
    const QJsonObject request{{QStringLiteral("name"), QStringLiteral("a")},
                              {QStringLiteral("enrollment_token"), token.value(QStringLiteral("token"))}};
    const QJsonObject enrolled = f.call([&] { return f.core->enrollment().enroll(request); }, &status);
    QCOMPARE(status, 200);
    QVERIFY(enrolled.value(QStringLiteral("agent_token")).toString().startsWith(u"gag_"));
    QCOMPARE(enrolled.value(QStringLiteral("signing_public_key")).toString().toLatin1(), f.init.signingPublicKeyPem);

    f.call([&] { return f.core->enrollment().enroll(request); }, &status);
    QCOMPARE(status, 401); // used up
}

void TestCoordinator::leaseCarriesASignedManifestWithContentAddressedFiles()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    QVERIFY(job > 0);
    auto tasks = lease(agent, 3);
    QCOMPARE(tasks.size(), size_t(3));
    QSet<int> shards;
    for (const Task& task : tasks) {
        const QJsonObject& m = task.manifest;
        QCOMPARE(m.value(QStringLiteral("lease_id")).toString(), task.leaseId);
        QCOMPARE(m.value(QStringLiteral("base_version")).toInteger(), 0);
        QCOMPARE(m.value(QStringLiteral("subtask")).toObject().value(QStringLiteral("epoch")).toInt(), 1);
        shards.insert(m.value(QStringLiteral("subtask")).toObject().value(QStringLiteral("shard")).toInt());
        // A job without augmentation says nothing of it: manifests read as they did before it existed.
        QVERIFY(!m.value(QStringLiteral("hyperparameters")).toObject().contains(QStringLiteral("augment")));
        for (const char* role : {"model", "weights", "shard"}) {
            const QString sha = fileOf(m, role);
            QVERIFY2(f.core->blobs().contains(sha), role);
            auto digest = Sha256::hashFile(f.core->blobs().path(sha));
            QCOMPARE(Sha256::toHex(*digest), sha);
        }
    }
    QCOMPARE(shards.size(), 3);
    QCOMPARE(lease(agent, 3).size(), size_t(1)); // 4 shards in all
    // No work left: an empty list and a hint when to ask again.
    const QJsonObject empty = f.call([&] { return f.core->leases().lease(agent, {}); });
    QVERIFY(empty.value(QStringLiteral("tasks")).toArray().isEmpty());
    QCOMPARE(empty.value(QStringLiteral("retry_after")).toInt(), 10); // a job runs: ask again soon
}

void TestCoordinator::manifestNamesThePublicUrl()
{
    // Behind a load balancer, agents work for its URL, and the signed manifest must name that one.
    f.core.reset();
    f.config.publicUrl = QStringLiteral("https://gleaner.example.org:8443/");
    const bool reopened = f.reopen();
    f.config.publicUrl.clear(); // the next tests' coordinators have none
    QVERIFY(reopened);
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    f.submit(test::tinyJobSpec(m_dataset));
    auto tasks = lease(agent);
    QCOMPARE(tasks.size(), size_t(1));
    QCOMPARE(tasks[0].manifest.value(QStringLiteral("coordinator")).toString(),
             QStringLiteral("https://gleaner.example.org:8443"));
}

void TestCoordinator::manifestCarriesTheScheduledRate()
{
    // Warm-up over one epoch (4 updates) from half the rate: a lease from version 0 trains at 0.005, one from
    // version 2 at 0.0075 (0.5 + 0.5 * 2/4 of 0.01). The schedule itself is not in the manifest.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job =
        f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60)
                     .replace(R"("lr": 0.01})",
                              R"("lr": 0.01, "schedule": {"warmup_epochs": 1, "warmup_from": 0.5}})"));
    QVERIFY(job > 0);
    const auto rateOf = [](const Task& task) {
        const QJsonObject optimizer = task.manifest.value(QStringLiteral("hyperparameters"))
                                          .toObject()
                                          .value(QStringLiteral("optimizer"))
                                          .toObject();
        return std::pair{optimizer.value(QStringLiteral("lr")).toDouble(),
                         optimizer.contains(QStringLiteral("schedule"))};
    };
    auto first = lease(agent, 2);
    QCOMPARE(first.size(), size_t(2));
    QCOMPARE(rateOf(first[0]), std::pair(0.005, false));
    for (const Task& task : first)
        QCOMPARE(upload(agent, task.leaseId, test::shifted(f.leaseBase(task.leaseId), 0.01f), 0), 202);
    f.core->drain();
    f.core->state().call([&] { f.core->tick(); }); // publishes version 2
    f.core->drain();
    auto second = lease(agent, 1);
    QCOMPARE(second.size(), size_t(1));
    QCOMPARE(second[0].manifest.value(QStringLiteral("base_version")).toInteger(), 2);
    QVERIFY(std::abs(rateOf(second[0]).first - 0.0075) < 1e-12);
    // Handed back part-way, its checkpoint (written for the manifest's rate) is kept, and the lease that
    // resumes it trains at the same rate from the same base.
    QJsonObject reply;
    QCOMPARE(f.handBack(agent, second[0].leaseId, f.checkpointOf(second[0], 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    auto resumed = lease(agent, 1);
    QCOMPARE(resumed.size(), size_t(1));
    QVERIFY(resumed[0].manifest.contains(QStringLiteral("resume")));
    QCOMPARE(resumed[0].manifest.value(QStringLiteral("base_version")).toInteger(), 2);
    QCOMPARE(rateOf(resumed[0]), rateOf(second[0]));
}

void TestCoordinator::exportedWeightsAreTheAverage()
{
    // vc-asgd at alpha 0.5 with ema_decay 0.5: an upload of base + 0.02 moves the server copy to base + 0.01
    // (the average's first value), one of base + 0.03 to base + 0.02, and the average 2/3 of the way there:
    // base + 0.01667. Leases hand out the server copy; the export (what validation measures) is the average,
    // while the job runs and from its last snapshot once it ended.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(
        m_dataset, 4, 3, 0.99, 60,
        QStringLiteral(R"(, "aggregation": {"rule": "vc-asgd", "alpha": 0.5, "ema_decay": 0.5})")));
    QVERIFY(job > 0);
    auto tasks = lease(agent, 1);
    QCOMPARE(tasks.size(), size_t(1));
    const TensorBundle base = f.leaseBase(tasks[0].leaseId);
    const auto offBy = [&](const TensorBundle& weights, float by) {
        auto distance = ml::WeightMath::l2Distance(weights, test::shifted(base, by));
        return distance && *distance < 1e-5;
    };
    QCOMPARE(upload(agent, tasks[0].leaseId, test::shifted(base, 0.02f), 0), 202);
    f.core->drain();
    f.core->state().call([&] { f.core->tick(); }); // publishes version 1
    f.core->drain();
    QVERIFY(offBy(f.serverWeights(job), 0.01f));
    auto next = lease(agent, 1);
    QCOMPARE(next.size(), size_t(1));
    QVERIFY(offBy(f.leaseBase(next[0].leaseId), 0.01f));
    QCOMPARE(upload(agent, next[0].leaseId, test::shifted(base, 0.03f), 1), 202);
    f.core->drain();
    f.core->state().call([&] { f.core->tick(); }); // publishes version 2
    f.core->drain();
    auto third = lease(agent, 1);
    QCOMPARE(third.size(), size_t(1));
    QVERIFY(offBy(f.leaseBase(third[0].leaseId), 0.02f));
    const TensorBundle running = f.serverWeights(job);
    QVERIFY(offBy(running, 0.01f + 0.02f / 3));
    QCOMPARE(running.metadata().value(QStringLiteral("gleaner.version")), QStringLiteral("2"));
    int status = 0;
    f.call([&] { return f.core->jobs().setStatus(job, "cancel"); }, &status);
    QCOMPARE(status, 200);
    f.core->drain();
    QVERIFY(offBy(f.serverWeights(job), 0.01f + 0.02f / 3));
}

void TestCoordinator::agentsBeyondAJobsWidthTrainAnotherJob()
{
    // Job 1 can use two agents at once; six agents ask: two train it, four the other job, none is idle.
    const qint64 narrow =
        f.submit(test::tinyJobSpec(m_dataset, 8, 3, 0.99, 60, QStringLiteral(R"(, "max_agents": 2)")));
    const qint64 wide = f.submit(
        test::tinyJobSpec(m_dataset, 8, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    QVERIFY(narrow > 0 && wide > narrow);
    std::map<qint64, QStringList> byJob;
    for (int i = 0; i < 6; ++i) {
        const QString agent =
            f.enroll(QStringLiteral("agent-%1").arg(i)).value(QStringLiteral("agent_id")).toString();
        auto tasks = lease(agent, 1);
        QCOMPARE(tasks.size(), size_t(1));
        byJob[tasks[0]
                  .manifest.value(QStringLiteral("job"))
                  .toObject()
                  .value(QStringLiteral("id"))
                  .toInteger()]
            << agent;
    }
    QCOMPARE(byJob[narrow].size(), 2);
    QCOMPARE(byJob[wide].size(), 4);
    // The narrow job's status says why: its cap, and who holds its leases.
    const QJsonObject status = f.call([&] { return f.core->jobs().status(narrow); });
    const QJsonObject width = status.value(QStringLiteral("width")).toObject();
    QCOMPARE(width.value(QStringLiteral("cap")).toInt(), 2);
    QCOMPARE(width.value(QStringLiteral("holding")).toInt(), 2);
    // A seventh agent trains the wide job too: the narrow one has as many as it can use.
    const QString seventh = f.enroll(QStringLiteral("agent-6")).value(QStringLiteral("agent_id")).toString();
    auto more = lease(seventh, 1);
    QCOMPARE(more.size(), size_t(1));
    QCOMPARE(more[0].manifest.value(QStringLiteral("job")).toObject().value(QStringLiteral("id")).toInteger(),
             wide);
    // Once the wide job has nothing left either, an empty reply says which job is at its width.
    const QString eighth = f.enroll(QStringLiteral("agent-7")).value(QStringLiteral("agent_id")).toString();
    QCOMPARE(lease(eighth, 3).size(), size_t(3)); // the wide job's last three shards
    QJsonObject reply;
    QVERIFY(f.lease(eighth, 1, &reply).empty());
    QCOMPARE(reply.value(QStringLiteral("at_width")).toString(),
             QStringLiteral("job %1 has the 2 agents it can use now").arg(narrow));
}

void TestCoordinator::nextEpochOverlapsTheTailOfThisOne()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 2)) > 0);
    auto first = lease(agent, 2);
    QCOMPARE(first.size(), size_t(2));
    // Epoch 1 is all out but not back: an idle agent gets epoch 2's work instead of waiting at the boundary.
    auto next = lease(agent, 4);
    QCOMPARE(next.size(), size_t(2));
    for (const Task& task : next)
        QCOMPARE(task.manifest.value(QStringLiteral("subtask")).toObject().value(QStringLiteral("epoch")).toInt(), 2);
    // ... but no further: epoch 3 waits until epoch 1 is validated (bounded staleness).
    QVERIFY(lease(agent, 4).empty());
}

void TestCoordinator::resultIsFoldedInWithVcAsgd()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset));
    const TensorBundle before = serverWeights(job);
    QVERIFY(!before.isEmpty());
    auto tasks = lease(agent);
    QCOMPARE(tasks.size(), size_t(1));

    // A plausible local epoch: every value moved by 0.01 (a far larger move is refused: hostileUpdatesAreRefused).
    TensorBundle client = before;
    for (const auto& entry : client.entries())
        for (float& v : client.mutableValues<float>(entry))
            v += 0.01f;
    QCOMPARE(upload(agent, tasks[0].leaseId, client, 0), 202);

    // Epoch 1 with alpha "epoch": a = 1 / 2, so every value is (w + c) / 2.
    const TensorBundle after = serverWeights(job);
    for (const auto& entry : before.entries()) {
        const auto w0 = before.values<float>(entry);
        const auto c = client.values<float>(*client.find(entry.name));
        const auto w1 = after.values<float>(*after.find(entry.name));
        for (size_t i = 0; i < w0.size(); ++i)
            QCOMPARE(w1[i], 0.5f * w0[i] + 0.5f * c[i]);
    }
    const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 1);
}

void TestCoordinator::staleResultWeighsLessWithFedAsync()
{
    // alpha 0.5, s(t) = (t + 1)^-1: a fresh update weighs 1/2, one folded after another from the same base 1/4.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(
        m_dataset, 4, 3, 0.99, 60,
        QStringLiteral(R"(, "aggregation": {"rule": "fedasync", "alpha": 0.5, "staleness": {"function": "polynomial", "a": 1}})")));
    QVERIFY(job > 0);
    const TensorBundle w0 = serverWeights(job);
    auto tasks = lease(agent, 2);
    QCOMPARE(tasks.size(), size_t(2));
    const auto moved = [&](float by) { return shifted(w0, by); };
    const TensorBundle c1 = moved(0.01f), c2 = moved(-0.02f);
    QString error;
    QCOMPARE(upload(agent, tasks[0].leaseId, c1, 0), 202);
    QCOMPARE(f.upload(agent, tasks[1].leaseId, c2, 0, &error), 202); // staleness 1
    const TensorBundle w2 = serverWeights(job);
    for (const auto& entry : w0.entries()) {
        const auto a = w0.values<float>(entry);
        const auto one = c1.values<float>(*c1.find(entry.name));
        const auto two = c2.values<float>(*c2.find(entry.name));
        const auto got = w2.values<float>(*w2.find(entry.name));
        for (size_t i = 0; i < a.size(); ++i) {
            const double w1 = 0.5 * a[i] + 0.5 * one[i];
            const double expected = 0.75 * w1 + 0.25 * two[i];
            QVERIFY2(std::abs(got[i] - expected) <= 1e-6 * (1.0 + std::abs(expected)),
                     qPrintable(QStringLiteral("%1[%2]: %3, expected %4").arg(entry.name).arg(i).arg(got[i]).arg(expected)));
        }
    }
}

void TestCoordinator::missedDeadlineReissuesAndLateResultCountsOnce()
{
    const QString slow = f.enroll(QStringLiteral("slow")).value(QStringLiteral("agent_id")).toString();
    const QString fast = f.enroll(QStringLiteral("fast")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 1, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    auto first = lease(slow);
    QCOMPARE(first.size(), size_t(1));
    QVERIFY(lease(fast).empty()); // the only workunit is out

    f.clock.advance(61'000);
    f.core->state().call([&] { f.core->tick(); });
    auto second = lease(fast);
    QCOMPARE(second.size(), size_t(1)); // re-issued to another agent
    QCOMPARE(second[0].manifest.value(QStringLiteral("subtask")), first[0].manifest.value(QStringLiteral("subtask")));

    const TensorBundle weights = serverWeights(job);
    QCOMPARE(upload(slow, first[0].leaseId, weights, 0), 202); // late, still useful to VC-ASGD
    QString error;
    QCOMPARE(upload(slow, first[0].leaseId, weights, 0, &error), 409); // the duplicate is refused
    QVERIFY2(error.contains(u"duplicate"), qPrintable(error));
    const qint64 base = second[0].manifest.value(QStringLiteral("base_version")).toInteger();
    QCOMPARE(upload(fast, second[0].leaseId, weights, base), 202);
    // The workunit counts once: the second result is compared with the first, not folded in a second time.
    QCOMPARE(f.call([&] { return f.core->jobs().status(job); }).value(QStringLiteral("updates")).toInteger(),
             1);

    const QJsonObject agents = f.call([&] { return f.core->enrollment().listAgents(); });
    for (const auto& a : agents.value(QStringLiteral("agents")).toArray()) {
        const QJsonObject agent = a.toObject();
        if (agent.value(QStringLiteral("id")).toString() == slow) {
            QCOMPARE(agent.value(QStringLiteral("timed_out")).toInt(), 1);
            QCOMPARE(agent.value(QStringLiteral("done")).toInt(), 1);
        }
    }
}

void TestCoordinator::badResultsAreRefused_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("message");
    QTest::newRow("wrong shape") << "shape" << 422 << "does not match the model";
    QTest::newRow("NaN value") << "nan" << 422 << "NaN or infinite";
    QTest::newRow("wrong base version") << "base" << 422 << "trained from version 5";
    QTest::newRow("another agent's lease") << "foreign" << 409 << "belongs to another agent";
    QTest::newRow("unknown lease") << "unknown" << 404 << "is not known";
}

void TestCoordinator::badResultsAreRefused()
{
    QFETCH(QString, kind);
    QFETCH(int, status);
    QFETCH(QString, message);
    const QString agent = f.enroll(QStringLiteral("a")).value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("b")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset));
    auto tasks = lease(agent);
    const TensorBundle good = serverWeights(job);
    TensorBundle bad = good;
    QString leaseId = tasks[0].leaseId;
    QString who = agent;
    qint64 base = 0;
    if (kind == u"shape") {
        bad = TensorBundle();
        for (const auto& e : good.entries())
            QVERIFY(bad.addZeroed(e.name, e.dtype, e.name == u"classifier.bias" ? QList<qint64>{5} : e.shape));
    } else if (kind == u"nan") {
        bad.mutableValues<float>(bad.entries().first())[0] = std::numeric_limits<float>::quiet_NaN();
    } else if (kind == u"base") {
        base = 5;
    } else if (kind == u"foreign") {
        who = other;
    } else if (kind == u"unknown") {
        leaseId = QStringLiteral("0123");
    }
    QString error;
    QCOMPARE(upload(who, leaseId, bad, base, &error), status);
    QVERIFY2(error.contains(message), qPrintable(error));
    QCOMPARE(serverWeights(job).buffer(), good.buffer()); // nothing touched the server copy
}

void TestCoordinator::jobCompletesAtTargetAccuracy()
{
    // A job whose target is reached by its first validation: the initial weights already reach 0.0.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 2, 5, 0.0001));
    const TensorBundle weights = serverWeights(job);
    for (const Task& task : lease(agent, 2))
        QCOMPARE(upload(agent, task.leaseId, weights, 0), 202);
    f.core->drain();
    const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("state")).toString(), QStringLiteral("completed"));
    QCOMPARE(status.value(QStringLiteral("history")).toArray().size(), 1);
    QVERIFY(status.value(QStringLiteral("reason")).toString().contains(u"target accuracy"));
    QVERIFY(lease(agent).empty());
    // A restart shows the finished job as it was: its weights' version is its last snapshot's.
    f.core.reset();
    QVERIFY(f.reopen());
    const QJsonObject after = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(after.value(QStringLiteral("updates")).toInteger(), 2);
    QCOMPARE(after.value(QStringLiteral("accuracy")).toDouble(), status.value(QStringLiteral("accuracy")).toDouble());
}

void TestCoordinator::restartReplaysReceivedUpdates_data()
{
    QTest::addColumn<QString>("encoding"); // the job's "upload" object, empty for none
    QTest::newRow("full weights") << QString();
    // Kept as they came: a replay decodes them against the weights their leases handed out.
    QTest::newRow("top-k updates") << QStringLiteral(R"({"encoding": "topk", "density": 0.2})");
    QTest::newRow("int8 updates") << QStringLiteral(R"({"encoding": "int8"})");
}

void TestCoordinator::restartReplaysReceivedUpdates()
{
    QFETCH(QString, encoding);
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QString extra = QStringLiteral(R"(, "overlap_epochs": false)");
    if (!encoding.isEmpty())
        extra += QStringLiteral(R"(, "upload": )") + encoding;
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, extra));
    TensorBundle client = serverWeights(job);
    for (const auto& entry : client.entries())
        for (float& v : client.mutableValues<float>(entry))
            v += 0.02f;
    auto spec = UploadSpec::fromJson(QJsonDocument::fromJson(encoding.toUtf8()).object());
    for (const Task& task : lease(agent, 3)) {
        if (encoding.isEmpty())
            QCOMPARE(upload(agent, task.leaseId, client, 0), 202);
        else
            QCOMPARE(f.uploadEncoded(agent, task.leaseId, client, 0, *spec), 202);
    }
    const TensorBundle expected = serverWeights(job);

    // Reopen without a snapshot in between: the three received updates are replayed from their files.
    f.core.reset();
    QVERIFY(f.reopen());
    f.core->drain();
    const TensorBundle replayed = serverWeights(job);
    for (const auto& entry : expected.entries())
        QCOMPARE(replayed.data(*replayed.find(entry.name)), expected.data(entry));
    const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 3);
    QCOMPARE(lease(agent, 4).size(), size_t(1)); // the fourth workunit is still there to do
}

void TestCoordinator::pseudoGradientRuleContinuesAcrossARestart()
{
    // Delayed Nesterov, K = 2, lr 1, momentum 0.5. The first update is half-applied and waits in the buffer; the
    // restart must keep that buffer (written beside the snapshot), so the second update completes the step:
    //   d1 = +0.02: w0 + 0.01;  d2 = +0.04: w0 + 0.03, then m = 0.03 and w0 + 0.03 + 0.5 m = w0 + 0.045.
    // A rule that forgot its buffer would stop at w0 + 0.03.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(
        m_dataset, 4, 3, 0.99, 60,
        QStringLiteral(R"(, "aggregation": {"rule": "delayed-nesterov", "buffer": 2, "server_lr": 1, "momentum": 0.5})")));
    QVERIFY(job > 0);
    const TensorBundle w0 = serverWeights(job);
    const auto moved = [&](float by) { return shifted(w0, by); };
    auto tasks = lease(agent, 2);
    QCOMPARE(tasks.size(), size_t(2));
    QCOMPARE(upload(agent, tasks[0].leaseId, moved(0.02f), 0), 202);
    f.core.reset();
    QVERIFY(f.reopen());
    QCOMPARE(upload(agent, tasks[1].leaseId, moved(0.04f), 0), 202);
    const TensorBundle w2 = serverWeights(job);
    for (const auto& entry : w0.entries()) {
        const auto before = w0.values<float>(entry);
        const auto after = w2.values<float>(*w2.find(entry.name));
        for (size_t i = 0; i < before.size(); ++i)
            QVERIFY2(std::abs(after[i] - (before[i] + 0.045f)) < 1e-5f,
                     qPrintable(QStringLiteral("%1[%2] moved by %3").arg(entry.name).arg(i).arg(after[i] - before[i])));
    }
}

void TestCoordinator::declaredCapabilitiesAreCheckedAndKept()
{
    // What a lease request declares of the machine lands on the agent's record, checked value by value: the
    // admin sees the GPU, and the cores cap the agent's leases (twice its cores).
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 8, 3, 0.99, 60)) > 0);
    const QJsonObject request{
        {QStringLiteral("max_tasks"), 16},
        {QStringLiteral("capabilities"),
         QJsonObject{{QStringLiteral("cores"), 2}, {QStringLiteral("ram_mb"), 8192},
                     {QStringLiteral("gpu"), QStringLiteral("NVIDIA RTX 4090")}, {QStringLiteral("gpus"), 1},
                     {QStringLiteral("threads"), -4}, {QStringLiteral("device"), QString(500, u'x')},
                     {QStringLiteral("arch"), QJsonObject{}}}}};
    const QJsonObject reply = f.call([&] { return f.core->leases().lease(agent, request); });
    QCOMPARE(reply.value(QStringLiteral("tasks")).toArray().size(), 4);
    const QJsonObject hardware = agentRecord(agent).value(QStringLiteral("hardware")).toObject();
    QCOMPARE(hardware.value(QStringLiteral("gpu")).toString(), QStringLiteral("NVIDIA RTX 4090"));
    QCOMPARE(hardware.value(QStringLiteral("ram_mb")).toInteger(), 8192);
    QCOMPARE(hardware.value(QStringLiteral("cores")).toInt(), 2);
    QVERIFY(!hardware.contains(QStringLiteral("threads")));       // out of range: dropped
    QVERIFY(hardware.value(QStringLiteral("device")).toString().size() < 100); // too long: dropped
    QVERIFY(!hardware.value(QStringLiteral("arch")).isObject());   // not a string: dropped
}

void TestCoordinator::invalidSpecIsRefusedWithTheField()
{
    int status = 0;
    QJsonObject reply = f.call([&] { return f.core->jobs().submit(R"({"name": "x"})"); }, &status);
    QCOMPARE(status, 422);
    QVERIFY2(reply.value(QStringLiteral("error")).toString().contains(u"dataset"), qPrintable(reply.value(QStringLiteral("error")).toString()));
    const QByteArray missing = test::tinyJobSpec(QStringLiteral("/nonexistent"));
    reply = f.call([&] { return f.core->jobs().submit(missing); }, &status);
    QCOMPARE(status, 422);
    QVERIFY(reply.value(QStringLiteral("error")).toString().contains(u"/nonexistent/train.safetensors"));
}

void TestCoordinator::nextLeaseHoldsTheAgentsOwnResult()
{
    // An agent asks for its next subtask right after its upload, before any tick published the fold: the answer
    // waits for a publication asked for then, and hands out weights that hold the agent's own result.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("other")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 10, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle weights = serverWeights(job);
    const auto leaseNow = [&](const QString& who) {
        std::promise<HttpResponse> answered;
        f.core->state().post([&] {
            f.core->pacer().whenCurrent(who, QJsonObject{{QStringLiteral("max_tasks"), 1}},
                                        [&](HttpResponse r) { answered.set_value(std::move(r)); });
        });
        return baseOf(answered.get_future().get());
    };
    auto first = lease(agent);
    QCOMPARE(first[0].manifest.value(QStringLiteral("base_version")).toInteger(), 0);
    QCOMPARE(upload(agent, first[0].leaseId, shifted(weights, 0.01f), 0), 202);
    QCOMPARE(leaseNow(agent), 1);
    // The other agent has no result of its own out: it is answered at once, with what is published.
    QCOMPARE(leaseNow(other), 1);
    auto third = lease(other);
    QCOMPARE(upload(other, third[0].leaseId, shifted(weights, 0.01f), 1), 202);
    // Two requests at once: the first waits for the publication, the second (one parked per agent) is answered
    // at once with what is published.
    std::vector<std::pair<int, qint64>> answers; // (order, base version)
    std::promise<void> both;
    f.core->state().post([&] {
        for (int i = 0; i < 2; ++i)
            f.core->pacer().whenCurrent(other, QJsonObject{{QStringLiteral("max_tasks"), 1}},
                                        [&, i](HttpResponse r) {
                                            answers.emplace_back(i, baseOf(r));
                                            if (answers.size() == 2)
                                                both.set_value();
                                        });
    });
    both.get_future().wait();
    QCOMPARE(answers, (std::vector<std::pair<int, qint64>>{{1, 1}, {0, 2}}));

    // Without the wait (config 0), the next lease carries the last file the tick published.
    f.core.reset();
    f.config.leaseWaitForOwnUpdateMs = 0;
    QVERIFY(f.reopen());
    f.core->drain();
    auto fourth = lease(agent);
    QVERIFY(!fourth.empty());
    const qint64 base = fourth[0].manifest.value(QStringLiteral("base_version")).toInteger();
    QCOMPARE(upload(agent, fourth[0].leaseId, shifted(serverWeights(job), 0.01f), base), 202);
    QCOMPARE(leaseNow(agent), base);
    f.config.leaseWaitForOwnUpdateMs =
        CoordinatorConfig{}.leaseWaitForOwnUpdateMs; // the fixture's config outlives the test
}

void TestCoordinator::onePublicationServesTheAgentsParkedMeanwhile()
{
    // Three agents upload and ask for their next subtask, each request right after its own upload, all in one
    // turn of the state thread: the weights thread's queue holds the first fold, the publication the first
    // request asked for, then the other two folds. The other two requests wait for that publication rather
    // than asking for one each (a file of the whole weights per update), and when it reports without their
    // updates, one publication asked for then serves them both.
    QVERIFY2(f.config.leaseWaitForOwnUpdateMs > 0,
             "the lease wait is off: a test before this one left it so");
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 10, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle weights = serverWeights(job);
    std::vector<QString> agents, leases, files;
    for (int i = 0; i < 3; ++i) {
        agents.push_back(
            f.enroll(QStringLiteral("agent-%1").arg(i)).value(QStringLiteral("agent_id")).toString());
        const auto task = lease(agents.back());
        QCOMPARE(task.size(), size_t(1));
        leases.push_back(task[0].leaseId);
        files.push_back(f.writeUpload(SafeTensors::serialize(
            f.withResultMetadata(task[0].leaseId, shifted(weights, 0.01f * float(i + 1)), 0))));
        QVERIFY(!files.back().isEmpty());
    }
    std::vector<int> statuses(3, 0);
    std::vector<qint64> bases(3, -2);
    int answered = 0;
    std::promise<void> all;
    f.core->state().post([&] {
        for (int i = 0; i < 3; ++i) {
            statuses[size_t(i)] =
                f.resultOfUpload(agents[size_t(i)], leases[size_t(i)], files[size_t(i)]).status;
            f.core->pacer().whenCurrent(agents[size_t(i)], QJsonObject{{QStringLiteral("max_tasks"), 1}},
                                        [&, i](HttpResponse r) {
                                            bases[size_t(i)] = baseOf(r);
                                            if (++answered == 3)
                                                all.set_value();
                                        });
        }
    });
    QVERIFY(all.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    QCOMPARE(statuses, (std::vector<int>{202, 202, 202}));
    // The first publication holds the first update; the second holds all three. One publication per request
    // would have handed the second agent version 2.
    QCOMPARE(bases, (std::vector<qint64>{1, 3, 3}));
    f.core->drain();
}

void TestCoordinator::theTickAnswersAParkedLeaseAtItsDeadline()
{
    // A parked lease whose publication has not reported by its deadline (it failed, or the weights thread is
    // busy) is answered by the tick with what is published. Here the tick runs in the same turn of the state
    // thread as the upload and the request, so no publication can have reported yet. The publication that
    // lease asked for, reporting later, leaves none on its way: the agent's next parked request asks anew;
    // and so does one that failed (the blob folder made unwritable for it).
    QVERIFY2(f.config.leaseWaitForOwnUpdateMs > 0,
             "the lease wait is off: a test before this one left it so");
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 10, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    f.core->drain(); // the job's first publication has reported: none but the parked lease's is on its way
    const QString blobs = f.dir.blobsDir(f.config);
    const QString away = blobs + QStringLiteral(".away");
    enum class Then
    {
        Report,
        Tick,
        FailAndTick
    };
    const auto request = [&](Then then, std::vector<qint64>& bases) {
        const auto task = lease(agent);
        QCOMPARE(task.size(), size_t(1));
        const QString file = f.writeUpload(SafeTensors::serialize(
            f.withResultMetadata(task[0].leaseId, shifted(serverWeights(job), 0.01f),
                                 task[0].manifest.value(QStringLiteral("base_version")).toInteger())));
        QVERIFY(!file.isEmpty());
        std::promise<void> answered;
        bool early = false;
        bool broken = false;
        int status = 0;
        const size_t before = bases.size();
        f.core->state().post([&] {
            status = f.resultOfUpload(agent, task[0].leaseId, file).status;
            if (then == Then::FailAndTick) {
                // A file where the blob folder was: the publication cannot write its weights.
                QFile in(blobs);
                broken = QDir().rename(blobs, away) && in.open(QIODevice::WriteOnly);
            }
            f.core->pacer().whenCurrent(agent, QJsonObject{{QStringLiteral("max_tasks"), 1}},
                                        [&](HttpResponse r) {
                                            bases.push_back(baseOf(r));
                                            answered.set_value();
                                        });
            early = bases.size() > before;
            if (then != Then::Report) {
                f.clock.advance(f.config.leaseWaitForOwnUpdateMs + 1);
                f.core->tick();
            }
        });
        const bool inTime =
            answered.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        f.core->drain();
        // The blob folder back before any check can end the test: the tests after it use the same fixture.
        if (then == Then::FailAndTick)
            QVERIFY(QFile::remove(blobs) && QDir().rename(away, blobs));
        QVERIFY(inTime);
        QCOMPARE(status, 202);
        QVERIFY2(!early, "the lease was answered before it parked");
        QCOMPARE(broken, then == Then::FailAndTick);
    };
    std::vector<qint64> bases;
    request(Then::Tick, bases);
    QCOMPARE(bases, (std::vector<qint64>{0})); // the tick's answer: nothing of the agent's published yet
    // The publication that lease asked for reported after all: the next request asks for one of its own.
    request(Then::Report, bases);
    QCOMPARE(bases, (std::vector<qint64>{0, 2}));
    request(Then::FailAndTick, bases);
    QCOMPARE(bases, (std::vector<qint64>{0, 2, 2})); // version 3 could not be published
    request(Then::Report, bases);
    QCOMPARE(bases, (std::vector<qint64>{0, 2, 2, 4}));
}

void TestCoordinator::leasesWaitWhileTheFoldsAreBehind()
{
    // Updates received and not folded yet hold their weights in memory. Past fold_backlog_mb the coordinator
    // hands out no new lease, with the reason and a short retry, until the folds catch up; the leases already
    // out still deliver. The test holds the weights thread, as folds that lag would.
    const auto restore = qScopeGuard([&] { f.config.foldBacklogMb = CoordinatorConfig{}.foldBacklogMb; });
    f.config.foldBacklogMb = 1;
    QVERIFY(f.reopen());
    // An MLP of 282,628 parameters: one update holds 1.08 MiB, more than the bound.
    const qint64 job =
        f.submit(test::tinyJobSpec(m_dataset, 10, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)"))
                     .replace(R"("hidden": [16])", R"("hidden": [4096])"));
    const TensorBundle weights = serverWeights(job);
    QCOMPARE(weights.parameterCount(), qint64(282'628));
    const QString agent = f.enroll(QStringLiteral("uploader")).value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("asker")).value(QStringLiteral("agent_id")).toString();
    const auto tasks = lease(agent, 3);
    QCOMPARE(tasks.size(), size_t(3));
    // The fixture's upload() waits for the fold; these do not.
    const auto send = [&](const Task& task, float by, qint64 base) {
        const QString file = f.writeUpload(
            SafeTensors::serialize(f.withResultMetadata(task.leaseId, shifted(weights, by), base)));
        return f.core->state().call([&] { return f.resultOfUpload(agent, task.leaseId, file).status; });
    };
    const auto ask = [&] {
        return f.core->state().call([&] {
            return f.core->leases().lease(other, QJsonObject{{QStringLiteral("max_tasks"), 1}});
        });
    };

    std::promise<void> go;
    std::shared_future<void> gate = go.get_future().share();
    f.core->weightsThread().post([gate] { gate.wait(); });
    auto opened = qScopeGuard([&] { go.set_value(); }); // never leaves the thread held
    QCOMPARE(baseOf(ask()), 0);                         // nothing waits to be folded yet
    QCOMPARE(send(tasks[0], 0.01f, 0), 202);
    const quint64 heldBefore = f.core->metrics().leasesHeldBack();
    const HttpResponse held = ask();
    QCOMPARE(held.status, 200);
    const QJsonObject reply = QJsonDocument::fromJson(held.body).object();
    QVERIFY(reply.value(QStringLiteral("tasks")).toArray().isEmpty());
    const int retry = reply.value(QStringLiteral("retry_after")).toInt();
    QVERIFY2(retry >= 2 && retry <= 4, qPrintable(QString::number(retry))); // spread over 2 to 4 s
    QVERIFY2(
        reply.value(QStringLiteral("held_back")).toString().contains(QStringLiteral("fold_backlog_mb of 1")),
        qPrintable(reply.value(QStringLiteral("held_back")).toString()));
    QCOMPARE(f.core->metrics().leasesHeldBack(), heldBefore + 1);
    // The leases already out still deliver while new ones wait.
    QCOMPARE(send(tasks[1], 0.02f, 0), 202);
    QVERIFY(QJsonDocument::fromJson(ask().body).object().contains(QStringLiteral("held_back")));

    opened.dismiss();
    go.set_value();
    f.core->drain();
    f.core->state().call([&] { f.core->tick(); }); // publishes what the folds made
    f.core->drain();
    QCOMPARE(baseOf(ask()), 2); // both folded in and published
    QCOMPARE(upload(agent, tasks[2].leaseId, shifted(weights, 0.03f), 0), 202);
    f.core->drain();

    // With no bound (0) the same backlog holds nothing back.
    f.core.reset();
    f.config.foldBacklogMb = 0;
    QVERIFY(f.reopen());
    const auto more = lease(agent, 1);
    QCOMPARE(more.size(), size_t(1));
    std::promise<void> go2;
    std::shared_future<void> gate2 = go2.get_future().share();
    f.core->weightsThread().post([gate2] { gate2.wait(); });
    auto opened2 = qScopeGuard([&] { go2.set_value(); });
    QCOMPARE(send(more[0], 0.01f, more[0].manifest.value(QStringLiteral("base_version")).toInteger()), 202);
    QVERIFY(baseOf(ask()) >= 0);
}

void TestCoordinator::oldWeightsFilesAreRemovedOnceUnneeded()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle weights = serverWeights(job);
    const auto tick = [&] {
        f.core->state().call([&] { f.core->tick(); });
        f.core->drain();
    };
    auto first = lease(agent, 2);
    QCOMPARE(upload(agent, first[0].leaseId, weights, 0), 202);
    tick(); // publishes version 1
    auto second = lease(agent);
    const QString v1 = fileOf(second[0].manifest, "weights");
    QCOMPARE(second[0].manifest.value(QStringLiteral("base_version")).toInteger(), 1);
    QCOMPARE(upload(agent, first[1].leaseId, weights, 0), 202);
    tick(); // publishes version 2; version 1 is still held by an open lease
    tick();
    QVERIFY(f.core->blobs().contains(v1));
    QCOMPARE(upload(agent, second[0].leaseId, weights, 1), 202);
    tick();
    tick();
    QVERIFY2(!f.core->blobs().contains(v1), "a weights file no lease needs any more stays on disk");
    QVERIFY(!f.core->blobs().contains(fileOf(first[0].manifest, "weights"))); // version 0's file went too
    QVERIFY(!serverWeights(job).isEmpty());                                    // and the weights are still there
}

void TestCoordinator::updateFilesNoUpdateNamesGoOnceOld()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60));
    QVERIFY(job > 0);
    const auto task = lease(agent);
    QCOMPARE(task.size(), size_t(1));
    QCOMPARE(upload(agent, task[0].leaseId, serverWeights(job), 0), 202);
    // The update's file carries a name of its receiving attempt's own, which its row names.
    QString named;
    {
        auto db = Database::open(f.dir.databaseLocation(f.config));
        QVERIFY2(db.ok(), qPrintable(db ? QString() : db.error()));
        auto row =
            (*db)->exec(QStringLiteral("SELECT file FROM updates WHERE lease_id = ?"), {task[0].leaseId});
        QVERIFY(row.ok() && row->next());
        named = row->value(0).toString();
    }
    const QString folder = QStringLiteral("updates/%1/").arg(job);
    QVERIFY2(QRegularExpression(QStringLiteral("^%1%2\\.[0-9a-f]{16}\\.safetensors$")
                                    .arg(QRegularExpression::escape(folder), task[0].leaseId))
                 .match(named)
                 .hasMatch(),
             qPrintable(named));
    const QString root = f.dir.storageRoot(f.config) + u'/';
    QVERIFY(QFile::exists(root + named));

    // Left by crashes between a move and its commit: an hour old, and just now (perhaps a commit under way).
    const auto place = [&](const QString& name, qint64 ageSeconds) {
        QFile file(root + folder + name);
        return file.open(QIODevice::WriteOnly) && file.write("left") == 4 && file.flush() &&
               file.setFileTime(QDateTime::currentDateTimeUtc().addSecs(-ageSeconds),
                                QFileDevice::FileModificationTime);
    };
    QVERIFY(place(task[0].leaseId + QStringLiteral(".00000000000000aa.safetensors"), 3700));
    QVERIFY(place(QStringLiteral(".qt_temp.XXab12"), 7200));
    QVERIFY(place(task[0].leaseId + QStringLiteral(".00000000000000bb.safetensors"), 60));

    // A clean stop snapshots: the folded update's file goes, the old ones nobody names go, the young one
    // stays.
    f.core.reset();
    QVERIFY(!QFile::exists(root + named));
    QVERIFY(
        !QFile::exists(root + folder + task[0].leaseId + QStringLiteral(".00000000000000aa.safetensors")));
    QVERIFY(!QFile::exists(root + folder + QStringLiteral(".qt_temp.XXab12")));
    QVERIFY(QFile::exists(root + folder + task[0].leaseId + QStringLiteral(".00000000000000bb.safetensors")));
}

void TestCoordinator::batchNormBuffersAreBlendedAndCountersTakeTheMaximum()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QByteArray spec = test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)"));
    spec.replace(R"("arch": "mlp")", R"("arch": "resnet")").replace(R"("hidden": [16])", R"("depth": 11, "width": 2)");
    const qint64 job = f.submit(spec);
    QVERIFY(job > 0);
    const TensorBundle before = serverWeights(job);
    const TensorEntry* mean = before.find(u"stem_bn.running_mean");
    const TensorEntry* counter = before.find(u"stem_bn.num_batches_tracked");
    QVERIFY(mean && counter);
    // A plausible local epoch over a shard of 128 samples in batches of 16: values moved a little, counters up
    // by the 8 mini-batches it ran.
    TensorBundle client = before;
    for (const auto& entry : client.entries()) {
        if (entry.dtype == DType::F32)
            for (float& v : client.mutableValues<float>(entry))
                v += 0.01f;
        else
            for (qint64& v : client.mutableValues<qint64>(entry))
                v += 8;
    }
    auto tasks = lease(agent);
    QCOMPARE(upload(agent, tasks[0].leaseId, client, 0), 202);
    const TensorBundle after = serverWeights(job);
    // Running statistics follow the parameters they describe: the same a = 1/2 in epoch 1.
    const auto m0 = before.values<float>(*mean);
    const auto c = client.values<float>(*client.find(mean->name));
    const auto m1 = after.values<float>(*after.find(mean->name));
    for (size_t i = 0; i < m0.size(); ++i)
        QCOMPARE(m1[i], 0.5f * m0[i] + 0.5f * c[i]);
    // A counter is not averaged: the larger count is kept.
    QCOMPARE(after.values<qint64>(*after.find(counter->name))[0], before.values<qint64>(*counter)[0] + 8);
}

void TestCoordinator::identicalJobsKeepTheirSharedWeightsFiles()
{
    // Same model, same seed: both jobs publish byte-identical version-0 files, one blob in the store.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const QByteArray spec = test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)"));
    const qint64 a = f.submit(spec);
    const qint64 b = f.submit(spec);
    QVERIFY(a > 0 && b > 0);
    auto tasks = lease(agent, 2); // job a's two workunits; job b has no lease yet
    QCOMPARE(tasks.size(), size_t(2));
    for (const Task& task : tasks) {
        QCOMPARE(task.manifest.value(QStringLiteral("job")).toObject().value(QStringLiteral("id")).toInteger(), a);
        QCOMPARE(upload(agent, task.leaseId, serverWeights(a), 0), 202);
    }
    for (int i = 0; i < 3; ++i) { // job a publishes new versions and retires its version 0
        f.core->state().call([&] { f.core->tick(); });
        f.core->drain();
    }
    QString shared;
    for (const Task& task : lease(agent, 4)) // job a's second epoch first, then job b
        if (task.manifest.value(QStringLiteral("job")).toObject().value(QStringLiteral("id")).toInteger() == b)
            shared = fileOf(task.manifest, "weights");
    QVERIFY(!shared.isEmpty());
    QVERIFY2(f.core->blobs().contains(shared), "job a removed the weights file job b still hands out");
}

void TestCoordinator::revokedAgentsWorkGoesBackAtOnce()
{
    const QString gone = f.enroll(QStringLiteral("gone")).value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("other")).value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 600, QStringLiteral(R"(, "overlap_epochs": false)"))) > 0);
    QCOMPARE(lease(gone, 2).size(), size_t(2));
    QVERIFY(lease(other).empty());
    int status = 0;
    f.call([&] { return f.core->enrollment().revokeAgent(gone); }, &status);
    QCOMPARE(status, 200);
    QCOMPARE(lease(other, 2).size(), size_t(2)); // no waiting for the 10-minute deadline
}

void TestCoordinator::pausedJobHandsOutNothingButKeepsWorkInFlight()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    auto held = lease(agent);
    QCOMPARE(held.size(), size_t(1));
    int status = 0;
    f.call([&] { return f.core->jobs().setStatus(job, "pause"); }, &status);
    QCOMPARE(status, 200);
    QVERIFY(lease(agent).empty());
    const QJsonObject progress =
        f.call([&] { return f.core->leases().progress(agent, held[0].leaseId, {}); });
    QCOMPARE(progress.value(QStringLiteral("abort")).toBool(), false);
    QCOMPARE(upload(agent, held[0].leaseId, serverWeights(job), 0), 202);
    f.call([&] { return f.core->jobs().setStatus(job, "pause"); }, &status);
    QCOMPARE(status, 409);
    f.call([&] { return f.core->jobs().setStatus(job, "resume"); }, &status);
    QCOMPARE(status, 200);
    QCOMPARE(lease(agent, 4).size(), size_t(3));
}

void TestCoordinator::failedLeaseGoesToAnotherAgentAtOnce()
{
    const QString sick = f.enroll(QStringLiteral("sick")).value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("other")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 1, 3, 0.99, 600, QStringLiteral(R"(, "overlap_epochs": false)")));
    auto first = lease(sick);
    QCOMPARE(first.size(), size_t(1));
    QVERIFY(lease(other).empty()); // the only workunit is out, for 10 minutes

    QString error;
    QCOMPARE(failLease(other, first[0].leaseId, &error), 409);
    QVERIFY2(error.contains(u"belongs to another agent"), qPrintable(error));
    QCOMPARE(failLease(sick, QStringLiteral("0123"), &error), 404);
    QCOMPARE(failLease(sick, first[0].leaseId), 200);
    auto second = lease(other); // no clock moved: the workunit is back in the queue at once
    QCOMPARE(second.size(), size_t(1));
    QCOMPARE(second[0].manifest.value(QStringLiteral("subtask")),
             first[0].manifest.value(QStringLiteral("subtask")));

    // The lease is closed for good: a repeat, a progress report and an upload are all 409, with the same
    // words.
    const QString closed =
        QStringLiteral("lease %1 is closed: the agent reported it failed").arg(first[0].leaseId);
    QCOMPARE(failLease(sick, first[0].leaseId, &error), 409);
    QCOMPARE(error, closed);
    int status = 0;
    const QJsonObject progress =
        f.call([&] { return f.core->leases().progress(sick, first[0].leaseId, {}); }, &status);
    QCOMPARE(status, 409);
    QCOMPARE(progress.value(QStringLiteral("error")).toString(), closed);
    QCOMPARE(upload(sick, first[0].leaseId, serverWeights(job), 0, &error), 409);
    QCOMPARE(error, closed);
    QCOMPARE(f.core->admission().lease(first[0].leaseId)->closedReason,
             closed); // uploads: refused before the body

    const QJsonObject record = agentRecord(sick);
    QCOMPARE(record.value(QStringLiteral("failed")).toInteger(), 1); // once, not once per repeat
    QCOMPARE(record.value(QStringLiteral("timed_out")).toInteger(), 0);
    QCOMPARE(record.value(QStringLiteral("invalid")).toInteger(), 0);
    QCOMPARE(agentRecord(other).value(QStringLiteral("failed")).toInteger(), 0);
    QCOMPARE(upload(other, second[0].leaseId, serverWeights(job), 0), 202); // the other agent's copy counts
}

void TestCoordinator::failureReportIsCheckedByField_data()
{
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<QString>("message");
    QTest::newRow("empty") << QByteArray("{}") << "reason:";
    QTest::newRow("reason not a string") << QByteArray(R"({"reason": 5, "stage": "worker"})") << "reason:";
    QTest::newRow("blank reason") << QByteArray(R"({"reason": "  ", "stage": "worker"})") << "reason:";
    QTest::newRow("reason too long") << R"({"stage": "worker", "reason": ")" + QByteArray(2001, 'x') + R"("})"
                                     << "1 to 2000 characters";
    QTest::newRow("no stage") << QByteArray(R"({"reason": "oom"})") << "stage:";
    QTest::newRow("unknown stage") << QByteArray(R"({"reason": "oom", "stage": "training"})")
                                   << "stage: expected one of verify, download, worker, upload, other";
    QTest::newRow("stage in capitals") << QByteArray(R"({"reason": "oom", "stage": "Worker"})") << "stage:";
    QTest::newRow("longest reason") << R"({"stage": "other", "reason": ")" + QByteArray(2000, 'x') + R"("})"
                                    << QString();
}

void TestCoordinator::failureReportIsCheckedByField()
{
    QFETCH(QByteArray, body);
    QFETCH(QString, message);
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset)) > 0);
    auto tasks = lease(agent);
    QString error;
    const int status = failLease(agent, tasks[0].leaseId, &error, QJsonDocument::fromJson(body).object());
    if (message.isEmpty()) {
        QCOMPARE(status, 200);
        return;
    }
    QCOMPARE(status, 400);
    QVERIFY2(error.contains(message), qPrintable(error));
    // Nothing happened to the lease: it is still open and the report can be sent again, right.
    QCOMPARE(f.call([&] { return f.core->leases().progress(agent, tasks[0].leaseId, {}); })
                 .value(QStringLiteral("abort"))
                 .toBool(),
             false);
    QCOMPARE(agentRecord(agent).value(QStringLiteral("failed")).toInteger(), 0);
    QCOMPARE(failLease(agent, tasks[0].leaseId), 200);
}

void TestCoordinator::failureOfAnExpiredLeaseLeavesTheDeliveredWorkDone()
{
    const QString slow = f.enroll(QStringLiteral("slow")).value(QStringLiteral("agent_id")).toString();
    const QString fast = f.enroll(QStringLiteral("fast")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    auto first = lease(slow);
    f.clock.advance(61'000);
    f.core->state().call([&] { f.core->tick(); });
    auto second = lease(fast); // the expired workunit, re-issued
    QCOMPARE(second[0].manifest.value(QStringLiteral("subtask")), first[0].manifest.value(QStringLiteral("subtask")));
    QCOMPARE(upload(fast, second[0].leaseId, serverWeights(job), 0), 202);

    // The late agent gives its expired lease back: closed, but the delivered workunit stays done.
    QCOMPARE(failLease(slow, first[0].leaseId), 200);
    const QJsonObject units =
        f.call([&] { return f.core->jobs().status(job); }).value(QStringLiteral("workunits")).toObject();
    QCOMPARE(units.value(QStringLiteral("done")).toInt(), 1);
    QCOMPARE(units.value(QStringLiteral("pending")).toInt(), 1); // the other shard, never leased
    QCOMPARE(lease(fast, 2).size(), size_t(1));
    const QJsonObject record = agentRecord(slow);
    QCOMPARE(record.value(QStringLiteral("timed_out")).toInteger(), 1);
    QCOMPARE(record.value(QStringLiteral("failed")).toInteger(), 1);
}

void TestCoordinator::failedLeaseStaysClosedAcrossARestart()
{
    const QString sick = f.enroll(QStringLiteral("sick")).value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("other")).value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 600,
                                       QStringLiteral(R"(, "overlap_epochs": false)"))) > 0);
    auto held = lease(sick, 2);
    QCOMPARE(held.size(), size_t(2));
    const QJsonObject report{{QStringLiteral("stage"), QStringLiteral("download")},
                             {QStringLiteral("reason"), QStringLiteral("shard hash mismatch\nsecond line")}};
    QCOMPARE(failLease(sick, held[0].leaseId, nullptr, report), 200);

    f.core.reset(); // committed before the 200: nothing else needs to reach the disk
    QVERIFY(f.reopen());
    QString error;
    QCOMPARE(failLease(sick, held[0].leaseId, &error), 409); // the restart does not revive it
    QVERIFY2(error.contains(u"the agent reported it failed"), qPrintable(error));
    int status = 0;
    f.call([&] { return f.core->leases().progress(sick, held[0].leaseId, {}); }, &status);
    QCOMPARE(status, 409);
    QCOMPARE(f.core->admission().lease(held[0].leaseId)->closedReason, error);
    f.call([&] { return f.core->leases().progress(sick, held[1].leaseId, {}); }, &status);
    QCOMPARE(status, 200); // the other lease is still open
    auto again = lease(other, 2);
    QCOMPARE(again.size(), size_t(1)); // only the released workunit
    QCOMPARE(again[0].manifest.value(QStringLiteral("subtask")),
             held[0].manifest.value(QStringLiteral("subtask")));
    QCOMPARE(agentRecord(sick).value(QStringLiteral("failed")).toInteger(), 1);

    // The stage and the reason are on the lease's record, as sent.
    auto db = Database::open(f.dir.databaseLocation(f.config));
    QVERIFY2(db.ok(), qPrintable(db.error()));
    auto row = (*db)->exec(QStringLiteral("SELECT state, fail_stage, fail_reason FROM leases WHERE id = ?"),
                           {held[0].leaseId});
    QVERIFY(row.ok() && row->next());
    QCOMPARE(row->value(0).toString(), QStringLiteral("failed"));
    QCOMPARE(row->value(1).toString(), QStringLiteral("download"));
    QCOMPARE(row->value(2).toString(), QStringLiteral("shard hash mismatch\nsecond line"));
}

void TestCoordinator::secondCoordinatorOnOneDatabaseIsRefused()
{
    if (!test::CoordinatorFixture::onPostgres())
        QSKIP("gleaner.db belongs to its data directory; a PostgreSQL database is what several could name");
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 2));
    QVERIFY(job > 0);
    // A second coordinator (its own data directory) naming the same database would issue the same workunits
    // again: refused while the first one runs.
    auto scratch = test::scratchDir();
    CoordinatorConfig ownFile = f.config;
    ownFile.database.clear();
    const DataDirectory secondDir(scratch->filePath(QStringLiteral("second")));
    QVERIFY(initializeDataDirectory(secondDir, ownFile).ok());
    ManualClock clock;
    auto second = Coordinator::open(secondDir, f.config, clock);
    QVERIFY(!second.ok());
    QVERIFY2(second.error().contains(u"another coordinator is using this database"), qPrintable(second.error()));
    // init does not take over a database that holds a deployment.
    const DataDirectory third(scratch->filePath(QStringLiteral("third")));
    auto created = initializeDataDirectory(third, f.config);
    QVERIFY(!created.ok());
    QVERIFY2(created.error().contains(u"already holds a coordinator's state"), qPrintable(created.error()));
    // Once the first one stops, the database is free for the next, with the job it holds.
    f.core.reset();
    QVERIFY(f.reopen());
    QCOMPARE(f.call([&] { return f.core->jobs().status(job); }).value(QStringLiteral("state")).toString(),
             QStringLiteral("running"));
}

void TestCoordinator::databaseOfSchemaVersion1IsUpgraded()
{
    if (test::CoordinatorFixture::onPostgres())
        QSKIP("schema version 1 is a gleaner.db of an earlier release; PostgreSQL databases start at this version");
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 3, 3, 0.99, 600,
                                                  QStringLiteral(R"(, "overlap_epochs": false)")));
    QVERIFY(job > 0);
    auto held = lease(agent, 2);
    QCOMPARE(held.size(), size_t(2));
    QCOMPARE(f.upload(agent, held[1].leaseId, shifted(f.leaseBase(held[1].leaseId), 0.01f), 0), 202);
    f.core->drain();
    f.core.reset();
    // Take the file back to the first schema: what a coordinator of the previous version left behind.
    {
        QSqlDatabase old = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("v1"));
        old.setDatabaseName(f.dir.databasePath());
        QVERIFY(old.open());
        QSqlQuery q(old);
        for (const char* sql : {"DROP INDEX workunits_resumable", // it names resume_sha, dropped below
                                "ALTER TABLE agents DROP COLUMN failed",
                                "ALTER TABLE agents DROP COLUMN invalid_streak",
                                "ALTER TABLE agents DROP COLUMN quarantined_ms",
                                "ALTER TABLE agents DROP COLUMN quarantine_reason",
                                "ALTER TABLE agents DROP COLUMN disagreed",
                                "ALTER TABLE updates DROP COLUMN step",
                                "ALTER TABLE updates DROP COLUMN fold_error",
                                "ALTER TABLE leases DROP COLUMN fail_stage",
                                "ALTER TABLE leases DROP COLUMN fail_reason",
                                "ALTER TABLE snapshots DROP COLUMN rule_sha",
                                "ALTER TABLE leases DROP COLUMN steps",
                                "ALTER TABLE updates DROP COLUMN concurrency",
                                "ALTER TABLE updates DROP COLUMN upload_bytes",
                                "ALTER TABLE updates DROP COLUMN encoding",
                                "ALTER TABLE workunits DROP COLUMN resume_lease",
                                "ALTER TABLE workunits DROP COLUMN resume_sha",
                                "ALTER TABLE workunits DROP COLUMN resume_size",
                                "ALTER TABLE workunits DROP COLUMN resume_step",
                                "ALTER TABLE workunits DROP COLUMN resume_base_version",
                                "ALTER TABLE workunits DROP COLUMN resume_weights_sha",
                                "ALTER TABLE workunits DROP COLUMN resume_steps",
                                "ALTER TABLE workunits DROP COLUMN resume_agent",
                                "ALTER TABLE leases DROP COLUMN checkpoint_sha",
                                "ALTER TABLE leases DROP COLUMN resume_step",
                                "DROP INDEX workunits_by_change",
                                "DROP INDEX leases_by_workunit",
                                "DROP INDEX leases_by_change",
                                "DROP INDEX workunits_pending",
                                "DROP INDEX leases_by_agent",
                                "ALTER TABLE jobs DROP COLUMN sched_version",
                                "ALTER TABLE workunits DROP COLUMN changed_version",
                                "ALTER TABLE leases DROP COLUMN changed_version",
                                "DROP TABLE job_tallies",
                                "UPDATE meta SET value = '1' WHERE key = 'schema_version'"})
            QVERIFY2(q.exec(QString::fromLatin1(sql)), sql);
        q = QSqlQuery();
        old.close();
    }
    QSqlDatabase::removeDatabase(QStringLiteral("v1"));

    QVERIFY(f.reopen());
    QCOMPARE(agentRecord(agent).value(QStringLiteral("failed")).toInteger(),
             0);                                      // the agent and its record kept
    QCOMPARE(failLease(agent, held[0].leaseId), 200); // the open lease, too
    QCOMPARE(agentRecord(agent).value(QStringLiteral("failed")).toInteger(), 1);
    // The job's counts, made from the updates it holds.
    QCOMPARE(f.call([&] { return f.core->jobs().status(job); })
                 .value(QStringLiteral("updates_received"))
                 .toInteger(),
             1);
    f.core.reset();
    QVERIFY(f.reopen()); // upgraded once: it opens as the current version from now on
    QCOMPARE(lease(agent, 2).size(), size_t(2));
}

void TestCoordinator::agentsAndLeasesOfAnotherCoordinatorAreServed()
{
    // Another coordinator of the deployment, as its writes reach the database: its own connection, a
    // scheduler of its own with its own picture of the job. What it enrolls and leases, this coordinator must
    // serve.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 600));
    QVERIFY(job > 0);
    const auto mine = lease(agent);
    QCOMPARE(mine.size(), size_t(1));
    const QString location = f.config.database.isEmpty() ? f.dir.databasePath() : f.config.database;
    auto other = Database::open(location);
    QVERIFY2(other.ok(), qPrintable(other.error()));

    // An agent the other coordinator enrolled: its token is unknown to this one's cache, known to the
    // database.
    const QString token = QStringLiteral("token-of-an-agent-enrolled-elsewhere");
    QVERIFY((*other)
                ->exec(QStringLiteral(
                           "INSERT INTO agents (id, token_hash, name, platform, hardware, enrolled_ms, "
                           "last_seen_ms) VALUES ('agent-elsewhere', ?, 'b', 'linux', '{}', 0, 0)"),
                       {Tokens::hash(token.toUtf8())})
                .ok());
    QVERIFY(!f.core->admission().agentByTokenHash(Tokens::hash(token.toUtf8())));
    const auto found = f.core->deployment().lookUpAgent(Tokens::hash(token.toUtf8()));
    QVERIFY(found && found->id == QStringLiteral("agent-elsewhere") && !found->revoked);
    QVERIFY(f.core->admission().agentByTokenHash(Tokens::hash(token.toUtf8())));
    QVERIFY(!f.core->deployment().lookUpAgent(Tokens::hash("no such token")));

    // A lease the other coordinator issued, from the same published weights as this one's.
    auto base = (*other)->exec(QStringLiteral("SELECT base_version, weights_sha FROM leases WHERE id = ?"),
                               {mine[0].leaseId});
    QVERIFY(base.ok() && base->next());
    JobState picture;
    picture.id = job;
    picture.status = JobStatus::Running;
    picture.spec.deadlineSeconds = 600;
    picture.spec.maxEpochs = 3;
    picture.published = PublishedWeights{base->value(0).toLongLong(), base->value(1).toString(), 0, 0};
    std::map<qint64, JobState> jobs;
    jobs.emplace(job, picture);
    SchedulerTables tables(**other);
    Scheduler scheduler(jobs, tables, f.clock, SchedulerLimits{},
                        [] { return QStringLiteral("lease-elsewhere"); });
    auto stored = tables.loadJob(job);
    QVERIFY2(stored.ok(), qPrintable(stored.error()));
    scheduler.adopt(jobs.at(job), *stored);
    auto theirs = scheduler.leaseNext(jobs.at(job), agent, {});
    QVERIFY2(theirs.ok() && theirs->has_value(),
             theirs.ok() ? "nothing to lease" : qPrintable(theirs.error()));
    QVERIFY((*theirs)->workunitId != 0);
    QVERIFY(!f.core->admission().lease(QStringLiteral("lease-elsewhere")));

    // This coordinator takes its progress reports, knows its files and folds its result.
    int status = 0;
    const QJsonObject progressed = f.call(
        [&] {
            return f.core->leases().progress(agent, QStringLiteral("lease-elsewhere"),
                                             {{QStringLiteral("step"), 1}});
        },
        &status);
    QCOMPARE(status, 200);
    QCOMPARE(progressed.value(QStringLiteral("abort")).toBool(true), false);
    const auto admitted = f.core->admission().lease(QStringLiteral("lease-elsewhere"));
    QVERIFY(admitted && admitted->agentId == agent && admitted->closedReason.isEmpty());
    QVERIFY(f.core->admission().agentMayRead(agent, base->value(1).toString()));
    QString error;
    const TensorBundle from = f.leaseBase(QStringLiteral("lease-elsewhere"));
    QVERIFY(!from.entries().empty());
    QCOMPARE(upload(agent, QStringLiteral("lease-elsewhere"), shifted(from, 0.01f),
                    base->value(0).toLongLong(), &error),
             202);
    // Its own lease and the other coordinator's are two workunits: neither was leased twice.
    auto open = (*other)->exec(QStringLiteral("SELECT COUNT(*), COUNT(DISTINCT workunit_id) FROM leases"));
    QVERIFY(open.ok() && open->next());
    QCOMPARE(open->value(0).toInt(), 2);
    QCOMPARE(open->value(1).toInt(), 2);
}

void TestCoordinator::configFileIsCheckedByField_data()
{
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QString>("message");
    QTest::newRow("valid") << QByteArray(R"({"listen": "[::1]:8443", "hosts": ["a.lan"], "http_threads": 4})") << QString();
    QTest::newRow("typo") << QByteArray(R"({"listen": "127.0.0.1:1", "snapshot_every_update": 5})")
                          << "unknown field \"snapshot_every_update\"";
    QTest::newRow("no port") << QByteArray(R"({"listen": "127.0.0.1"})") << "config.listen: expected HOST:PORT";
    QTest::newRow("missing listen") << QByteArray(R"({})") << "config.listen";
    QTest::newRow("threads zero") << QByteArray(R"({"listen": "h:1", "http_threads": 0})") << "config.http_threads";
    QTest::newRow("fold backlog negative")
        << QByteArray(R"({"listen": "h:1", "fold_backlog_mb": -1})") << "config.fold_backlog_mb";
    QTest::newRow("hosts not a list") << QByteArray(R"({"listen": "h:1", "hosts": "a.lan"})") << "config.hosts";
    QTest::newRow("database not a URL") << QByteArray(R"({"listen": "h:1", "database": "/var/lib/gleaner.db"})")
                                        << "config.database: expected a PostgreSQL URL";
    QTest::newRow("public url over http") << QByteArray(R"({"listen": "h:1", "public_url": "http://lb.lan"})")
                                          << "config.public_url: expected https://HOST[:PORT]";
    QTest::newRow("public url with a path")
        << QByteArray(R"({"listen": "h:1", "public_url": "https://lb.lan/gleaner"})") << "config.public_url";
    QTest::newRow("proxy by name") << QByteArray(R"({"listen": "h:1", "trusted_proxies": ["lb.lan"]})")
                                   << "config.trusted_proxies: \"lb.lan\" is not an IP address";
    QTest::newRow("proxy range") << QByteArray(R"({"listen": "h:1", "trusted_proxies": ["10.0.0.0/8"]})")
                                 << "config.trusted_proxies";
    QTest::newRow("proxies not a list") << QByteArray(R"({"listen": "h:1", "trusted_proxies": "10.0.0.5"})")
                                        << "config.trusted_proxies: expected a list of IP addresses";
    QTest::newRow("redis not a URL") << QByteArray(R"({"listen": "h:1", "redis": "127.0.0.1:6379"})")
                                     << "config.redis: not a Redis URL";
    QTest::newRow("redis URL with a bad port")
        << QByteArray(R"({"listen": "h:1", "redis": "redis://:secret@h:0/0"})") << "config.redis";
    QTest::newRow("database of another engine")
        << QByteArray(R"({"listen": "h:1", "database": "mysql://root:secret@db/gleaner"})") << "config.database";
    // nginx sends files (X-Accel-Redirect) only from a deployment's shared folder, through a trusted proxy,
    // at a location spelled as nginx's configuration does.
    const QByteArray shared = R"("database": "postgresql://g@db/g", "redis": "redis://:secret@r:6379/0", )"
                              R"("shared_dir": "/srv/g", "trusted_proxies": ["10.0.0.5"], )";
    for (const char* bad : {"_gleaner/blobs/", "/_gleaner/blobs", "/", "/a//b/", "/a/../b/", "/a/./", "/a b/",
                            "/a%2e%2e/", "/a\\nX-Evil: 1/"})
        QTest::newRow(qPrintable(QStringLiteral("accel location %1").arg(QString::fromLatin1(bad))))
            << QByteArray(R"({"listen": "h:1", )" + shared + R"("accel_redirect": ")" + bad + R"("})")
            << "config.accel_redirect";
    QTest::newRow("accel without a proxy")
        << QByteArray(R"({"listen": "h:1", "database": "postgresql://g@db/g", "redis": "redis://r:6379/0", )"
                      R"("shared_dir": "/srv/g", "accel_redirect": "/_gleaner/blobs/"})")
        << "config.accel_redirect: only a trusted proxy can send files";
    QTest::newRow("accel without a shared folder")
        << QByteArray(R"({"listen": "h:1", "trusted_proxies": ["10.0.0.5"], "accel_redirect": "/_g/blobs/"})")
        << "config.accel_redirect: nginx sends files from a deployment's shared folder";
}

void TestCoordinator::configFileIsCheckedByField()
{
    QFETCH(QByteArray, json);
    QFETCH(QString, message);
    auto config = CoordinatorConfig::fromJson(QJsonDocument::fromJson(json).object());
    if (message.isEmpty()) {
        QVERIFY2(config.ok(), qPrintable(config.error()));
        QCOMPARE(config->listenHost, QStringLiteral("::1"));
        QCOMPARE(config->hosts, QStringList{QStringLiteral("a.lan")});
        QCOMPARE(config->httpThreads, 4);
        QVERIFY(config->database.isEmpty()); // gleaner.db in the data directory
        // A PostgreSQL database is kept as written and read back the same.
        CoordinatorConfig onPostgres = *config;
        onPostgres.database = QStringLiteral("postgresql://gleaner:s3cret@db.lan:5433/gleaner");
        auto again = CoordinatorConfig::fromJson(onPostgres.toJson());
        QVERIFY2(again.ok(), qPrintable(again.error()));
        QCOMPARE(again->database, onPostgres.database);
        // So are Redis and a public URL, which then is the URL agents use.
        CoordinatorConfig scaled = *config;
        scaled.redis = QStringLiteral("redis://:s3cret@cache.lan:6380/2");
        scaled.publicUrl = QStringLiteral("https://gleaner.example.org/");
        scaled.trustedProxies = {QStringLiteral("10.0.0.5"), QStringLiteral("::1")};
        auto read = CoordinatorConfig::fromJson(scaled.toJson());
        QVERIFY2(read.ok(), qPrintable(read.error()));
        QCOMPARE(read->redis, scaled.redis);
        QCOMPARE(read->url(), QStringLiteral("https://gleaner.example.org"));
        QCOMPARE(read->trustedProxies, scaled.trustedProxies);
        QVERIFY(read->accelRedirect.isEmpty()); // the coordinator sends its files itself
        // A deployment's shared folder that nginx serves.
        scaled.database = onPostgres.database;
        scaled.sharedDir = QStringLiteral("/srv/gleaner-shared");
        scaled.accelRedirect = QStringLiteral("/_gleaner/blobs-1.a~b/");
        auto accelerated = CoordinatorConfig::fromJson(scaled.toJson());
        QVERIFY2(accelerated.ok(), qPrintable(accelerated.error()));
        QCOMPARE(accelerated->accelRedirect, scaled.accelRedirect);
        return;
    }
    QVERIFY(!config.ok());
    QVERIFY2(config.error().contains(message), qPrintable(config.error()));
    QVERIFY2(!config.error().contains(u"secret"), qPrintable(config.error())); // a password is never repeated
}

QTEST_GUILESS_MAIN(TestCoordinator)
#include "TestCoordinator.moc"
