// The coordinator's core against agents that are broken or hostile: finite but poisoned uploads (scaled, negated,
// 3e38, impossible counters and sample counts), the bound that learns what honest steps look like, quarantine
// after repeated refusals and its lifting, the cap on open leases per agent, leases that only progress extends,
// replicas compared instead of folded in twice, an accepted update the coordinator lost, shown to the admin, and
// compressed uploads: decoded, then held to the same checks, with whatever a decoder could be fed refused.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "aggregation/UpdateBound.h"
#include "aggregation/UpdateChecker.h"
#include "codec/UpdateCodec.h"
#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "intake/AgentStanding.h"
#include "ml/Checkpoint.h"
#include "ml/WeightMath.h"
#include "store/Database.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QTest>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <span>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

// The weights moved by `delta` in every floating-point value: what a local epoch roughly does.
TensorBundle moved(const TensorBundle& weights, float delta)
{
    return test::shifted(weights, delta);
}

// A checkpoint's bytes with `change` applied to its tensors and the checksum written again: a hostile agent can
// compute a checksum as well as anyone.
QByteArray rewritten(const QByteArray& checkpoint, const std::function<void(TensorBundle&)>& change,
                     const std::function<void(ml::CheckpointInfo&)>& claim = {})
{
    auto bundle = SafeTensors::parse(checkpoint);
    auto info = ml::CheckpointInfo::readFrom(*bundle);
    if (!bundle || !info)
        return {};
    change(*bundle);
    if (claim)
        claim(*info);
    info->writeTo(*bundle);
    return SafeTensors::serialize(*bundle);
}

QByteArray resnetSpec(const QString& dataset, int shards, const QString& extra = {})
{
    QByteArray spec = test::tinyJobSpec(dataset, shards, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)") + extra);
    return spec.replace(R"("arch": "mlp")", R"("arch": "resnet")").replace(R"("hidden": [16])", R"("depth": 11, "width": 2)");
}

} // namespace

class TestHostileUpdates : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void poisonedUpdatesAreRefused_data();
    void poisonedUpdatesAreRefused();
    void boundFollowsTheJobsHonestSteps();
    void repeatedRefusalsQuarantineTheAgentUntilReleased();
    void openLeasesAreCappedPerAgent();
    void onlyProgressExtendsALeaseAndExpiredOnesStayExpired();
    void replicasAreComparedNotFoldedTwice();
    void lostUpdateFileIsShownNotSkipped();
    void encodedUploadsAreDecodedThenChecked();
    void uploadsAreReadWhereTheyLie();
    void hostileEncodedUploadsAreRefused_data();
    void hostileEncodedUploadsAreRefused();
    void handedBackCheckpointIsKeptAndNamedToTheNextAgent();
    void resumedResultOutOfBoundIsNotBlamedOnItsAgent();
    void hostileCheckpointsAreRefused_data();
    void hostileCheckpointsAreRefused();
    void augmentedJobsCheckpointsMustBeAugmented();

private:
    // A hostile and an honest agent with one lease each of a job submitted with `spec`.
    struct Duel
    {
        QString bad, good;
        qint64 job = 0;
        TensorBundle before; // the weights both leases hand out
        QString hostileLease, honestLease;
    };
    bool duel(const QByteArray& spec, Duel& out);
    TensorBundle serverWeights(qint64 jobId);
    QJsonObject agentRecord(const QString& agentId);
    QJsonObject jobStatus(qint64 jobId)
    {
        return f.call([&] { return f.core->jobs().status(jobId); });
    }

    test::CoordinatorFixture f;
    QString m_dataset;
};

void TestHostileUpdates::init()
{
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
}

void TestHostileUpdates::cleanup()
{
    f.core.reset();
}

bool TestHostileUpdates::duel(const QByteArray& spec, Duel& out)
{
    out.bad = f.enroll(QStringLiteral("bad")).value(QStringLiteral("agent_id")).toString();
    out.good = f.enroll(QStringLiteral("good")).value(QStringLiteral("agent_id")).toString();
    out.job = f.submit(spec);
    if (out.job <= 0)
        return false;
    out.before = serverWeights(out.job);
    const auto hostile = f.lease(out.bad);
    const auto honest = f.lease(out.good);
    if (hostile.size() != 1 || honest.size() != 1)
        return false;
    out.hostileLease = hostile[0].leaseId;
    out.honestLease = honest[0].leaseId;
    return true;
}

TensorBundle TestHostileUpdates::serverWeights(qint64 jobId)
{
    return f.serverWeights(jobId);
}

QJsonObject TestHostileUpdates::agentRecord(const QString& agentId)
{
    const QJsonObject agents = f.call([&] { return f.core->enrollment().listAgents(); });
    for (const auto& a : agents.value(QStringLiteral("agents")).toArray())
        if (a.toObject().value(QStringLiteral("id")).toString() == agentId)
            return a.toObject();
    return {};
}

