// Who a handed-back checkpoint (protocol 6.8) counts against. A leaving agent's checkpoint sets where the next
// agent's training starts: a forged one must count against the agent that sent it, never against the honest agent
// that resumed it (three refusals in a row would quarantine that one). The real coordinator core, its database and
// real libtorch checkpoints of a tiny job; the hostile agent is this test, which recomputes checksums as anyone can.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "ml/Checkpoint.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestHandBackBlame : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void forgedSampleCountCountsAgainstItsSender();
    void refusedResumeCountsAgainstItsSenderNotTheResumer();
    void senderIsRememberedAcrossARestart();
    void workerFailingOnAHandedBackCheckpointIsNotCounted();
    void resumedResultSaysNothingOfItsAgentsSpeed();
    void refusedFoldOfAResumedResultIsNotCounted();

private:
    QString enroll(const QString& name)
    {
        return f.enroll(name).value(QStringLiteral("agent_id")).toString();
    }
    QJsonObject agentRecord(const QString& agentId);
    void tick()
    {
        f.call([&] {
            f.core->tick();
            return HttpResponse::json(200, {});
        });
    }
    // The hostile agent's checkpoint: a genuine one with `samples` raised by 16 and its checksum written again.
    static QByteArray withMoreSamples(const QByteArray& checkpoint);

    test::CoordinatorFixture f;
    QString m_dataset;
};

QByteArray TestHandBackBlame::withMoreSamples(const QByteArray& checkpoint)
{
    auto bundle = SafeTensors::parse(checkpoint);
    if (!bundle)
        return {};
    auto info = ml::CheckpointInfo::readFrom(*bundle);
    if (!info)
        return {};
    info->samples += 16;
    info->writeTo(*bundle);
    return SafeTensors::serialize(*bundle);
}

void TestHandBackBlame::init()
{
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
}

void TestHandBackBlame::cleanup()
{
    f.core.reset();
}

QJsonObject TestHandBackBlame::agentRecord(const QString& agentId)
{
    const QJsonObject agents = f.call([&] { return f.core->enrollment().listAgents(); });
    for (const auto& a : agents.value(QStringLiteral("agents")).toArray())
        if (a.toObject().value(QStringLiteral("id")).toString() == agentId)
            return a.toObject();
    return {};
}

// The forgery the review found: a genuine checkpoint whose sample count is 16 higher, checksum recomputed. It was
// kept, and every honest agent that resumed it sent a result the coordinator refused. It is refused when handed
// back, counted against its sender, and the honest agent trains the workunit from step 0 and is accepted.
void TestHandBackBlame::forgedSampleCountCountsAgainstItsSender()
{
    const QString hostile = enroll(QStringLiteral("hostile"));
    const QString honest = enroll(QStringLiteral("honest"));
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 1, 3, 0.99, 600)) > 0);
    const auto held = f.lease(hostile);
    QCOMPARE(held.size(), size_t(1));
    const QByteArray forged = withMoreSamples(f.checkpointOf(held[0], 2));
    QVERIFY(!forged.isEmpty());
    QJsonObject reply;
    QCOMPARE(f.handBack(hostile, held[0].leaseId, forged, &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("refused"));
    const QString reason = reply.value(QStringLiteral("reason")).toString();
    QVERIFY2(reason.contains(u"samples is"), qPrintable(reason));
    QCOMPARE(agentRecord(hostile).value(QStringLiteral("invalid")).toInteger(), 1);

    const auto next = f.lease(honest);
    QCOMPARE(next.size(), size_t(1));
    QVERIFY(!next[0].manifest.contains(QStringLiteral("resume")));
    QString error;
    QCOMPARE(f.upload(honest, next[0].leaseId, test::shifted(f.leaseBase(next[0].leaseId), 0.01f), 0, &error), 202);
    QCOMPARE(agentRecord(honest).value(QStringLiteral("invalid")).toInteger(), 0);
}

