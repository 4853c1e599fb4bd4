// The coordinator with its jobs' weights in Redis (config "redis"; WeightsKeeper over SharedWeights), on a
// Redis of the test's own: folds land there, a restart continues from there, a Redis that lost the job gets
// the snapshot and the replay back, and updates that arrive while Redis is down wait and are folded when it
// answers. (The rest of the coordinator's tests run with Redis too: the *_scaleout tests of ctest.)
#include "CoordinatorFixture.h"
#include "RedisServer.h"
#include "TestSupport.h"

#include "aggregation/SharedWeights.h"
#include "core/Coordinator.h"
#include "store/Database.h"
#include "store/RedisConnection.h"

#include <QJsonObject>
#include <QScopeGuard>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestCoordinatorOnRedis : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();
    void init();
    void cleanup();
    void foldsLandInRedis();
    void restartContinuesFromRedis();
    void redisThatLostTheJobGetsItBack();
    void updateFileLostAfterItsFoldCountsAsFolded();
    void updatesWaitWhileRedisIsDown();
    void leasesWaitWhileRedisIsDown();
    void finishedJobLeavesRedis();

private:
    // The job's copy in Redis, as another coordinator of the deployment reads it.
    std::optional<SharedFoldState> inRedis(qint64 jobId);
    QString deploymentPrefix();
    TensorBundle shifted(const TensorBundle& weights, float by);
    // Deletes this deployment's keys, as a Redis restarted without persistence has none.
    void forgetEverything();

    test::RedisServer m_redis;
    test::CoordinatorFixture f;
    QString m_dataset;
};

void TestCoordinatorOnRedis::initTestCase()
{
    if (const QString why = test::RedisServer::missing(); !why.isEmpty())
        QSKIP(qPrintable(why));
    // With a password, as local-redis.sh sets a server up: every connection and reconnection authenticates.
    const QString why = m_redis.start(/*appendOnly=*/false, /*password=*/true);
    QVERIFY2(why.isEmpty(), qPrintable(why));
}

void TestCoordinatorOnRedis::init()
{
    f.config.redis = m_redis.url();
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
}

void TestCoordinatorOnRedis::cleanup()
{
    f.core.reset();
}

QString TestCoordinatorOnRedis::deploymentPrefix()
{
    auto db = Database::open(f.dir.databaseLocation(f.config));
    if (!db)
        return {};
    auto id = (*db)->deploymentId();
    return id ? QStringLiteral("gleaner:") + *id : QString();
}

std::optional<SharedFoldState> TestCoordinatorOnRedis::inRedis(qint64 jobId)
{
    if (f.core)
        f.core->drain();
    auto connection = RedisConnection::open(m_redis.url());
    if (!connection)
        return std::nullopt;
    SharedWeights shared(**connection, deploymentPrefix());
    auto read = shared.read(jobId);
    return read ? *read : std::nullopt;
}

TensorBundle TestCoordinatorOnRedis::shifted(const TensorBundle& weights, float by)
{
    TensorBundle moved = weights;
    for (const auto& entry : moved.entries())
        for (float& v : moved.mutableValues<float>(entry))
            v += by;
    return moved;
}

void TestCoordinatorOnRedis::forgetEverything()
{
    const QString forgotten = f.forgetSharedWeights();
    QVERIFY2(forgotten.isEmpty(), qPrintable(forgotten));
}

void TestCoordinatorOnRedis::foldsLandInRedis()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset));
    const TensorBundle w0 = f.serverWeights(job);
    auto put = inRedis(job);
    QVERIFY(put.has_value());
    QCOMPARE(put->version, 0);

    auto tasks = f.lease(agent, 2);
    QCOMPARE(tasks.size(), size_t(2));
    QCOMPARE(f.upload(agent, tasks[0].leaseId, shifted(w0, 0.01f), 0), 202);
    QCOMPARE(f.upload(agent, tasks[1].leaseId, shifted(w0, 0.02f), 0), 202);
    auto folded = inRedis(job);
    QVERIFY(folded.has_value());
    QCOMPARE(folded->version, 2);
    // The coordinator's copy is Redis's, bit for bit.
    const TensorBundle served = f.serverWeights(job);
    for (const auto& entry : served.entries())
        QCOMPARE(folded->weights.data(*folded->weights.find(entry.name)), served.data(entry));
    const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 2);
}