void TestHostileUpdates::handedBackCheckpointIsKeptAndNamedToTheNextAgent()
{
    const QString leaving = f.enroll(QStringLiteral("leaving")).value(QStringLiteral("agent_id")).toString();
    const QString next = f.enroll(QStringLiteral("next")).value(QStringLiteral("agent_id")).toString();
    const QString busy = f.enroll(QStringLiteral("busy")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 600));
    QVERIFY(job > 0);
    const auto held = f.lease(leaving);
    QCOMPARE(held.size(), size_t(1));
    // Another agent's result is folded and published meanwhile: the server moves on from the leaving lease's base.
    const auto other = f.lease(busy);
    QCOMPARE(other.size(), size_t(1));
    QCOMPARE(f.upload(busy, other[0].leaseId, moved(f.leaseBase(other[0].leaseId), 0.01f), 0), 202);
    f.call([&] {
        f.core->tick();
        return HttpResponse::json(200, {});
    });
    f.core->drain();
    f.call([&] {
        f.core->tick();
        return HttpResponse::json(200, {});
    });
    const QByteArray checkpoint = f.checkpointOf(held[0], 3);
    QVERIFY(!checkpoint.isEmpty());
    QJsonObject reply;
    QCOMPARE(f.handBack(leaving, held[0].leaseId, checkpoint, &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    QCOMPARE(reply.value(QStringLiteral("step")).toInteger(), 3);
    QVERIFY(reply.value(QStringLiteral("requeued")).toBool());
    // Closed: a late result or a second hand-back is answered 409 with why.
    QString error;
    QCOMPARE(f.upload(leaving, held[0].leaseId, f.leaseBase(held[0].leaseId), 0, &error), 409);
    QVERIFY2(error.contains(u"handed it back"), qPrintable(error));

    // The next agent's manifest names the checkpoint (signed, with its hash) and the first lease's base.
    const auto resumed = f.lease(next);
    QCOMPARE(resumed.size(), size_t(1));
    const QJsonObject resume = resumed[0].manifest.value(QStringLiteral("resume")).toObject();
    QCOMPARE(resume.value(QStringLiteral("step")).toInteger(), 3);
    QCOMPARE(resume.value(QStringLiteral("from_lease")).toString(), held[0].leaseId);
    const QString sha = resume.value(QStringLiteral("sha256")).toString();
    QCOMPARE(sha, Sha256::toHex(Sha256::hash(checkpoint)));
    QVERIFY(f.core->admission().agentMayRead(next, sha));
    QVERIFY(!f.core->admission().agentMayRead(leaving, sha));
    QCOMPARE(resumed[0].manifest.value(QStringLiteral("base_version")), held[0].manifest.value(QStringLiteral("base_version")));
    // Its weights file is that base, not the file published since, and its agent may fetch it.
    const QJsonObject baseFile = resumed[0].manifest.value(QStringLiteral("files")).toArray().at(1).toObject();
    QCOMPARE(baseFile, held[0].manifest.value(QStringLiteral("files")).toArray().at(1).toObject());
    QVERIFY(f.core->admission().agentMayRead(next, baseFile.value(QStringLiteral("sha256")).toString()));
    QVERIFY(!resumed[0].manifest.contains(QStringLiteral("weights_patches")));
    const auto fresh = f.lease(busy); // the epoch's other workunit is done; nothing else, or a later epoch's
    for (const auto& task : fresh)
        QVERIFY(task.manifest.value(QStringLiteral("base_version")).toInteger() > 0);
    QCOMPARE(resumed[0].manifest.value(QStringLiteral("subtask")), held[0].manifest.value(QStringLiteral("subtask")));
    QCOMPARE(resumed[0].manifest.value(QStringLiteral("hyperparameters")),
             held[0].manifest.value(QStringLiteral("hyperparameters")));

    // Its result folds in once; the checkpoint then goes from the disk.
    QCOMPARE(f.upload(next, resumed[0].leaseId, f.leaseBase(resumed[0].leaseId), 0), 202);
    f.call([&] {
        f.core->tick();
        return HttpResponse::json(200, {});
    });
    QVERIFY(!QFileInfo::exists(f.core->blobs().path(sha)));
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates_received")).toInteger(), 2);
    // A hand-back is not a failure of the agent.
    QCOMPARE(agentRecord(leaving).value(QStringLiteral("failed")).toInteger(), 0);
}

// A checkpoint within the bound can still push the result trained on from it over the bound: the agent that
// resumed it is not blamed (nor quarantined for it), the agent that handed it back is, and the workunit starts
// afresh.
void TestHostileUpdates::resumedResultOutOfBoundIsNotBlamedOnItsAgent()
{
    const QString leaving = f.enroll(QStringLiteral("leaving")).value(QStringLiteral("agent_id")).toString();
    const QString honest = f.enroll(QStringLiteral("honest")).value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 1, 3, 0.99, 600)) > 0);
    const auto held = f.lease(leaving);
    QCOMPARE(held.size(), size_t(1));
    QJsonObject reply;
    QCOMPARE(f.handBack(leaving, held[0].leaseId, f.checkpointOf(held[0], 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    for (int i = 0; i < 3; ++i) { // three in a row would quarantine an agent whose own results they were
        const auto resumed = f.lease(honest);
        QCOMPARE(resumed.size(), size_t(1));
        QCOMPARE(resumed[0].manifest.contains(QStringLiteral("resume")), i == 0);
        QString error;
        QCOMPARE(f.upload(honest, resumed[0].leaseId, moved(f.leaseBase(resumed[0].leaseId), 100.0f), 0, &error), 422);
        QVERIFY2(error.contains(u"allows at most"), qPrintable(error));
        if (i == 0) // the first refusal was the checkpoint's doing; the later ones are the agent's own
            QCOMPARE(agentRecord(honest).value(QStringLiteral("invalid")).toInteger(), 0);
    }
    QCOMPARE(agentRecord(honest).value(QStringLiteral("invalid")).toInteger(), 2);
    QCOMPARE(agentRecord(honest).value(QStringLiteral("quarantined")).toBool(), false);
    // The first refusal counts against the agent that handed the checkpoint back, once.
    QCOMPARE(agentRecord(leaving).value(QStringLiteral("invalid")).toInteger(), 1);
}

void TestHostileUpdates::hostileCheckpointsAreRefused_data()
{
    QTest::addColumn<QString>("variant");
    QTest::addColumn<QString>("reason");
    QTest::newRow("none") << QStringLiteral("none") << QString();
    QTest::newRow("damaged") << QStringLiteral("damaged") << QStringLiteral("checksum");
    QTest::newRow("not safetensors") << QStringLiteral("garbage") << QStringLiteral("not a valid safetensors");
    QTest::newRow("NaN") << QStringLiteral("nan") << QStringLiteral("NaN");
    QTest::newRow("extra tensor") << QStringLiteral("extra") << QStringLiteral("which no checkpoint has");
    QTest::newRow("missing tensor") << QStringLiteral("missing") << QStringLiteral("of the model's");
    QTest::newRow("another workunit") << QStringLiteral("other") << QStringLiteral("another training");
    QTest::newRow("scaled x1000") << QStringLiteral("scaled") << QStringLiteral("more than this job allows");
    QTest::newRow("progress beyond") << QStringLiteral("beyond") << QStringLiteral("progress the subtask does not have");
    QTest::newRow("progress overflowing") << QStringLiteral("overflow")
                                          << QStringLiteral("progress the subtask does not have");
    QTest::newRow("too large") << QStringLiteral("large") << QStringLiteral("bytes; one of this model has at most");
    // Genuine checkpoints with one field changed and the checksum recomputed: each would pass into the result of
    // the honest agent that resumed it, and have that result refused.
    QTest::newRow("samples +16") << QStringLiteral("samples") << QStringLiteral("samples is");
    QTest::newRow("total_steps +1") << QStringLiteral("total_steps") << QStringLiteral("total_steps is");
    QTest::newRow("loss_sum NaN") << QStringLiteral("loss_nan") << QStringLiteral("loss_sum is nan");
    QTest::newRow("loss_sum huge") << QStringLiteral("loss_huge") << QStringLiteral("loss_sum is");
    QTest::newRow("seconds negative") << QStringLiteral("seconds_negative") << QStringLiteral("seconds is -");
    QTest::newRow("seconds huge") << QStringLiteral("seconds_huge") << QStringLiteral("seconds is");
}

void TestHostileUpdates::hostileCheckpointsAreRefused()
{
    QFETCH(QString, variant);
    QFETCH(QString, reason);
    const QString bad = f.enroll(QStringLiteral("bad")).value(QStringLiteral("agent_id")).toString();
    const QString good = f.enroll(QStringLiteral("good")).value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 600)) > 0);
    const auto held = f.lease(bad, 2);
    QCOMPARE(held.size(), size_t(2));
    const QByteArray genuine = f.checkpointOf(held[0], 2);
    QVERIFY(!genuine.isEmpty());
    QByteArray sent;
    if (variant == u"damaged") {
        sent = genuine;
        sent[sent.size() - 5] = char(sent[sent.size() - 5] ^ 0x40);
    } else if (variant == u"garbage") {
        sent = QByteArray(4096, 'x');
    } else if (variant == u"nan") {
        sent = rewritten(genuine, [](TensorBundle& b) {
            for (const auto& e : b.entries())
                if (e.name.startsWith(u"model.") && e.dtype == DType::F32) {
                    b.mutableValues<float>(e)[0] = std::numeric_limits<float>::quiet_NaN();
                    return;
                }
        });
    } else if (variant == u"extra") {
        sent = rewritten(genuine, [](TensorBundle& b) {
            const std::array<float, 4> evil{1, 2, 3, 4};
            (void)b.addValues<float>(QStringLiteral("payload.evil"), DType::F32, {4}, evil);
        });
    } else if (variant == u"missing") {
        sent = rewritten(genuine, [](TensorBundle& b) {
            TensorBundle kept;
            bool dropped = false;
            for (const auto& e : b.entries()) {
                if (!dropped && e.name.startsWith(u"model.")) {
                    dropped = true;
                    continue;
                }
                (void)kept.add(e.name, e.dtype, e.shape, b.data(e));
            }
            kept.metadata() = b.metadata();
            b = kept;
        });
    } else if (variant == u"other") {
        sent = f.checkpointOf(held[1], 2); // the other workunit's: another seed and shard
    } else if (variant == u"scaled") {
        sent = rewritten(genuine, [](TensorBundle& b) {
            for (const auto& e : b.entries())
                if (e.name.startsWith(u"model.") && e.dtype == DType::F32)
                    for (float& v : b.mutableValues<float>(e))
                        v *= 1000.0f;
        });
    } else if (variant == u"beyond") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) { info.epoch = 40; });
    } else if (variant == u"overflow") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) {
            info.epoch = std::numeric_limits<int>::max();
            info.batch = std::numeric_limits<qint64>::max();
        });
    } else if (variant == u"samples") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) { info.samples += 16; });
    } else if (variant == u"total_steps") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) { info.totalSteps += 1; });
    } else if (variant == u"loss_nan") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) {
            info.lossSum = std::numeric_limits<double>::quiet_NaN();
        });
    } else if (variant == u"loss_huge") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) { info.lossSum = 1e300; });
    } else if (variant == u"seconds_negative") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) { info.seconds = -5; });
    } else if (variant == u"seconds_huge") {
        sent = rewritten(genuine, [](TensorBundle&) {}, [](ml::CheckpointInfo& info) { info.seconds = 1e12; });
    } else if (variant == u"large") {
        sent = genuine + QByteArray(512 * 1024, ' ');
    }
    QJsonObject reply;
    QCOMPARE(f.handBack(bad, held[0].leaseId, sent, &reply), 200); // the lease is handed back all the same
    QVERIFY(reply.value(QStringLiteral("released")).toBool());
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(),
             variant == u"none" ? QStringLiteral("none") : QStringLiteral("refused"));
    QVERIFY2(reply.value(QStringLiteral("reason")).toString().contains(reason),
             qPrintable(reply.value(QStringLiteral("reason")).toString()));
    // The workunit goes to the next agent at once, from step 0: nothing of the refused file is named or kept.
    const auto next = f.lease(good);
    QCOMPARE(next.size(), size_t(1));
    QVERIFY(!next[0].manifest.contains(QStringLiteral("resume")));
    QCOMPARE(next[0].manifest.value(QStringLiteral("subtask")), held[0].manifest.value(QStringLiteral("subtask")));
    const QStringList blobs = QDir(f.dir.blobsDir(f.config)).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    for (const QString& folder : blobs)
        for (const QString& blob : QDir(f.dir.blobsDir(f.config) + u'/' + folder).entryList(QDir::Files))
            QVERIFY2(!blob.startsWith(Sha256::toHex(Sha256::hash(sent))), "a refused checkpoint was kept");
    QCOMPARE(agentRecord(bad).value(QStringLiteral("failed")).toInteger(), 0);
    // A checkpoint the checks refused counts against its agent like a refused result; none, or one over the bound
    // (it may be honest training gone far), does not.
    const bool counted = variant != u"none" && variant != u"scaled";
    QCOMPARE(agentRecord(bad).value(QStringLiteral("invalid")).toInteger(), counted ? 1 : 0);
}

