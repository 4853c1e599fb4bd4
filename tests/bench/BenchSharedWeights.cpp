// The per-update cost of folding into server weights shared through Redis (aggregation/SharedWeights), at the
// paper's 4,972,746 parameters, against the same fold in one process's memory. Prints one JSON object; times
// are milliseconds.
//   bench_shared_weights [--params N] [--updates K] [--folders "1 2 4"] [--rule vc-asgd|delayed-nesterov]
//                        [--redis URL] [--quick]
// - local: WeightsKeeper::fold alone (what one coordinator does without Redis).
// - warm: one client folds K updates in a row (it holds the version it wrote, so it reads only the meta).
// - cold: two clients take turns (each fold first reads the other's result).
// - concurrent: P clients, each on its own connection and thread, fold K updates each at once: updates per
//   second, latency per fold (retries included) and folds redone per update.
// Without --redis it starts a Redis of its own on loopback (tests/support/RedisServer), without persistence.
// The paper measured 870 ms per update through Redis; the goal is under 50 ms.
#include "aggregation/SharedWeights.h"
#include "aggregation/UpdateBound.h"
#include "aggregation/WeightsKeeper.h"
#include "store/RedisConnection.h"

#include "BenchSupport.h"
#include "SyntheticWeights.h"
#include "RedisServer.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTextStream>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

constexpr const char* kProgram = "bench_shared_weights";

using bench::makeWeights;

// Plausible uploads: the weights moved by a little noise of their own (far moves are refused by the bound).
std::vector<TensorBundle> makeUpdates(const TensorBundle& weights, int count)
{
    std::vector<TensorBundle> updates;
    for (int u = 0; u < count; ++u) {
        TensorBundle update = weights;
        const TensorBundle noise = makeWeights(weights.parameterCount(), quint32(100 + u), 1.0f);
        for (const auto& entry : update.entries()) {
            auto values = update.mutableValues<float>(entry);
            const auto delta = noise.values<float>(*noise.find(entry.name));
            for (size_t k = 0; k < values.size(); ++k)
                values[k] += 0.001f * delta[k];
        }
        updates.push_back(std::move(update));
    }
    return updates;
}

double ms(const QElapsedTimer& timer)
{
    return double(timer.nsecsElapsed()) / 1e6;
}