// A checkpoint that passes every check can still lead to a result the checks refuse (here a sample count the
// subtask does not have, as a forged checkpoint's would carry). Three in a row: the resumer is never counted nor
// quarantined; the sender is counted each time and quarantined after three; each checkpoint is discarded (the next
// lease starts afresh, the blob goes) and the job goes on.
void TestHandBackBlame::refusedResumeCountsAgainstItsSenderNotTheResumer()
{
    const QString hostile = enroll(QStringLiteral("hostile"));
    const QString honest = enroll(QStringLiteral("honest"));
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 1, 3, 0.99, 600));
    QVERIFY(job > 0);
    for (int i = 1; i <= 3; ++i) {
        const auto held = f.lease(hostile);
        QCOMPARE(held.size(), size_t(1));
        const QByteArray checkpoint = f.checkpointOf(held[0], 2);
        QJsonObject reply;
        QCOMPARE(f.handBack(hostile, held[0].leaseId, checkpoint, &reply), 200);
        QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
        const QString sha = Sha256::toHex(Sha256::hash(checkpoint));

        const auto resumed = f.lease(honest);
        QCOMPARE(resumed.size(), size_t(1));
        QCOMPARE(resumed[0].manifest.value(QStringLiteral("resume")).toObject().value(QStringLiteral("sha256")).toString(),
                 sha);
        QString error;
        QCOMPARE(f.upload(honest, resumed[0].leaseId, f.leaseBase(resumed[0].leaseId), 0, &error, 1000000), 422);
        QVERIFY2(error.contains(u"gleaner.samples"), qPrintable(error));
        QCOMPARE(agentRecord(honest).value(QStringLiteral("invalid")).toInteger(), 0);
        QCOMPARE(agentRecord(hostile).value(QStringLiteral("invalid")).toInteger(), i);
        tick(); // nothing names the checkpoint any more: its blob goes
        QVERIFY(!QFileInfo::exists(f.core->blobs().path(sha)));
    }
    QCOMPARE(agentRecord(hostile).value(QStringLiteral("quarantined")).toBool(), true);
    QCOMPARE(agentRecord(honest).value(QStringLiteral("quarantined")).toBool(), false);
    QVERIFY(f.lease(hostile).empty());

    // The workunit starts afresh for the honest agent, whose result is taken.
    const auto fresh = f.lease(honest);
    QCOMPARE(fresh.size(), size_t(1));
    QVERIFY(!fresh[0].manifest.contains(QStringLiteral("resume")));
    QCOMPARE(f.upload(honest, fresh[0].leaseId, test::shifted(f.leaseBase(fresh[0].leaseId), 0.01f), 0), 202);
    QCOMPARE(f.call([&] { return f.core->jobs().status(job); })
                 .value(QStringLiteral("updates_received"))
                 .toInteger(),
             1);
}

