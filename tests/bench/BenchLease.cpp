// Lease throughput of a deployment: C concurrent agents, each on its own kept-alive HTTPS connection on
// loopback, ask for one subtask after another for D seconds. Prints leases per second and the latency
// percentiles of a lease request as JSON. BOINC's published figure is about 100 dispatches per second.
//   bench_lease [--clients C] [--seconds D] [--shards S] [--database URL] [--coordinators P --redis URL]
//               [--results [--rule RULE]] [--publish-ms MS] [--lease-wait-ms MS] [--quick]
// --results: accepted updates per second. Each agent uploads a result for every lease it gets (PUT
// .../result, the whole weights of the paper's 4,972,746 parameters, 19.9 MB: an MLP 64-2096-2302-4) before
// it asks for the next, so each coordinator takes uploads, checks them, keeps them and folds them (VC-ASGD
// unless --rule names another), as for real agents. The agents fetch the weights once and upload them moved a
// little, so the figure is the coordinators' intake, not the agents' training or downloads. Validation is off
// (it would evaluate the 5 M-parameter model on the test set, a cost of its own). folded_per_second: the
// accepted updates the weights held when the agents stopped; below accepted_per_second when the folds fall
// behind the intake.
// --database: the coordinator's state in this PostgreSQL database (empty;
// installers/scale-out/local-postgres.sh createdb makes one) instead of gleaner.db. --coordinators P (with
// --database and --redis): P coordinators of one deployment in this process (init --shared-dir, then init
// --join), each with its own HTTPS server, the agents spread over them in turn as a load balancer would.
// Each coordinator ticks every 250 ms, as `serve` does (publications, parked leases' deadlines, expiries).
#include "api/ApiHandler.h"
#include "config/Initializer.h"
#include "core/Coordinator.h"
#include "format/SafeTensors.h"
#include "http/HttpServer.h"
#include "http/HttpsClient.h"
#include "ml/data/Dataset.h"
#include "store/Database.h"
#include "tensor/TensorBundle.h"
#include "util/Clock.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTextStream>
#include <QThread>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