QJsonObject stats(const std::vector<double>& times)
{
    return {{QStringLiteral("median_ms"), bench::median(times)},
            {QStringLiteral("p95_ms"), bench::percentile(times, 0.95)},
            {QStringLiteral("folds"), int(times.size())}};
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout)
            << "usage: bench_shared_weights [--params N] [--updates K] [--folders \"1 2 4\"]\n"
               "                            [--rule vc-asgd|delayed-nesterov] [--redis URL] [--quick]\n"
               "Prints the per-update cost of folds into weights shared through Redis as JSON (see the "
               "source's\n"
               "head for what each figure is). Without --redis it starts a Redis of its own on loopback.\n";
        return 0;
    }
    qint64 params = 4972746;
    int updates = bench::intOption(args, "--updates", 30);
    if (const auto at = args.indexOf(QStringLiteral("--params")); at >= 0)
        params = args.value(at + 1).toLongLong();
    QList<int> folders{1, 2, 4};
    if (const auto at = args.indexOf(QStringLiteral("--folders")); at >= 0) {
        folders.clear();
        for (const QString& word : args.value(at + 1).split(u' ', Qt::SkipEmptyParts))
            folders << word.toInt();
    }
    const QString ruleName = args.indexOf(QStringLiteral("--rule")) >= 0
                                 ? args.value(args.indexOf(QStringLiteral("--rule")) + 1)
                                 : QStringLiteral("vc-asgd");
    if (args.contains(QStringLiteral("--quick"))) {
        params = 100000;
        updates = 3;
        folders = {1, 2};
    }
    if (params < 100 || updates < 1 || folders.isEmpty() ||
        std::any_of(folders.begin(), folders.end(), [](int p) { return p < 1 || p > 64; }))
        return bench::failBench(kProgram,
                                QStringLiteral("--params must be at least 100, --updates positive and "
                                               "--folders between 1 and 64"));
    const QJsonObject ruleJson =
        ruleName == QLatin1StringView("vc-asgd")
            ? QJsonObject{{QStringLiteral("rule"), ruleName}, {QStringLiteral("alpha"), 0.5}}
            : QJsonObject{{QStringLiteral("rule"), ruleName}};
    auto spec = AggregationSpec::fromJson(ruleJson, QStringLiteral("--rule"));
    if (!spec)
        return bench::failBench(kProgram, spec.error());

    test::RedisServer server;
    QString url = args.indexOf(QStringLiteral("--redis")) >= 0
                      ? args.value(args.indexOf(QStringLiteral("--redis")) + 1)
                      : QString();
    if (url.isEmpty()) {
        if (const QString why = server.start(); !why.isEmpty())
            return bench::failBench(kProgram, why);
        url = server.url();
    }
    auto open = [&]() -> std::unique_ptr<RedisConnection> {
        auto connection = RedisConnection::open(url);
        if (!connection) {
            bench::failBench(kProgram, connection.error());
            std::exit(1);
        }
        return std::move(*connection);
    };

    const TensorBundle initial = makeWeights(params, 1, 0.1f);
    const std::vector<TensorBundle> uploads = makeUpdates(initial, 4);
    UpdateContext context;
    context.base = &initial;
    qint64 nextJob =
        QRandomGenerator::global()->bounded(1'000'000) * 1000; // keys of our own on a shared Redis
    auto freshJob = [&](SharedWeights& shared) {
        const qint64 job = ++nextJob;
        SharedFoldState start;
        start.weights = initial;
        if (auto put = shared.put(job, start, SharedWeights::Put::Always); !put) {
            bench::failBench(kProgram, put.error());
            std::exit(1);
        }
        return job;
    };
    auto foldOne = [&](SharedWeights& shared, qint64 job, qint64 seq, std::vector<double>& times) {
        QElapsedTimer timer;
        timer.start();
        auto folded = shared.foldUpdate(job, seq, *spec, uploads[size_t(seq) % uploads.size()], context);
        if (!folded || !folded->refused.isEmpty()) {
            bench::failBench(kProgram, folded ? folded->refused : folded.error());
            std::exit(1);
        }
        times.push_back(ms(timer));
    };

    // In one process's memory.
    std::vector<double> local;
    {
        TensorBundle weights = initial;
        std::unique_ptr<AggregationRule> rule = AggregationRule::create(*spec);
        UpdateBound steps;
        for (int i = 0; i < updates; ++i) {
            UpdateContext c = context;
            c.serverVersion = i;
            QElapsedTimer timer;
            timer.start();
            if (auto s =
                    WeightsKeeper::fold(weights, rule, steps, uploads[size_t(i) % uploads.size()], c, false);
                !s)
                return bench::failBench(kProgram, s.error());
            local.push_back(ms(timer));
        }
    }

    auto a = open();
    auto b = open();
    SharedWeights first(*a);
    SharedWeights second(*b);
    std::vector<double> warm;
    {
        const qint64 job = freshJob(first);
        for (int i = 0; i < updates; ++i)
            foldOne(first, job, i + 1, warm);
        (void)first.remove(job);
    }
    std::vector<double> cold;
    {
        const qint64 job = freshJob(first);
        for (int i = 0; i < updates; ++i)
            foldOne(i % 2 ? first : second, job, i + 1, cold);
        (void)first.remove(job);
    }

    QJsonArray concurrent;
    for (int p : folders) {
        const qint64 job = freshJob(first);
        std::mutex lock;
        std::vector<double> times;
        std::atomic<qint64> conflicts{0};
        QElapsedTimer wall;
        wall.start();
        std::vector<std::thread> threads;
        for (int t = 0; t < p; ++t)
            threads.emplace_back([&, t] {
                auto connection = open();
                SharedWeights mine(*connection);
                std::vector<double> own;
                for (int i = 0; i < updates; ++i)
                    foldOne(mine, job, qint64(t) * 100000 + i + 1, own);
                conflicts += mine.conflicts();
                std::lock_guard guard(lock);
                times.insert(times.end(), own.begin(), own.end());
            });
        for (auto& thread : threads)
            thread.join();
        const double seconds = ms(wall) / 1000.0;
        QJsonObject row = stats(times);
        row.insert(QStringLiteral("clients"), p);
        row.insert(QStringLiteral("updates_per_second"), double(times.size()) / seconds);
        row.insert(QStringLiteral("redone_per_update"), double(conflicts) / double(times.size()));
        concurrent.append(row);
        (void)first.remove(job);
    }

    const QJsonObject out{
        {QStringLiteral("params"), double(params)},
        {QStringLiteral("bytes"), double(initial.tensorBytes())},
        {QStringLiteral("rule"), ruleName},
        {QStringLiteral("updates"), updates},
        {QStringLiteral("local"), stats(local)},
        {QStringLiteral("warm"), stats(warm)},
        {QStringLiteral("cold"), stats(cold)},
        {QStringLiteral("concurrent"), concurrent},
        {QStringLiteral("paper_redis_ms"), 870},
        {QStringLiteral("goal_ms"), 50},
        {QStringLiteral("hardware_threads"), int(std::thread::hardware_concurrency())},
    };
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return 0;
}