// The resume point's sender is kept in the database: after a restart, a refused resumed result still counts
// against it.
void TestHandBackBlame::senderIsRememberedAcrossARestart()
{
    const QString hostile = enroll(QStringLiteral("hostile"));
    const QString honest = enroll(QStringLiteral("honest"));
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 1, 3, 0.99, 600)) > 0);
    const auto held = f.lease(hostile);
    QCOMPARE(held.size(), size_t(1));
    QJsonObject reply;
    QCOMPARE(f.handBack(hostile, held[0].leaseId, f.checkpointOf(held[0], 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    f.core.reset();
    QVERIFY(f.reopen());

    const auto resumed = f.lease(honest);
    QCOMPARE(resumed.size(), size_t(1));
    QVERIFY(resumed[0].manifest.contains(QStringLiteral("resume")));
    QCOMPARE(f.upload(honest, resumed[0].leaseId, f.leaseBase(resumed[0].leaseId), 0, nullptr, 1000000), 422);
    QCOMPARE(agentRecord(honest).value(QStringLiteral("invalid")).toInteger(), 0);
    QCOMPARE(agentRecord(hostile).value(QStringLiteral("invalid")).toInteger(), 1);
}

// A worker that fails on a handed-back checkpoint (training from it diverged, say) reports the lease failed: not
// counted against its agent, and the checkpoint goes so that the next agent does not fail the same way.
void TestHandBackBlame::workerFailingOnAHandedBackCheckpointIsNotCounted()
{
    const QString leaving = enroll(QStringLiteral("leaving"));
    const QString honest = enroll(QStringLiteral("honest"));
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 1, 3, 0.99, 600)) > 0);
    const auto held = f.lease(leaving);
    QCOMPARE(held.size(), size_t(1));
    QJsonObject reply;
    QCOMPARE(f.handBack(leaving, held[0].leaseId, f.checkpointOf(held[0], 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    const auto resumed = f.lease(honest);
    QCOMPARE(resumed.size(), size_t(1));
    QVERIFY(resumed[0].manifest.contains(QStringLiteral("resume")));
    const QJsonObject report{{QStringLiteral("stage"), QStringLiteral("worker")},
                             {QStringLiteral("reason"), QStringLiteral("training diverged: the loss is nan")}};
    int status = 0;
    f.call([&] { return f.core->handBacks().failed(honest, resumed[0].leaseId, report); }, &status);
    QCOMPARE(status, 200);
    QCOMPARE(agentRecord(honest).value(QStringLiteral("failed")).toInteger(), 0);
    const auto again = f.lease(honest);
    QCOMPARE(again.size(), size_t(1));
    QVERIFY(!again[0].manifest.contains(QStringLiteral("resume")));
}

// A resumed result's samples and seconds include the sender's (a checkpoint may claim up to 30 days): they do not
// set the resuming agent's speed, by which its subtasks are sized. Its next result of its own does.
void TestHandBackBlame::resumedResultSaysNothingOfItsAgentsSpeed()
{
    const QString leaving = enroll(QStringLiteral("leaving"));
    const QString honest = enroll(QStringLiteral("honest"));
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 600)) > 0);
    const auto held = f.lease(leaving);
    QCOMPARE(held.size(), size_t(1));
    QJsonObject reply;
    QCOMPARE(f.handBack(leaving, held[0].leaseId, f.checkpointOf(held[0], 2), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    const auto speed = [&] {
        const QJsonObject agents = f.call([&] { return f.core->views().listAgentsDetailed(); });
        for (const auto& a : agents.value(QStringLiteral("agents")).toArray())
            if (a.toObject().value(QStringLiteral("id")).toString() == honest)
                return a.toObject().value(QStringLiteral("speed"));
        return QJsonValue();
    };
    const auto uploadTimed = [&](const test::LeasedTask& task) {
        TensorBundle result = f.withResultMetadata(task.leaseId, test::shifted(f.leaseBase(task.leaseId), 0.01f),
                                                   task.manifest.value(QStringLiteral("base_version")).toInteger());
        result.setMetadata(QStringLiteral("gleaner.train_seconds"), QStringLiteral("2592000"));
        return f.uploadBytes(honest, task.leaseId, SafeTensors::serialize(result));
    };
    const auto resumed = f.lease(honest);
    QCOMPARE(resumed.size(), size_t(1));
    QVERIFY(resumed[0].manifest.contains(QStringLiteral("resume")));
    QCOMPARE(uploadTimed(resumed[0]), 202);
    QVERIFY(speed().isUndefined());
    const auto own = f.lease(honest);
    QCOMPARE(own.size(), size_t(1));
    QVERIFY(!own[0].manifest.contains(QStringLiteral("resume")));
    QCOMPARE(uploadTimed(own[0]), 202);
    QVERIFY(speed().isDouble());
}

// A resumed result trains on the base the checkpoint was written for, which the server may have left far behind;
// its fold can then be refused for moving the server weights too far (here: twelve folds took the server one way,
// the resumed result went the other). Not held against the agent that resumed it.
void TestHandBackBlame::refusedFoldOfAResumedResultIsNotCounted()
{
    const QString leaving = enroll(QStringLiteral("leaving"));
    const QString honest = enroll(QStringLiteral("honest"));
    const QString busy = enroll(QStringLiteral("busy"));
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 14, 3, 0.99, 600));
    QVERIFY(job > 0);
    const auto held = f.lease(leaving);
    QCOMPARE(held.size(), size_t(1));
    QJsonObject reply;
    QCOMPARE(f.handBack(leaving, held[0].leaseId, f.checkpointOf(held[0], 1), &reply), 200);
    QCOMPARE(reply.value(QStringLiteral("checkpoint")).toString(), QStringLiteral("kept"));
    const auto resumed = f.lease(honest);
    QCOMPARE(resumed.size(), size_t(1));
    QVERIFY(resumed[0].manifest.contains(QStringLiteral("resume")));
    const TensorBundle base = f.leaseBase(resumed[0].leaseId);

    for (int i = 0; i < 12; ++i) {
        const auto task = f.lease(busy);
        QCOMPARE(task.size(), size_t(1));
        QCOMPARE(f.upload(busy, task[0].leaseId, test::shifted(f.leaseBase(task[0].leaseId), 0.01f),
                          task[0].manifest.value(QStringLiteral("base_version")).toInteger()),
                 202);
        f.core->drain();
        tick(); // published: the next lease trains from the server's latest weights
    }
    QCOMPARE(f.upload(honest, resumed[0].leaseId, test::shifted(base, -0.01f), 0), 202);
    f.core->drain();
    tick();
    QCOMPARE(f.call([&] { return f.core->jobs().status(job); })
                 .value(QStringLiteral("updates_not_folded"))
                 .toInteger(),
             1);
    QCOMPARE(agentRecord(honest).value(QStringLiteral("invalid")).toInteger(), 0);
    QCOMPARE(agentRecord(busy).value(QStringLiteral("invalid")).toInteger(), 0);
}

QTEST_GUILESS_MAIN(TestHandBackBlame)
#include "TestHandBackBlame.moc"