void TestCoordinatorOnRedis::restartContinuesFromRedis()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle w0 = f.serverWeights(job);
    auto tasks = f.lease(agent, 3);
    QCOMPARE(tasks.size(), size_t(3));
    for (size_t i = 0; i < tasks.size(); ++i)
        QCOMPARE(f.upload(agent, tasks[i].leaseId, shifted(w0, 0.01f * float(i + 1)), 0), 202);
    const TensorBundle expected = f.serverWeights(job);

    // A crash: no snapshot since version 0. Redis holds version 3; the replay finds all three folded already.
    f.core.reset();
    QVERIFY(f.reopen());
    const TensorBundle after = f.serverWeights(job);
    for (const auto& entry : expected.entries())
        QCOMPARE(after.data(*after.find(entry.name)), expected.data(entry));
    QCOMPARE(inRedis(job)->version, 3);
    const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 3);
    QCOMPARE(f.lease(agent, 4).size(), size_t(1)); // the fourth workunit is still there to do
}

void TestCoordinatorOnRedis::redisThatLostTheJobGetsItBack()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle w0 = f.serverWeights(job);
    auto tasks = f.lease(agent, 3);
    for (size_t i = 0; i < tasks.size(); ++i)
        QCOMPARE(f.upload(agent, tasks[i].leaseId, shifted(w0, 0.01f * float(i + 1)), 0), 202);
    const TensorBundle expected = f.serverWeights(job);

    // Both gone at once: the coordinator and Redis's data. The snapshot (version 0) goes back into Redis and
    // the three received updates are folded onto it again, to the same weights.
    f.core.reset();
    forgetEverything();
    QVERIFY(!inRedis(job).has_value());
    QVERIFY(f.reopen());
    const TensorBundle after = f.serverWeights(job);
    for (const auto& entry : expected.entries())
        QCOMPARE(after.data(*after.find(entry.name)), expected.data(entry));
    auto back = inRedis(job);
    QVERIFY(back.has_value());
    QCOMPARE(back->version, 3);
}

void TestCoordinatorOnRedis::updateFileLostAfterItsFoldCountsAsFolded()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle w0 = f.serverWeights(job);
    auto tasks = f.lease(agent, 2);
    QCOMPARE(f.upload(agent, tasks[0].leaseId, shifted(w0, 0.01f), 0), 202);
    QCOMPARE(f.upload(agent, tasks[1].leaseId, shifted(w0, 0.02f), 0), 202);
    const TensorBundle expected = f.serverWeights(job);
    // A crash before any snapshot, and the first update's file gone: Redis folded it, so nothing is lost.
    f.core.reset();
    {
        auto db = Database::open(f.dir.databaseLocation(f.config));
        QVERIFY(db.ok());
        QVERIFY((*db)->exec(QStringLiteral("DELETE FROM snapshots")).ok());
        QVERIFY((*db)
                    ->exec(QStringLiteral(
                               "UPDATE updates SET file = 'updates/gone.safetensors' WHERE lease_id = ?"),
                           {tasks[0].leaseId})
                    .ok());
    }
    QVERIFY(f.reopen());
    const TensorBundle after = f.serverWeights(job);
    for (const auto& entry : expected.entries())
        QCOMPARE(after.data(*after.find(entry.name)), expected.data(entry));
    const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 2);
    QCOMPARE(status.value(QStringLiteral("updates_not_folded")).toInteger(), 0);
}

