// The server weights in Redis (aggregation/SharedWeights) on a real Redis 7 the test starts on loopback: the
// connection's errors, chunked round trips, folds across connections, and the proof the design rests on:
// several clients folding at once lose no update, and the weights in Redis are the fold of the recorded
// order, bit for bit. The same check run on a read-modify-write without the version guard finds lost updates.
#include "aggregation/SharedWeights.h"
#include "aggregation/UpdateBound.h"
#include "aggregation/WeightsKeeper.h"
#include "format/SafeTensors.h"
#include "store/RedisConnection.h"

#include "RedisServer.h"
#include "TestSupport.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <atomic>
#include <random>
#include <set>
#include <thread>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

TensorBundle makeWeights(qint64 params, quint32 seed, float scale = 0.1f)
{
    TensorBundle bundle;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-scale, scale);
    const qint64 sizes[] = {params / 2, params / 4, 64, params - params / 2 - params / 4 - 64};
    int index = 0;
    for (qint64 size : sizes) {
        float* data = reinterpret_cast<float*>(
            bundle.addZeroed(QStringLiteral("layer%1.weight").arg(index++), DType::F32, {size}));
        for (qint64 i = 0; i < size; ++i)
            data[i] = value(rng);
    }
    return bundle;
}

// The update of sequence number `seq`: the initial weights, moved a little in a direction of its own.
TensorBundle updateFor(const TensorBundle& initial, qint64 seq)
{
    TensorBundle update = initial;
    std::mt19937 rng(quint32(seq * 7919 + 1));
    std::normal_distribution<float> noise(0.0f, 0.01f);
    for (const TensorEntry& entry : update.entries())
        for (float& v : update.mutableValues<float>(entry))
            v += noise(rng);
    return update;
}

bool bitEqual(const TensorBundle& a, const TensorBundle& b)
{
    if (a.size() != b.size())
        return false;
    for (const TensorEntry& entry : a.entries()) {
        const TensorEntry* other = b.find(entry.name);
        if (!other || a.data(entry) != b.data(*other))
            return false;
    }
    return true;
}

AggregationSpec rule(const char* json)
{
    auto spec = AggregationSpec::fromJson(QJsonDocument::fromJson(json).object());
    Q_ASSERT(spec.ok());
    return *spec;
}

} // namespace

class TestSharedWeights : public QObject
{
    Q_OBJECT

private:
    test::RedisServer m_redis;
    qint64 m_nextJob = 1;

    std::unique_ptr<RedisConnection> connect()
    {
        auto connection = RedisConnection::open(m_redis.url());
        if (!connection)
            qFatal("%s", qPrintable(connection.error()));
        return std::move(*connection);
    }