// A job's augmentation travels in the manifest and is part of the training a handed-back checkpoint must be
// of: an agent that predates it (and so trained without) hands back a checkpoint no agent may continue.
void TestHostileUpdates::augmentedJobsCheckpointsMustBeAugmented()
{
    const QString agent = f.enroll(QStringLiteral("agent")).value(QStringLiteral("agent_id")).toString();
    const QString augmented = QStringLiteral(R"(, "augment": {"crop_padding": 2, "flip": true})");
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 600, augmented)) > 0);
    const auto held = f.lease(agent, 2);
    QCOMPARE(held.size(), size_t(2));
    const QJsonObject augment{{QStringLiteral("crop_padding"), 2}, {QStringLiteral("flip"), true}};
    for (const auto& task : held) {
        const QJsonObject hyper = task.manifest.value(QStringLiteral("hyperparameters")).toObject();
        QCOMPARE(hyper.value(QStringLiteral("augment")), QJsonValue(augment));
    }
    QJsonObject reply;
    QCOMPARE(f.handBack(agent, held[0].leaseId, f.checkpointOf(held[0], 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));

    test::LeasedTask unaware = held[1]; // as an agent that ignores the key reads the manifest
    QJsonObject hyper = unaware.manifest.value(QStringLiteral("hyperparameters")).toObject();
    hyper.remove(QStringLiteral("augment"));
    unaware.manifest.insert(QStringLiteral("hyperparameters"), hyper);
    QCOMPARE(f.handBack(agent, held[1].leaseId, f.checkpointOf(unaware, 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("refused"));
    QVERIFY2(reply.value(QStringLiteral("reason")).toString().contains(u"augmentation"),
             qPrintable(reply.value(QStringLiteral("reason")).toString()));
}

void TestHostileUpdates::poisonedUpdatesAreRefused_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("message");
    QTest::newRow("scaled x1e6") << "scaled" << "moves the weights by";
    QTest::newRow("finite but huge (3e38)") << "huge" << "moves the weights by";
    QTest::newRow("NaN") << "nan" << "NaN or infinite";
    QTest::newRow("counter at INT64_MAX") << "counter" << "counters are impossible";
    QTest::newRow("counter decreased") << "counter-down" << "counters are impossible";
    QTest::newRow("more samples than the shard") << "samples" << "gleaner.samples is 1000000";
    QTest::newRow("nonce of another lease") << "other-nonce" << "made for another lease";
    QTest::newRow("no nonce") << "no-nonce" << "lacks gleaner.nonce";
}

void TestHostileUpdates::poisonedUpdatesAreRefused()
{
    QFETCH(QString, kind);
    QFETCH(QString, message);
    Duel d;
    QVERIFY(duel(resnetSpec(m_dataset, 2), d));
    const auto& [bad, good, job, before, hostileLease, honestLease] = d;

    TensorBundle poison = moved(before, 0.001f);
    qint64 samples = 10;
    for (const auto& entry : poison.entries()) {
        if (entry.dtype == DType::F32) {
            for (float& v : poison.mutableValues<float>(entry)) {
                if (kind == u"scaled")
                    v *= 1e6f;
                else if (kind == u"negated")
                    v = -v;
                else if (kind == u"huge")
                    v = 3e38f;
            }
        } else if (kind == u"counter") {
            poison.mutableValues<qint64>(entry)[0] = std::numeric_limits<qint64>::max();
        } else if (kind == u"counter-down") {
            poison.mutableValues<qint64>(entry)[0] = -1;
        }
    }
    if (kind == u"nan")
        poison.mutableValues<float>(poison.entries().first())[0] = std::numeric_limits<float>::quiet_NaN();
    if (kind == u"samples")
        samples = 1'000'000;
    // The fixture copies the lease's nonce in unless the file already carries one (an empty one reads as none).
    if (kind == u"other-nonce")
        poison.setMetadata(QStringLiteral("gleaner.nonce"), f.leaseNonce(honestLease));
    if (kind == u"no-nonce")
        poison.setMetadata(QStringLiteral("gleaner.nonce"), QString());

    QString error;
    QCOMPARE(f.upload(bad, hostileLease, poison, 0, &error, samples), 422);
    QVERIFY2(error.contains(message), qPrintable(error));
    QCOMPARE(serverWeights(job).buffer(), before.buffer()); // nothing reached the server copy
    QCOMPARE(agentRecord(bad).value(QStringLiteral("invalid")).toInteger(), 1);

    // An honest update is still taken, and the server copy stays finite.
    QCOMPARE(f.upload(good, honestLease, moved(before, 0.01f), 0, &error), 202);
    const TensorBundle after = serverWeights(job);
    QVERIFY(ml::WeightMath::allFinite(after));
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates")).toInteger(), 1);
}

void TestHostileUpdates::boundFollowsTheJobsHonestSteps()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 16, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    QVERIFY(job > 0);
    // A step of a third of the weights' norm passes while nothing is known about the job ...
    const TensorBundle start = serverWeights(job);
    const double norm = ml::WeightMath::l2Norm(start);
    const float third = float(norm / 3.0 / std::sqrt(double(start.parameterCount())));
    auto first = f.lease(agent);
    QCOMPARE(f.upload(agent, first[0].leaseId, moved(f.leaseBase(first[0].leaseId), third), 0), 202);
    // ... honest steps then teach the bound (each about a hundredth of that) ...
    for (int i = 0; i < UpdateBound::kMinHistory; ++i) {
        auto task = f.lease(agent);
        QCOMPARE(task.size(), size_t(1));
        const qint64 base = task[0].manifest.value(QStringLiteral("base_version")).toInteger();
        QCOMPARE(f.upload(agent, task[0].leaseId, moved(f.leaseBase(task[0].leaseId), third / 100), base), 202);
    }
    // ... and the same large step is refused now, naming the median it was measured against; so is a
    // sign-flipped model.
    auto task = f.lease(agent);
    const qint64 base = task[0].manifest.value(QStringLiteral("base_version")).toInteger();
    QString error;
    QCOMPARE(f.upload(agent, task[0].leaseId, moved(f.leaseBase(task[0].leaseId), third), base, &error), 422);
    QVERIFY2(error.contains(u"median step of the job's last"), qPrintable(error));
    auto flipped = f.lease(agent);
    TensorBundle negated = f.leaseBase(flipped[0].leaseId);
    for (const auto& entry : negated.entries())
        for (float& v : negated.mutableValues<float>(entry))
            v = -v;
    QCOMPARE(f.upload(agent, flipped[0].leaseId, negated,
                      flipped[0].manifest.value(QStringLiteral("base_version")).toInteger(), &error),
             422);
    // The bound is rebuilt from the database after a restart.
    f.core.reset();
    QVERIFY(f.reopen());
    auto again = f.lease(agent);
    QCOMPARE(again.size(), size_t(1));
    const qint64 now = again[0].manifest.value(QStringLiteral("base_version")).toInteger();
    QCOMPARE(f.upload(agent, again[0].leaseId, moved(f.leaseBase(again[0].leaseId), third), now, &error), 422);
    QVERIFY2(error.contains(u"median step"), qPrintable(error));
}