void TestCoordinatorOnRedis::updatesWaitWhileRedisIsDown()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(
        test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)")));
    const TensorBundle w0 = f.serverWeights(job);
    auto tasks = f.lease(agent, 2);
    QCOMPARE(tasks.size(), size_t(2));
    QCOMPARE(f.upload(agent, tasks[0].leaseId, shifted(w0, 0.01f), 0), 202);

    m_redis.halt();
    // Received and kept (202), not folded: nothing is lost, nothing is refused.
    QCOMPARE(f.upload(agent, tasks[1].leaseId, shifted(w0, 0.02f), 0), 202);
    f.core->drain();
    QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates_received")).toInteger(), 2);
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 1);
    QCOMPARE(status.value(QStringLiteral("updates_not_folded")).toInteger(), 0);
    QCOMPARE(f.core->metrics().updatesWaitingForRedis(), 1.0); // what /metrics shows the admin

    // Redis comes back empty (no persistence): this coordinator's copy (version 1) goes back, then the
    // waiting update is folded onto it.
    const QString resumed = m_redis.resume();
    QVERIFY2(resumed.isEmpty(), qPrintable(resumed));
    const TensorBundle after = f.serverWeights(job); // an export brings the copy up to date first
    auto there = inRedis(job);
    QVERIFY(there.has_value());
    QCOMPARE(there->version, 2);
    status = f.call([&] { return f.core->jobs().status(job); });
    QCOMPARE(status.value(QStringLiteral("updates")).toInteger(), 2);
    QCOMPARE(f.core->metrics().updatesWaitingForRedis(), 0.0);
    // VC-ASGD with alpha 1/2: w2 = (w1 + c2) / 2, w1 = (w0 + c1) / 2.
    for (const auto& entry : w0.entries()) {
        const auto before = w0.values<float>(entry);
        const auto now = after.values<float>(*after.find(entry.name));
        for (size_t i = 0; i < before.size(); ++i) {
            const float w1 = 0.5f * before[i] + 0.5f * (before[i] + 0.01f);
            QCOMPARE(now[i], 0.5f * w1 + 0.5f * (before[i] + 0.02f));
        }
    }
}

void TestCoordinatorOnRedis::leasesWaitWhileRedisIsDown()
{
    // An update waiting for Redis keeps its weights in memory for as long as Redis is away: past
    // fold_backlog_mb no new lease goes out, and the leases go out again once the update is folded.
    const auto restore = qScopeGuard([&] { f.config.foldBacklogMb = CoordinatorConfig{}.foldBacklogMb; });
    f.config.foldBacklogMb = 1;
    QVERIFY(f.reopen());
    const QString agent = f.enroll(QStringLiteral("uploader")).value(QStringLiteral("agent_id")).toString();
    const QString other = f.enroll(QStringLiteral("asker")).value(QStringLiteral("agent_id")).toString();
    // 282,628 parameters: one update holds 1.08 MiB.
    const qint64 job =
        f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)"))
                     .replace(R"("hidden": [16])", R"("hidden": [4096])"));
    const TensorBundle w0 = f.serverWeights(job);
    QCOMPARE(w0.parameterCount(), qint64(282'628));
    auto tasks = f.lease(agent, 1);
    QCOMPARE(tasks.size(), size_t(1));
    const auto heldBack = [&] {
        const HttpResponse r = f.core->state().call([&] {
            return f.core->leases().lease(other, QJsonObject{{QStringLiteral("max_tasks"), 1}});
        });
        return QJsonDocument::fromJson(r.body).object().value(QStringLiteral("held_back")).toString();
    };

    m_redis.halt();
    QCOMPARE(f.upload(agent, tasks[0].leaseId, shifted(w0, 0.01f), 0), 202);
    f.core->drain(); // the weights thread is idle: the update waits for Redis, in memory
    QCOMPARE(f.core->metrics().updatesWaitingForRedis(), 1.0);
    QVERIFY(heldBack().contains(QStringLiteral("fold_backlog_mb of 1")));

    const QString resumed = m_redis.resume();
    QVERIFY2(resumed.isEmpty(), qPrintable(resumed));
    (void)f.serverWeights(job); // an export folds what waits first
    QCOMPARE(f.core->metrics().updatesWaitingForRedis(), 0.0);
    QCOMPARE(heldBack(), QString());
    QCOMPARE(f.lease(other, 1).size(), size_t(1));
}

void TestCoordinatorOnRedis::finishedJobLeavesRedis()
{
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset));
    QVERIFY(inRedis(job).has_value());
    int status = 0;
    f.call([&] { return f.core->jobs().setStatus(job, "cancel"); }, &status);
    QCOMPARE(status, 200);
    QVERIFY(!inRedis(job).has_value());
}

QTEST_GUILESS_MAIN(TestCoordinatorOnRedis)
#include "TestCoordinatorOnRedis.moc"