    // `clients` threads, each on its own connection, fold `perClient` updates of their own into one job at
    // once; then checks that the order in Redis holds every update once and that folding it from the start
    // gives the weights in Redis bit for bit. Returns the conflicts the clients saw (each one a fold that had
    // to be redone).
    Result<qint64> foldConcurrently(const AggregationSpec& spec, int clients, int perClient)
    {
        const qint64 job = m_nextJob++;
        const TensorBundle initial = makeWeights(20'000, 3);
        auto main = connect();
        SharedWeights shared(*main);
        SharedFoldState start;
        start.weights = initial;
        if (auto put = shared.put(job, start, SharedWeights::Put::IfAbsent); !put)
            return fail(put.error());

        std::atomic<qint64> conflicts{0};
        std::atomic<int> failures{0};
        std::vector<std::thread> threads;
        for (int c = 0; c < clients; ++c)
            threads.emplace_back([&, c] {
                auto connection = RedisConnection::open(m_redis.url());
                if (!connection) {
                    ++failures;
                    return;
                }
                SharedWeights mine(**connection);
                for (int i = 0; i < perClient; ++i) {
                    const qint64 seq = qint64(c) * 1000 + i + 1;
                    UpdateContext context;
                    context.base = &initial;
                    context.concurrency = clients;
                    auto folded = mine.foldUpdate(job, seq, spec, updateFor(initial, seq), context);
                    if (!folded || folded->alreadyFolded || !folded->refused.isEmpty()) {
                        ++failures;
                        qWarning() << "update" << seq << (folded ? folded->refused : folded.error());
                    }
                }
                conflicts += mine.conflicts();
            });
        for (auto& thread : threads)
            thread.join();
        if (failures != 0)
            return fail(QStringLiteral("%1 folds failed").arg(int(failures)));

        auto order = shared.foldOrder(job);
        auto final = shared.read(job);
        if (!order || !final || !*final)
            return fail(QStringLiteral("cannot read the job back"));
        const int total = clients * perClient;
        if (int(order->size()) != total ||
            int(std::set<qint64>(order->begin(), order->end()).size()) != total)
            return fail(QStringLiteral("the fold order holds %1 entries, not the %2 updates once each")
                            .arg(order->size())
                            .arg(total));
        if ((*final)->version != total)
            return fail(QStringLiteral("version %1 after %2 folds").arg((*final)->version).arg(total));

        // The fold of the recorded order, in one process, as WeightsKeeper folds.
        TensorBundle weights = initial;
        std::unique_ptr<AggregationRule> replay = AggregationRule::create(spec);
        UpdateBound steps;
        qint64 version = 0;
        for (qint64 seq : *order) {
            UpdateContext context;
            context.base = &initial;
            context.concurrency = clients;
            context.serverVersion = version++;
            if (!WeightsKeeper::fold(weights, replay, steps, updateFor(initial, seq), context, false))
                return fail(QStringLiteral("the replay refused update %1").arg(seq));
        }
        if (!bitEqual(weights, (*final)->weights))
            return fail(QStringLiteral("the weights in Redis are not the fold of the recorded order"));
        if (!bitEqual(replay->saveState(), (*final)->ruleState))
            return fail(QStringLiteral("the rule's state in Redis is not the replay's"));
        return conflicts.load();
    }

private Q_SLOTS:
    void initTestCase()
    {
        if (const QString why = test::RedisServer::missing(); !why.isEmpty())
            QSKIP(qPrintable(why));
        const QString why = m_redis.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
    }

    void badUrlsAreRefusedWithoutTheirPassword()
    {
        for (const char* url : {"http://127.0.0.1:6379", "redis://", "redis://host:0", "redis://host/abc",
                                "redis://host?timeout=3", "postgresql://u:p@h/db"}) {
            const Status s = RedisConnection::checkUrl(QString::fromLatin1(url));
            QVERIFY2(!s.ok(), url);
        }
        QVERIFY(RedisConnection::checkUrl(QStringLiteral("redis://:s3cret@127.0.0.1:6380/2")).ok());

        // A password this server does not ask for: refused in Redis's words, which name no secret.
        auto refused = RedisConnection::open(
            QStringLiteral("redis://:hunter2-secret@127.0.0.1:%1/0").arg(m_redis.port()));
        QVERIFY(!refused);
        QVERIFY2(!refused.error().contains(u"hunter2"), qPrintable(refused.error()));
        QVERIFY2(refused.error().contains(QStringLiteral("127.0.0.1:%1").arg(m_redis.port())),
                 qPrintable(refused.error()));
    }

    void aServerThatIsNotThereIsNamed()
    {
        const int port = test::freeLoopbackPort();
        auto refused = RedisConnection::open(QStringLiteral("redis://127.0.0.1:%1").arg(port));
        QVERIFY(!refused);
        QVERIFY2(refused.error().contains(
                     QStringLiteral("cannot connect to Redis at redis://127.0.0.1:%1").arg(port)),
                 qPrintable(refused.error()));
    }

    void weightsLargerThanAChunkComeBackWhole()
    {
        const qint64 job = m_nextJob++;
        auto connection = connect();
        SharedWeights shared(*connection);
        SharedFoldState state;
        state.weights = makeWeights(3'000'000, 1); // 12 MB: three chunks
        state.ruleState = makeWeights(1'000, 2);
        state.steps = {0.1, 1.0 / 3.0, 2e-9};
        state.version = 17;
        QCOMPARE(*shared.put(job, state, SharedWeights::Put::IfAbsent), true);
        QCOMPARE(*shared.put(job, state, SharedWeights::Put::IfAbsent),
                 false);                                                       // there already: left as it is
        QCOMPARE(*shared.put(job, state, SharedWeights::Put::IfOlder), false); // as recent: left as it is
        SharedFoldState older = state;
        older.version = 16;
        older.weights = makeWeights(10, 9);
        QCOMPARE(*shared.put(job, older, SharedWeights::Put::IfOlder), false);

        // Another connection (no cache) reads exactly what was put.
        auto other = connect();
        SharedWeights reader(*other);
        auto read = reader.read(job);
        QVERIFY2(read.ok(), qPrintable(read.error()));
        QVERIFY(read->has_value());
        QVERIFY(bitEqual((*read)->weights, state.weights));
        QVERIFY(bitEqual((*read)->ruleState, state.ruleState));
        QCOMPARE((*read)->steps, state.steps);
        QCOMPARE((*read)->version, 17);

        // A newer version than Redis holds is written over it.
        SharedFoldState newer = state;
        newer.version = 18;
        QCOMPARE(*shared.put(job, newer, SharedWeights::Put::IfOlder), true);
        QCOMPARE((*reader.read(job))->version, 18);

        // Replaced by smaller weights: the chunks beyond them go.
        state.weights = makeWeights(1'000, 4);
        state.version = 3;
        QCOMPARE(*shared.put(job, state, SharedWeights::Put::Always), true);
        auto replaced = reader.read(job);
        QVERIFY(replaced.ok() && replaced->has_value());
        QVERIFY(bitEqual((*replaced)->weights, state.weights));
        QCOMPARE((*replaced)->version, 3);
        auto chunk = other->command({"EXISTS", "gleaner:{job:" + QByteArray::number(job) + "}:w:1"});
        QVERIFY(chunk.ok());
        QCOMPARE(chunk->integer, 0);

        QVERIFY(shared.remove(job).ok());
        auto gone = reader.read(job);
        QVERIFY(gone.ok() && !gone->has_value());
        auto missing = shared.fold(job, 1, [](SharedFoldState&) { return Status(); });
        QVERIFY(!missing);
        QVERIFY2(missing.error().contains(u"has no weights in Redis"), qPrintable(missing.error()));
    }

    void aMetaThatLiesIsRefusedBeforeAnythingIsRead()
    {
        const qint64 job = m_nextJob++;
        auto connection = connect();
        SharedWeights shared(*connection);
        SharedFoldState state;
        state.weights = makeWeights(1'000, 8);
        QVERIFY(shared.put(job, state, SharedWeights::Put::IfAbsent).ok());
        const QByteArray meta = "gleaner:{job:" + QByteArray::number(job) + "}:meta";
        for (const auto& [field, value] :
             std::vector<std::pair<QByteArray, QByteArray>>{{"weights_chunks", "1000000000"},
                                                            {"weights_bytes", "-5"},
                                                            {"state_bytes", "99999999999999"}}) {
            auto other = connect(); // no cache: it reads the meta
            SharedWeights reader(*other);
            QVERIFY(connection->command({"HSET", meta, field, value}).ok());
            auto read = reader.read(job);
            QVERIFY2(!read, field.constData());
            QVERIFY2(read.error().contains(u"does not describe weights this coordinator wrote"),
                     qPrintable(read.error()));
            QVERIFY(shared.put(job, state, SharedWeights::Put::Always).ok()); // whole again for the next lie
        }
    }

    void foldsOnTwoConnectionsBuildOnEachOther()
    {
        const qint64 job = m_nextJob++;
        auto a = connect();
        auto b = connect();
        SharedWeights first(*a);
        SharedWeights second(*b);
        const TensorBundle initial = makeWeights(1'000, 5);
        SharedFoldState state;
        state.weights = initial;
        QVERIFY(first.put(job, state, SharedWeights::Put::IfAbsent).ok());
        const AggregationSpec spec = rule(R"({"rule": "vc-asgd", "alpha": 0.5})");

        auto one = first.foldUpdate(job, 11, spec, updateFor(initial, 11), {});
        QVERIFY2(one.ok(), qPrintable(one.error()));
        QCOMPARE(one->version, 1);
        // The second connection's process has never seen the job: it reads version 1 and folds onto it.
        auto two = second.foldUpdate(job, 12, spec, updateFor(initial, 12), {});
        QVERIFY2(two.ok(), qPrintable(two.error()));
        QCOMPARE(two->version, 2);
        // And the first, whose copy is now stale, folds onto version 2, not onto its own version 1.
        auto three = first.foldUpdate(job, 13, spec, updateFor(initial, 13), {});
        QVERIFY(three.ok());
        QCOMPARE(three->version, 3);
        QCOMPARE(*first.foldOrder(job), (std::vector<qint64>{11, 12, 13}));

        // A retry of an update that was folded (a coordinator that crashed after its EXEC) is not folded
        // again.
        auto again = second.foldUpdate(job, 12, spec, updateFor(initial, 12), {});
        QVERIFY(again.ok());
        QVERIFY(again->alreadyFolded);
        QCOMPARE(again->version, 2);
        QCOMPARE(second.read(job)->value().version, 3);
    }

    void aRefusedFoldWritesNothing()
    {
        const qint64 job = m_nextJob++;
        auto connection = connect();
        SharedWeights shared(*connection);
        const TensorBundle initial = makeWeights(1'000, 6);
        SharedFoldState state;
        state.weights = initial;
        QVERIFY(shared.put(job, state, SharedWeights::Put::IfAbsent).ok());
        const AggregationSpec spec = rule(R"({"rule": "vc-asgd", "alpha": 0.5})");
        // A NaN upload: the fold's own check refuses it.
        TensorBundle hostile = initial;
        hostile.mutableValues<float>(hostile.entries().front())[7] = std::numeric_limits<float>::quiet_NaN();
        auto refused = shared.foldUpdate(job, 1, spec, hostile, {});
        QVERIFY(refused.ok());
        QVERIFY2(refused->refused.contains(u"NaN"), qPrintable(refused->refused));
        auto other = connect();
        SharedWeights reader(*other);
        auto read = reader.read(job);
        QCOMPARE((*read)->version, 0);
        QVERIFY(bitEqual((*read)->weights, initial));
        QVERIFY(reader.foldOrder(job)->empty());
    }

    void concurrentFoldsLoseNothing_data()
    {
        QTest::addColumn<QByteArray>("spec");
        // VC-ASGD's blend does not commute: a lost or reordered update changes the result.
        QTest::newRow("vc-asgd") << QByteArray(R"({"rule": "vc-asgd", "alpha": 0.5})");
        // A rule with state (a buffer of 3 and a momentum) that must travel with the weights.
        QTest::newRow("delayed-nesterov")
            << QByteArray(R"({"rule": "delayed-nesterov", "buffer": 3, "momentum": 0.9, "server_lr": 0.7})");
    }

    void concurrentFoldsLoseNothing()
    {
        QFETCH(QByteArray, spec);
        const auto conflicts = foldConcurrently(rule(spec.constData()), 4, 25);
        QVERIFY2(conflicts.ok(), qPrintable(conflicts.error()));
        // The clients did fold at the same time: some of their transactions had to be redone.
        QVERIFY2(*conflicts > 0, "no two folds overlapped: the test proved nothing");
        qInfo() << "folds redone after a conflict:" << *conflicts;
    }

    // A coordinator whose folds take long (a slow machine, a large model) against three fast ones folding the
    // same job without pause: optimistic transactions alone would let it lose every race; after a few lost
    // races it takes the job's fold lock and commits.
    void aSlowFolderIsNotStarved()
    {
        const qint64 job = m_nextJob++;
        auto main = connect();
        SharedWeights shared(*main);
        SharedFoldState start;
        start.weights = makeWeights(1'000, 9);
        QVERIFY(shared.put(job, start, SharedWeights::Put::IfAbsent).ok());
        auto bump = [](SharedFoldState& state) {
            state.weights.mutableValues<float>(state.weights.entries().front())[0] += 1.0f;
            return Status();
        };
        std::atomic<bool> done{false};
        std::atomic<int> fastFolds{0};
        std::vector<std::thread> fast;
        for (int c = 0; c < 3; ++c)
            fast.emplace_back([&, c] {
                auto connection = RedisConnection::open(m_redis.url());
                if (!connection)
                    return;
                SharedWeights mine(**connection);
                for (qint64 i = 1; !done; ++i)
                    if (mine.fold(job, (c + 1) * 1'000'000 + i, bump).ok())
                        ++fastFolds;
            });
        auto connection = connect();
        SharedWeights slow(*connection);
        int mostAttempts = 0;
        for (qint64 seq = 1; seq <= 3; ++seq) {
            auto folded = slow.fold(job, seq, [&](SharedFoldState& state) {
                std::this_thread::sleep_for(std::chrono::milliseconds(30));
                return bump(state);
            });
            QVERIFY2(folded.ok(), qPrintable(folded.error()));
            mostAttempts = std::max(mostAttempts, folded->attempts);
        }
        done = true;
        for (auto& thread : fast)
            thread.join();
        // It did lose races, and still folded all three; every fold of everyone is in the order once.
        QVERIFY2(mostAttempts > SharedWeights::kRacesBeforeLock, qPrintable(QString::number(mostAttempts)));
        auto order = shared.foldOrder(job);
        QVERIFY(order.ok());
        QCOMPARE(qsizetype(order->size()), qsizetype(fastFolds + 3));
        QCOMPARE(std::set<qint64>(order->begin(), order->end()).size(), order->size());
        auto final = shared.read(job);
        QCOMPARE(final->value().weights.values<float>(final->value().weights.entries().front())[0],
                 start.weights.values<float>(start.weights.entries().front())[0] + float(fastFolds + 3));
    }

    // The same check on what the paper's servers do: read the weights, fold, write them back, no guard.
    // Updates are lost, and the check sees it: the test above would catch a SharedWeights that did this.
    void unguardedReadModifyWriteLosesUpdates()
    {
        const QByteArray key = "gleaner:test:unguarded";
        const QByteArray orderKey = "gleaner:test:unguarded:order";
        const TensorBundle initial = makeWeights(20'000, 3);
        auto main = connect();
        QVERIFY(main->command({"SET", key, SafeTensors::serialize(initial)}).ok());
        const AggregationSpec spec = rule(R"({"rule": "vc-asgd", "alpha": 0.5})");
        std::vector<std::thread> threads;
        for (int c = 0; c < 4; ++c)
            threads.emplace_back([&, c] {
                auto connection = RedisConnection::open(m_redis.url());
                for (int i = 0; connection && i < 10; ++i) {
                    const qint64 seq = qint64(c) * 1000 + i + 1;
                    auto bytes = (*connection)->command({"GET", key});
                    if (!bytes)
                        return;
                    auto weights = SafeTensors::parse(bytes->text);
                    if (!weights)
                        return;
                    std::unique_ptr<AggregationRule> blend = AggregationRule::create(spec);
                    UpdateBound steps;
                    (void)WeightsKeeper::fold(*weights, blend, steps, updateFor(initial, seq), {}, true);
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                    (void)(*connection)->command({"SET", key, SafeTensors::serialize(*weights)});
                    (void)(*connection)->command({"RPUSH", orderKey, QByteArray::number(seq)});
                }
            });
        for (auto& thread : threads)
            thread.join();
        auto order = main->command({"LRANGE", orderKey, "0", "-1"});
        QCOMPARE(order->elements.size(), size_t(40));
        TensorBundle replayed = initial;
        std::unique_ptr<AggregationRule> blend = AggregationRule::create(spec);
        UpdateBound steps;
        for (const RedisReply& seq : order->elements)
            QVERIFY(WeightsKeeper::fold(replayed, blend, steps, updateFor(initial, seq.text.toLongLong()), {},
                                        true));
        auto stored = SafeTensors::parse(main->command({"GET", key})->text);
        QVERIFY(stored.ok());
        QVERIFY2(!bitEqual(replayed, *stored), "40 unguarded folds on 4 connections lost nothing this time");
    }

    void aLostConnectionIsOpenedAgain()
    {
        auto connection = connect();
        QVERIFY(connection->command({"PING"}).ok());
        // The server ends this client's connection, as a restart or an idle timeout would.
        auto id = connection->command({"CLIENT", "ID"});
        QVERIFY(id.ok());
        auto admin = connect();
        QVERIFY(admin->command({"CLIENT", "KILL", "ID", QByteArray::number(id->integer)}).ok());
        // The first command after it fails (it may have been carried out; it is not sent twice) ...
        auto lost = connection->command({"PING"});
        QVERIFY(!lost);
        QVERIFY2(lost.error().contains(QStringLiteral("127.0.0.1:%1").arg(m_redis.port())),
                 qPrintable(lost.error()));
        // ... and the next one connects again.
        auto back = connection->command({"PING"});
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QCOMPARE(back->text, QByteArray("PONG"));
    }
};

QTEST_GUILESS_MAIN(TestSharedWeights)
#include "TestSharedWeights.moc"