void TestHostileUpdates::repeatedRefusalsQuarantineTheAgentUntilReleased()
{
    const QString bad = f.enroll(QStringLiteral("bad")).value(QStringLiteral("agent_id")).toString();
    const QString good = f.enroll(QStringLiteral("good")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 8, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle start = serverWeights(job);
    TensorBundle scaled = start;
    for (const auto& entry : scaled.entries())
        for (float& v : scaled.mutableValues<float>(entry))
            v *= 1e6f;
    auto held = f.lease(bad, 4); // three to poison, one held when the quarantine comes
    QCOMPARE(held.size(), size_t(4));
    for (int i = 0; i < 3; ++i)
        QCOMPARE(f.upload(bad, held[size_t(i)].leaseId, scaled, 0), 422);

    const QJsonObject record = agentRecord(bad);
    QVERIFY(record.value(QStringLiteral("quarantined")).toBool());
    QVERIFY2(record.value(QStringLiteral("quarantine_reason")).toString().contains(u"3 results refused in a row"),
             qPrintable(record.value(QStringLiteral("quarantine_reason")).toString()));
    QJsonObject reply;
    QVERIFY(f.lease(bad, 1, &reply).empty());
    QVERIFY2(reply.value(QStringLiteral("quarantined")).toString().contains(u"agent release"),
             qPrintable(reply.value(QStringLiteral("quarantined")).toString()));
    QVERIFY(reply.value(QStringLiteral("retry_after")).toInt() >= 600);
    // Its held work went back to the queue at once: the honest agent gets all four workunits (8 shards in all).
    QCOMPARE(f.lease(good, 8).size(), size_t(8));
    // Its late result of the held lease is not taken either.
    QString error;
    QCOMPARE(f.upload(bad, held[3].leaseId, start, 0, &error), 409);
    QVERIFY2(error.contains(u"quarantined"), qPrintable(error));

    // The quarantine survives a restart; the admin lifts it.
    f.core.reset();
    QVERIFY(f.reopen());
    QVERIFY(f.lease(bad).empty());
    int status = 0;
    const QJsonObject released = f.call([&] { return f.core->standing().release(bad); }, &status);
    QCOMPARE(status, 200);
    QVERIFY(released.value(QStringLiteral("was_quarantined")).toBool());
    QVERIFY(!agentRecord(bad).value(QStringLiteral("quarantined")).toBool());
    f.call([&] { return f.core->standing().release(QStringLiteral("nobody")); }, &status);
    QCOMPARE(status, 404);
}

void TestHostileUpdates::openLeasesAreCappedPerAgent()
{
    f.config.maxLeasesPerAgent = 3;
    QVERIFY(f.reopen());
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 12, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    QVERIFY(job > 0);
    // An agent that declared one core holds two open leases at most, however often it asks.
    const QJsonObject oneCore{{QStringLiteral("name"), QStringLiteral("small")},
                              {QStringLiteral("hardware"), QJsonObject{{QStringLiteral("cores"), 1}}}};
    const QString small = f.call([&] { return f.core->enrollment().enroll(oneCore); })
                              .value(QStringLiteral("agent_id"))
                              .toString();
    QCOMPARE(f.lease(small, 16).size(), size_t(2));
    QVERIFY(f.lease(small, 16).empty());
    // The coordinator-wide cap holds for a large machine too.
    const QJsonObject manyCores{{QStringLiteral("name"), QStringLiteral("big")},
                                {QStringLiteral("hardware"), QJsonObject{{QStringLiteral("cores"), 64}}}};
    const QString big = f.call([&] { return f.core->enrollment().enroll(manyCores); })
                            .value(QStringLiteral("agent_id"))
                            .toString();
    auto held = f.lease(big, 16);
    QCOMPARE(held.size(), size_t(3));
    QVERIFY(f.lease(big, 16).empty());
    // A result frees a place.
    QCOMPARE(f.upload(big, held[0].leaseId, f.leaseBase(held[0].leaseId), 0), 202);
    QCOMPARE(f.lease(big, 16).size(), size_t(1));
}

void TestHostileUpdates::onlyProgressExtendsALeaseAndExpiredOnesStayExpired()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("other")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    QVERIFY(job > 0);
    auto held = f.lease(agent, 2);
    QCOMPARE(held.size(), size_t(2));
    const qint64 issued = f.clock.nowMs();
    const auto report = [&](const QString& leaseId, qint64 step) {
        return f
            .call([&] {
                return f.core->leases().progress(agent, leaseId, {{QStringLiteral("step"), step}});
            })
            .value(QStringLiteral("deadline_ms"))
            .toInteger();
    };
    const QString stalled = held[0].leaseId;
    const QString busy = held[1].leaseId;

    // A step that moved: one more deadline from now.
    f.clock.advance(50'000);
    QCOMPARE(report(stalled, 1), issued + 50'000 + 60'000);
    QCOMPARE(report(busy, 1), issued + 50'000 + 60'000);
    // Reports that do not move (a paused owner) keep it for one more deadline after it last moved, no longer.
    f.clock.advance(50'000);
    QCOMPARE(report(stalled, 1), issued + 100'000 + 60'000);
    f.clock.advance(50'000);
    QCOMPARE(report(stalled, 1), issued + 50'000 + 2 * 60'000);
    QCOMPARE(f.call([&] { return f.core->leases().progress(agent, stalled, {}); })
                 .value(QStringLiteral("deadline_ms"))
                 .toInteger(),
             issued + 50'000 + 2 * 60'000);
    // Steps that move extend the other, but never past 6 deadlines after it was issued.
    qint64 step = 2;
    for (int i = 0; i < 20; ++i) {
        f.clock.advance(i == 0 ? 0 : 30'000);
        report(busy, step++);
    }
    QCOMPARE(report(busy, step++), issued + 6 * 60'000);

    // The stalled lease expired long ago and its workunit went to another agent; a report does not revive it.
    f.core->state().call([&] { f.core->tick(); });
    const QJsonObject late = f.call([&] {
        return f.core->leases().progress(agent, stalled, {{QStringLiteral("step"), 99}});
    });
    QCOMPARE(late.value(QStringLiteral("expired")).toBool(), true);
    QCOMPARE(late.value(QStringLiteral("abort")).toBool(), false);
    QCOMPARE(late.value(QStringLiteral("deadline_ms")).toInteger(), issued + 50'000 + 2 * 60'000);
    QCOMPARE(f.lease(other).size(), size_t(1));
}

void TestHostileUpdates::replicasAreComparedNotFoldedTwice()
{
    const QString a = f.enroll(QStringLiteral("a")).value(QStringLiteral("agent_id")).toString();
    const QString b = f.enroll(QStringLiteral("b")).value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60,
                                                  QStringLiteral(R"(, "overlap_epochs": false, "replication": 2)")));
    QVERIFY(job > 0);
    auto first = f.lease(a, 2);
    QCOMPARE(first.size(), size_t(2));
    auto replicas = f.lease(b, 2); // nothing pending: the idle agent gets replicas of both
    QCOMPARE(replicas.size(), size_t(2));
    const TensorBundle start = serverWeights(job);

    // Workunit 1: the replica agrees with the first result; it counts once.
    const auto byShard = [](const std::vector<test::LeasedTask>& tasks, int shard) {
        for (const auto& t : tasks)
            if (t.manifest.value(QStringLiteral("subtask")).toObject().value(QStringLiteral("shard")).toInt() == shard)
                return t.leaseId;
        return QString();
    };
    QCOMPARE(f.upload(a, byShard(first, 0), moved(start, 0.01f), 0), 202);
    QJsonObject reply;
    QCOMPARE(f.upload(b, byShard(replicas, 0), moved(start, 0.01f), 0, nullptr, 10, &reply), 202);
    QCOMPARE(reply.value(QStringLiteral("folded")).toBool(), false);
    QCOMPARE(reply.value(QStringLiteral("agrees")).toBool(), true);
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates")).toInteger(), 1);

    // Workunit 2: the replica went the other way; both agents' records show the disagreement.
    QCOMPARE(f.upload(a, byShard(first, 1), moved(start, 0.01f), 0), 202);
    QCOMPARE(f.upload(b, byShard(replicas, 1), moved(start, -0.01f), 0, nullptr, 10, &reply), 202);
    QCOMPARE(reply.value(QStringLiteral("agrees")).toBool(false), false);
    QVERIFY(reply.value(QStringLiteral("agrees")).isBool());
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates")).toInteger(), 2);
    QCOMPARE(agentRecord(a).value(QStringLiteral("disagreed")).toInteger(), 1);
    QCOMPARE(agentRecord(b).value(QStringLiteral("disagreed")).toInteger(), 1);
}

void TestHostileUpdates::lostUpdateFileIsShownNotSkipped()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle start = serverWeights(job);
    auto held = f.lease(agent, 2);
    QCOMPARE(held.size(), size_t(2));
    QCOMPARE(f.upload(agent, held[0].leaseId, moved(start, 0.01f), 0), 202);
    QCOMPARE(f.upload(agent, held[1].leaseId, moved(start, 0.02f), 0), 202);
    // A clean stop snapshots both. Take the coordinator back to a state a crash can leave: no snapshot, so both
    // are replayed from their files, and the first file gone (with the weights in Redis: Redis lost them too).
    f.core.reset();
    const QString forgotten = f.forgetSharedWeights();
    QVERIFY2(forgotten.isEmpty(), qPrintable(forgotten));
    {
        auto db = Database::open(f.dir.databaseLocation(f.config));
        QVERIFY2(db.ok(), qPrintable(db ? QString() : db.error()));
        QVERIFY((*db)->exec(QStringLiteral("DELETE FROM snapshots")).ok());
        QVERIFY((*db)->exec(QStringLiteral("UPDATE updates SET file = ? WHERE lease_id = ?"),
                            {QStringLiteral("updates/%1/gone.safetensors").arg(job), held[0].leaseId})
                    .ok());
        QVERIFY((*db)->exec(QStringLiteral("UPDATE updates SET file = ? WHERE lease_id = ?"),
                            {QStringLiteral("updates/%1/kept.safetensors").arg(job), held[1].leaseId})
                    .ok());
    }
    TensorBundle kept = moved(start, 0.02f);
    kept.setMetadata(QStringLiteral("gleaner.base_version"), QStringLiteral("0"));
    QDir().mkpath(f.dir.root() + QStringLiteral("/updates/%1").arg(job));
    QVERIFY(SafeTensors::save(f.dir.root() + QStringLiteral("/updates/%1/kept.safetensors").arg(job), kept).ok());
    QVERIFY(f.reopen());
    f.core->drain();
    const QJsonObject status = jobStatus(job);
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 1);
    QCOMPARE(status.value(QStringLiteral("updates_received")).toInteger(), 2);
    QCOMPARE(status.value(QStringLiteral("updates_not_folded")).toInteger(), 1);
    const QJsonArray lost = status.value(QStringLiteral("not_folded")).toArray();
    QCOMPARE(lost.size(), 1);
    QCOMPARE(lost[0].toObject().value(QStringLiteral("lease")).toString(), held[0].leaseId);
    QVERIFY2(lost[0].toObject().value(QStringLiteral("reason")).toString().contains(u"lost by the coordinator"),
             qPrintable(lost[0].toObject().value(QStringLiteral("reason")).toString()));
    // The coordinator lost it, not the agent: nothing is counted against the agent.
    QCOMPARE(agentRecord(agent).value(QStringLiteral("invalid")).toInteger(), 0);
    // And a second restart does not try it again.
    f.core.reset();
    QVERIFY(f.reopen());
    f.core->drain();
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates")).toInteger(), 1);
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates_not_folded")).toInteger(), 1);
}


void TestHostileUpdates::encodedUploadsAreDecodedThenChecked()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(resnetSpec(m_dataset, 4, QStringLiteral(R"(, "upload": {"encoding": "topk", "density": 0.05})")));
    QVERIFY(job > 0);
    const TensorBundle before = serverWeights(job);
    auto leased = f.lease(agent, 3);
    QCOMPARE(leased.size(), size_t(3));
    // The manifest announces the encoding, signed with the rest.
    const QJsonObject upload = leased[0].manifest.value(QStringLiteral("upload")).toObject();
    QCOMPARE(upload.value(QStringLiteral("encoding")).toString(), QStringLiteral("topk"));
    QCOMPARE(upload.value(QStringLiteral("density")).toDouble(), 0.05);

    UploadSpec topk;
    topk.encoding = UploadSpec::Encoding::TopK;
    topk.density = 0.05;
    QString error;
    QCOMPARE(f.uploadEncoded(agent, leased[0].leaseId, moved(before, 0.01f), 0, topk, &error), 202);
    // An agent that does not know the encoding sends full weights, which are still taken.
    QCOMPARE(f.upload(agent, leased[1].leaseId, moved(before, 0.01f), 0, &error), 202);
    f.core->drain();

    // The update is kept as it came, and reads back as the model's weights against its lease's.
    auto db = Database::open(f.dir.databaseLocation(f.config));
    QVERIFY(db.ok());
    auto rows = (*db)->exec(QStringLiteral("SELECT file, upload_bytes, encoding FROM updates ORDER BY seq"));
    QVERIFY(rows.ok());
    QVERIFY(rows->next());
    const QString file = f.dir.root() + u'/' + rows->value(0).toString();
    QCOMPARE(QFileInfo(file).size(), rows->value(1).toLongLong());
    auto kept = UpdateChecker::readKept(file, 1 << 26, [&]() -> Result<TensorBundle> { return before; });
    QVERIFY2(kept.ok(), qPrintable(kept ? QString() : kept.error()));
    QVERIFY(ml::WeightMath::checkCompatible(before, *kept).ok());
    const qint64 encodedBytes = rows->value(1).toLongLong();
    QCOMPARE(rows->value(2).toString(), QStringLiteral("topk"));
    QVERIFY(rows->next());
    QCOMPARE(rows->value(2).toString(), QStringLiteral("fp32"));
    QVERIFY2(encodedBytes > 0 && encodedBytes < rows->value(1).toLongLong(),
             qPrintable(QStringLiteral("%1 vs %2").arg(encodedBytes).arg(rows->value(1).toLongLong())));

    // The job's status and the metrics count the bytes as they came.
    const QJsonObject transfer = jobStatus(job).value(QStringLiteral("transfer")).toObject();
    QCOMPARE(transfer.value(QStringLiteral("uploaded_bytes")).toInteger(), encodedBytes + rows->value(1).toLongLong());
    QVERIFY(transfer.value(QStringLiteral("upload_ratio")).toDouble() > 1.0);
    const QByteArray metrics = f.core->metrics().registry().render();
    const QByteArray series = "gleaner_result_bytes_total{encoding=\"topk\"} " + QByteArray::number(encodedBytes);
    QVERIFY2(metrics.contains(series),
             metrics.constData());
}