using namespace gleaner;
using namespace gleaner::coordinator;

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout)
            << "usage: bench_lease [--clients C] [--seconds D] [--shards S] [--database URL]\n"
               "                   [--coordinators P --redis URL] [--results [--rule RULE]] [--publish-ms "
               "MS]\n"
               "                   [--lease-wait-ms MS] [--fold-backlog-mb MB] [--quick]\n"
               "Prints leases per second and lease latency (p50, p99) as JSON.\n"
               "  --results  every lease is answered with an uploaded result of 4,972,746 parameters: also\n"
               "             accepted updates per second and the upload's latency (p50, p99)\n"
               "  --rule     the job's aggregation rule with --results (default vc-asgd)\n"
               "  --publish-ms  the coordinators' publish_interval_ms (default 250)\n"
               "  --lease-wait-ms  the coordinators' lease_wait_for_own_update_ms (default 2000): how long "
               "an\n"
               "             agent's next lease waits for the publication of its own update; 0 answers at "
               "once\n"
               "  --fold-backlog-mb  the coordinators' fold_backlog_mb (default 1024): past it, updates not "
               "folded\n"
               "             yet hold new leases back, and the agents wait the retry_after they are told, as "
               "agents do;\n"
               "             0: no bound\n";
        return 0;
    }
    const auto option = [&](const char* name, int fallback) { return bench::intOption(args, name, fallback); };
    const bool quick = args.contains(QStringLiteral("--quick"));
    const bool results = args.contains(QStringLiteral("--results"));
    // Each agent uploading 20 MB holds two copies of it: a few dozen agents are what one machine's memory
    // holds.
    const int clients = option("--clients", quick ? (results ? 4 : 8) : (results ? 32 : 200));
    const int seconds = option("--seconds", quick ? (results ? 3 : 1) : (results ? 20 : 10));
    QString rule = QStringLiteral("vc-asgd");
    if (const qsizetype at = args.indexOf(QStringLiteral("--rule")); at >= 0)
        rule = args.value(at + 1);
    // The paper's 4,972,746 parameters: 64*2096 + 2096 + 2096*2302 + 2302 + 2302*4 + 4.
    const QString hidden = results && !quick ? QStringLiteral("[2096, 2302]") : QStringLiteral("[8]");
    const int shards = option("--shards", quick ? 200 : 10000);
    const int coordinators = option("--coordinators", 1);
    if (clients < 1 || seconds < 1 || shards < 1 || coordinators < 1)
        return bench::failBench("bench_lease",
                                QStringLiteral("--clients, --seconds, --shards and --coordinators "
                                               "must be positive"));

    QTemporaryDir scratch;
    const DataDirectory dir(scratch.filePath(QStringLiteral("data")));
    CoordinatorConfig config;
    config.openEnrollment = true;
    // Every simulated agent enrolls from 127.0.0.1 at once: lift the per-address enrollment rate.
    config.enrollBurst = std::max(config.enrollBurst, clients);
    config.listenPort = 0;
    if (results)
        config.validateEveryUpdates = 0; // at epoch ends only: none within a run
    config.publishIntervalMs = option("--publish-ms", config.publishIntervalMs);
    config.leaseWaitForOwnUpdateMs = option("--lease-wait-ms", config.leaseWaitForOwnUpdateMs);
    if (config.leaseWaitForOwnUpdateMs < 0 || config.leaseWaitForOwnUpdateMs > 60'000)
        return bench::failBench("bench_lease", QStringLiteral("--lease-wait-ms: expected 0 to 60000"));
    config.foldBacklogMb = option("--fold-backlog-mb", config.foldBacklogMb);
    if (config.foldBacklogMb < 0)
        return bench::failBench("bench_lease", QStringLiteral("--fold-backlog-mb: expected 0 or more"));
    if (const qsizetype at = args.indexOf(QStringLiteral("--database")); at >= 0) {
        config.database = args.value(at + 1);
        if (!Database::isPostgresUrl(config.database))
            return bench::failBench("bench_lease", QStringLiteral("--database: expected a postgresql:// URL"));
    }
    if (const qsizetype at = args.indexOf(QStringLiteral("--redis")); at >= 0)
        config.redis = args.value(at + 1);
    if (coordinators > 1) {
        if (config.database.isEmpty() || config.redis.isEmpty())
            return bench::failBench("bench_lease",
                                    QStringLiteral("--coordinators needs --database and --redis"));
        config.sharedDir = scratch.filePath(QStringLiteral("shared"));
    }
    auto created = initializeDataDirectory(dir, config);
    if (!created)
        return bench::failBench("bench_lease", created.error());
    std::vector<DataDirectory> dirs{dir};
    for (int i = 1; i < coordinators; ++i) {
        dirs.emplace_back(scratch.filePath(QStringLiteral("data-%1").arg(i + 1)));
        if (auto joined = joinDeployment(dirs.back(), dir, QStringLiteral("127.0.0.1:0")); !joined)
            return bench::failBench("bench_lease", joined.error());
    }

    // One sample per shard: the benchmark is about dispatch, not data.
    QByteArray pixels(qsizetype(shards) * 64, '\0');
    std::vector<qint64> labels(static_cast<size_t>(shards));
    for (int i = 0; i < shards; ++i)
        labels[size_t(i)] = i % 4;
    auto data = ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("bench"));
    const QString train = scratch.filePath(QStringLiteral("train.safetensors"));
    if (!data || !SafeTensors::save(train, data->bundle()))
        return bench::failBench("bench_lease", QStringLiteral("cannot write the dataset"));

    SystemClock clock;
    auto core = Coordinator::open(dir, config, clock);
    if (!core)
        return bench::failBench("bench_lease", core.error());
    HttpServerOptions options;
    options.certificatePath = dir.certificatePath();
    options.privateKeyPath = dir.tlsKeyPath();
    options.threads = std::max(2, QThread::idealThreadCount());
    options.maxConnectionsPerAddress =
        std::max(options.maxConnectionsPerAddress, clients + 8); // all from 127.0.0.1

    const QByteArray spec =
        QStringLiteral(R"({"name": "bench", "dataset": {"format": "safetensors", "train": "%1",
        "test": "%1"}, "model": {"arch": "mlp", "input_shape": [1, 8, 8], "num_classes": 4, "hidden": %3},
        "shards": %2, "optimizer": {"name": "adam", "lr": 0.01}, "aggregation": {"rule": "%4"},
        "target_accuracy": 0.99, "max_epochs": 100, "deadline_seconds": 3600})")
            .arg(train)
            .arg(shards)
            .arg(hidden, rule)
            .toUtf8();
    Coordinator* c = core->get();
    const HttpResponse submitted = c->state().call([&] { return c->jobs().submit(spec); });
    if (submitted.status >= 300)
        return bench::failBench("bench_lease", QString::fromUtf8(submitted.body));
    for (int i = 0; i < 600; ++i) {
        c->drain();
        const HttpResponse status = c->state().call([&] { return c->jobs().status(1); });
        if (QJsonDocument::fromJson(status.body).object().value(QStringLiteral("state")).toString() == u"running")
            break;
        QThread::msleep(50);
    }
    // The others start once the job runs: they take it up as it is, as a restart would.
    std::vector<std::unique_ptr<Coordinator>> cores;
    cores.push_back(std::move(*core));
    for (size_t i = 1; i < dirs.size(); ++i) {
        auto joined = dirs[i].loadConfig();
        auto other = joined ? Coordinator::open(dirs[i], *joined, clock)
                            : Result<std::unique_ptr<Coordinator>>(fail(joined.error()));
        if (!other)
            return bench::failBench("bench_lease", other.error());
        cores.push_back(std::move(*other));
    }
    std::vector<std::unique_ptr<ApiHandler>> handlers;
    std::vector<std::unique_ptr<HttpServer>> servers;
    for (size_t i = 0; i < cores.size(); ++i) {
        handlers.push_back(std::make_unique<ApiHandler>(*cores[i]));
        HttpServerOptions own = options;
        own.uploadDir = dirs[i].uploadsDir();
        servers.push_back(std::make_unique<HttpServer>(own, *handlers.back()));
        if (auto s = servers.back()->start(); !s)
            return bench::failBench("bench_lease", s.error());
    }

    std::atomic<bool> go{false};
    std::atomic<bool> stop{false};
    std::atomic<int> ready{0};
    std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
    std::vector<qint64> leased(static_cast<size_t>(clients), 0), failures(static_cast<size_t>(clients), 0);
    std::vector<qint64> heldBack(static_cast<size_t>(clients), 0);
    // --results: what the agents upload (fetched once), and how the uploads were answered.
    std::once_flag fetchOnce;
    TensorBundle uploaded;
    std::mutex resultsMutex;
    std::vector<double> resultLatencies;
    qint64 accepted = 0, refused = 0;
    QString firstRefusal;
    const auto fetchWeights = [&](HttpsClient& client, const QByteArray& token, const QString& sha) {
        auto file = client.request("GET", "/api/v1/files/" + sha.toLatin1(), {}, {}, {}, token);
        auto weights = file && file->status == 200
                           ? SafeTensors::parse(file->body)
                           : Result<TensorBundle>(fail(QStringLiteral("cannot fetch the weights")));
        if (!weights)
            return;
        // Moved a little, as a subtask would (far moves are refused).
        for (const auto& entry : weights->entries())
            for (float& value : weights->mutableValues<float>(entry))
                value += 1e-4f;
        uploaded = std::move(*weights);
    };
    const auto uploadResult = [&](HttpsClient& client, const QByteArray& token, const QJsonObject& task) {
        const QJsonObject manifest =
            QJsonDocument::fromJson(task.value(QStringLiteral("manifest")).toString().toUtf8()).object();
        const QString leaseId = task.value(QStringLiteral("lease_id")).toString();
        const QString weightsSha = manifest.value(QStringLiteral("files"))
                                       .toArray()
                                       .at(1)
                                       .toObject()
                                       .value(QStringLiteral("sha256"))
                                       .toString();
        std::call_once(fetchOnce, [&] { fetchWeights(client, token, weightsSha); });
        if (uploaded.entries().empty()) {
            const std::lock_guard lock(resultsMutex);
            if (++refused == 1)
                firstRefusal = QStringLiteral("the weights %1 could not be fetched and read").arg(weightsSha);
            return false;
        }
        TensorBundle result = uploaded; // shares the tensors; only the metadata is its own
        result.setMetadata(QStringLiteral("gleaner.nonce"),
                           manifest.value(QStringLiteral("nonce")).toString());
        result.setMetadata(QStringLiteral("gleaner.base_version"),
                           QString::number(manifest.value(QStringLiteral("base_version")).toInteger()));
        result.setMetadata(QStringLiteral("gleaner.samples"),
                           QString::number(manifest.value(QStringLiteral("subtask"))
                                               .toObject()
                                               .value(QStringLiteral("samples"))
                                               .toInteger()));
        result.setMetadata(QStringLiteral("gleaner.loss"), QStringLiteral("0.5"));
        const QByteArray body = SafeTensors::serialize(result);
        QElapsedTimer timer;
        timer.start();
        auto reply = client.request("PUT", "/api/v1/work/" + leaseId.toLatin1() + "/result", body,
                                    "application/octet-stream", {}, token);
        const double ms = double(timer.nsecsElapsed()) / 1e6;
        const std::lock_guard lock(resultsMutex);
        if (reply && reply->status == 202) {
            ++accepted;
            resultLatencies.push_back(ms);
            return true;
        }
        if (++refused == 1)
            firstRefusal =
                reply ? QStringLiteral("%1 %2").arg(reply->status).arg(QString::fromUtf8(reply->body))
                      : reply.error();
        return false;
    };
    std::vector<std::thread> threads;
    for (int k = 0; k < clients; ++k) {
        threads.emplace_back([&, k] {
            HttpsClient client(QStringLiteral("127.0.0.1"), servers[size_t(k) % servers.size()]->port(),
                               dir.certificatePath());
            auto enrolled = client.request("POST", "/api/v1/agents/enroll",
                                           QStringLiteral(R"({"name": "bench-%1"})").arg(k).toUtf8(), "application/json");
            const QByteArray token =
                enrolled ? QJsonDocument::fromJson(enrolled->body).object().value(QStringLiteral("agent_token")).toString().toLatin1()
                         : QByteArray();
            ++ready;
            while (!go)
                std::this_thread::yield();
            while (!stop) {
                QElapsedTimer timer;
                timer.start();
                auto reply = client.request("POST", "/api/v1/work/lease", R"({"max_tasks": 1})", "application/json", {}, token);
                const double ms = double(timer.nsecsElapsed()) / 1e6;
                if (!reply || reply->status != 200) {
                    ++failures[size_t(k)];
                    continue;
                }
                const QJsonObject answer = QJsonDocument::fromJson(reply->body).object();
                if (!answer.contains(QStringLiteral("held_back"))) // the lease latency: grants and "no work"
                    latencies[size_t(k)].push_back(ms);
                const QJsonArray tasks = answer.value(QStringLiteral("tasks")).toArray();
                leased[size_t(k)] += tasks.size();
                if (answer.contains(QStringLiteral("held_back"))) {
                    // Held back while the folds catch up: the agent waits what it is told, as agents do.
                    ++heldBack[size_t(k)];
                    const auto until = std::chrono::steady_clock::now() +
                                       std::chrono::seconds(
                                           std::max(1, answer.value(QStringLiteral("retry_after")).toInt()));
                    while (!stop && std::chrono::steady_clock::now() < until)
                        std::this_thread::sleep_for(std::chrono::milliseconds(20));
                    continue;
                }
                if (!results)
                    continue;
                if (tasks.isEmpty())
                    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // as an agent waits for work
                for (const QJsonValue& task : tasks)
                    if (!stop)
                        uploadResult(client, token, task.toObject());
            }
        });
    }
    // Each coordinator's tick every 250 ms, one queued at a time, as `serve` runs it: the publication
    // interval, the parked leases' deadlines, expiries, snapshots and the housekeeping happen during the run
    // as they would.
    constexpr int kTickMs = 250;
    std::atomic<bool> ticking{true};
    std::vector<std::unique_ptr<std::atomic<bool>>> tickQueued;
    for (size_t i = 0; i < cores.size(); ++i)
        tickQueued.push_back(std::make_unique<std::atomic<bool>>(false));
    std::thread ticker([&] {
        while (ticking) {
            for (size_t i = 0; i < cores.size(); ++i) {
                Coordinator* core = cores[i].get();
                std::atomic<bool>* queued = tickQueued[i].get();
                if (!queued->exchange(true))
                    core->state().post([core, queued] {
                        core->tick();
                        *queued = false;
                    });
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
        }
    });
    while (ready < clients)
        QThread::msleep(10);
    QElapsedTimer wall;
    wall.start();
    go = true;
    QThread::msleep(ulong(seconds) * 1000);
    stop = true;
    for (auto& t : threads)
        t.join();
    const double elapsed = double(wall.nsecsElapsed()) / 1e9;
    // --results: how many of the accepted updates the weights hold by now (the job's version: every fold, at
    // whichever coordinator). An intake the folds do not keep up with shows as updates accepted, not folded.
    qint64 folded = 0;
    if (results)
        for (auto& coordinator : cores) {
            Coordinator* each = coordinator.get();
            const HttpResponse status = each->state().call([&] { return each->jobs().status(1); });
            folded = std::max(
                folded,
                QJsonDocument::fromJson(status.body).object().value(QStringLiteral("version")).toInteger());
        }
    ticking = false;
    ticker.join();
    for (const auto& queued : tickQueued)
        while (*queued)
            QThread::msleep(5);

    std::vector<double> all;
    qint64 total = 0, failed = 0, held = 0;
    for (int k = 0; k < clients; ++k) {
        all.insert(all.end(), latencies[size_t(k)].begin(), latencies[size_t(k)].end());
        total += leased[size_t(k)];
        failed += failures[size_t(k)];
        held += heldBack[size_t(k)];
    }
    for (auto& server : servers)
        server->stop();
    for (auto& coordinator : cores)
        coordinator->shutdown();

    QJsonObject out;
    out.insert(QStringLiteral("clients"), clients);
    out.insert(QStringLiteral("coordinators"), coordinators);
    out.insert(QStringLiteral("seconds"), elapsed);
    out.insert(QStringLiteral("requests"), qint64(all.size()));
    out.insert(QStringLiteral("leases"), total);
    out.insert(QStringLiteral("failed_requests"), failed);
    out.insert(QStringLiteral("leases_per_second"), double(total) / elapsed);
    out.insert(QStringLiteral("p50_ms"), bench::percentile(all, 0.50));
    out.insert(QStringLiteral("p99_ms"), bench::percentile(all, 0.99));
    if (results) {
        out.insert(QStringLiteral("parameters"), uploaded.parameterCount());
        out.insert(QStringLiteral("rule"), rule);
        out.insert(QStringLiteral("results_accepted"), accepted);
        out.insert(QStringLiteral("results_refused"), refused);
        if (!firstRefusal.isEmpty())
            out.insert(QStringLiteral("first_refusal"), firstRefusal.left(300));
        out.insert(QStringLiteral("accepted_per_second"), double(accepted) / elapsed);
        out.insert(QStringLiteral("folded_per_second"), double(folded) / elapsed);
        out.insert(QStringLiteral("accepted_not_folded_at_end"), accepted - folded);
        out.insert(QStringLiteral("result_p50_ms"), bench::percentile(resultLatencies, 0.50));
        out.insert(QStringLiteral("result_p99_ms"), bench::percentile(resultLatencies, 0.99));
    }
    out.insert(QStringLiteral("tick_ms"), kTickMs);
    out.insert(QStringLiteral("publish_interval_ms"), config.publishIntervalMs);
    out.insert(QStringLiteral("lease_wait_for_own_update_ms"), config.leaseWaitForOwnUpdateMs);
    out.insert(QStringLiteral("fold_backlog_mb"), config.foldBacklogMb);
    out.insert(QStringLiteral("lease_requests_held_back"), held);
    out.insert(QStringLiteral("server_threads"), options.threads);
    out.insert(QStringLiteral("database"), config.database.isEmpty() ? QStringLiteral("sqlite") : QStringLiteral("postgresql"));
    out.insert(QStringLiteral("boinc_dispatch_per_second"), 100);
    out.insert(QStringLiteral("goal_per_second"), 1000);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return total > 0 && (!results || accepted > 0) ? 0 : 1;
}