void TestHostileUpdates::uploadsAreReadWhereTheyLie()
{
    // The base a lease handed out, and an upload trained from it, as the HTTP side leaves it in a file.
    TensorBundle base;
    const std::vector<float> start(1000, 0.5f);
    QVERIFY(base.addValues(QStringLiteral("w"), DType::F32, {1000}, std::span<const float>(start)).ok());
    TensorBundle trained = base;
    trained.mutableValues<float>(*trained.find(u"w"))[0] = 0.75f;
    trained.setMetadata(QStringLiteral("gleaner.base_version"), QStringLiteral("0"));
    trained.setMetadata(QStringLiteral("gleaner.nonce"), QStringLiteral("n1"));
    trained.setMetadata(QStringLiteral("gleaner.samples"), QStringLiteral("10"));
    const QString path = f.scratch->filePath(QStringLiteral("upload.safetensors"));
    {
        QFile out(path);
        QVERIFY(out.open(QIODevice::WriteOnly));
        QVERIFY(out.write(SafeTensors::serialize(trained)) > 0);
    }
    UpdateExpectations expected;
    expected.schema = base;
    expected.nonce = QStringLiteral("n1");
    expected.maxSamples = 10;
    expected.maxSteps = 1;
    const BaseWeightsCache::Entry from{QStringLiteral("base"), base, ml::WeightMath::l2Norm(base)};

    auto received = UpdateChecker::check(path, expected, from);
    QVERIFY2(received.ok(), qPrintable(received ? QString() : received.error()));
    // Viewed in the mapped file, not copied into a buffer of its own.
    QVERIFY(!received->weights.buffer().isDetached());
    const TensorEntry& w = *received->weights.find(u"w");
    QCOMPARE(received->weights.values<float>(w)[0], 0.75f);
    // Written to, it copies first: the file stays as it came.
    TensorBundle written = received->weights;
    written.mutableValues<float>(w)[0] = 2.0f;
    QVERIFY(written.buffer().isDetached());
    auto again = UpdateChecker::check(path, expected, from);
    QVERIFY(again.ok());
    QCOMPARE(again->weights.values<float>(w)[0], 0.75f);
    // It outlives the file's removal (a snapshot's cleanup while a fold still holds it).
    QVERIFY(QFile::remove(path));
    QCOMPARE(received->weights.values<float>(w)[0], 0.75f);
    QCOMPARE(received->weights.values<float>(w)[999], 0.5f);

    // An upload that is gone is the coordinator's trouble, not a bad file.
    auto gone = UpdateChecker::check(path, expected, from);
    QVERIFY(!gone.ok());
    QVERIFY2(gone.error().contains(u"cannot read the upload back"), qPrintable(gone.error()));
}

void TestHostileUpdates::hostileEncodedUploadsAreRefused_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("message");
    QTest::newRow("an encoding the job did not ask for") << "int8" << "encoded as int8, but its job takes topk";
    QTest::newRow("an encoding nobody knows") << "int3" << "does not know";
    QTest::newRow("a zstd bomb") << "bomb" << "decompresses to more than";
    QTest::newRow("a position outside its tensor") << "position" << "cannot be decoded";
    QTest::newRow("a scale of 1e30") << "scale" << "moves the weights by";
    QTest::newRow("a damaged zstd stream") << "damaged" << "zstd";
}

void TestHostileUpdates::hostileEncodedUploadsAreRefused()
{
    QFETCH(QString, kind);
    QFETCH(QString, message);
    Duel d;
    QVERIFY(duel(resnetSpec(m_dataset, 2, QStringLiteral(R"(, "upload": {"encoding": "topk"})")), d));
    const auto& [bad, good, job, before, hostileLease, honestLease] = d;

    UploadSpec spec;
    spec.encoding = UploadSpec::Encoding::TopK;
    const QString lease = hostileLease;
    const TensorBundle weights = f.withResultMetadata(lease, moved(before, 0.001f), 0);
    QByteArray body;
    if (kind == u"int8") {
        UploadSpec int8;
        int8.encoding = UploadSpec::Encoding::Int8;
        body = UpdateCodec::pack(*UpdateCodec::encode(weights, before, int8, nullptr), true);
    } else if (kind == u"bomb") {
        // A few kilobytes that would unpack to far more than the model's upload limit.
        TensorBundle zeros;
        (void)zeros.addZeroed(QStringLiteral("x"), DType::U8, {qint64(64) << 20});
        body = UpdateCodec::pack(zeros, true);
    } else {
        TensorBundle encoded = *UpdateCodec::encode(weights, before, spec, nullptr);
        if (kind == u"int3")
            encoded.setMetadata(UpdateCodec::kEncodingKey, QStringLiteral("int3"));
        const TensorEntry& first = *encoded.find(QString(encoded.entries().first().name.section(u'#', 0, 0) + u"#index"));
        if (kind == u"position")
            encoded.mutableValues<qint32>(first)[0] = std::numeric_limits<qint32>::max();
        if (kind == u"scale")
            for (const TensorEntry& entry : encoded.entries())
                if (entry.name.endsWith(u"#scale"))
                    for (float& v : encoded.mutableValues<float>(entry))
                        v = 1e30f;
        body = UpdateCodec::pack(encoded, true);
        if (kind == u"damaged")
            body.truncate(body.size() / 2);
    }
    QString error;
    QCOMPARE(f.uploadBytes(bad, lease, body, &error), 422);
    QVERIFY2(error.contains(message), qPrintable(error));
    QCOMPARE(serverWeights(job).buffer(), before.buffer()); // nothing reached the server copy

    // An honest encoded update is still taken.
    QCOMPARE(f.uploadEncoded(good, honestLease, moved(before, 0.01f), 0, spec, &error), 202);
    QCOMPARE(jobStatus(job).value(QStringLiteral("updates")).toInteger(), 1);
}

QTEST_GUILESS_MAIN(TestHostileUpdates)
#include "TestHostileUpdates.moc"
