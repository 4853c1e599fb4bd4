// gleaner-worker's training throughput against a bare gleaner_ml loop on the same model, shard and thread count:
// what the worker's hooks, progress events, priority and result file cost. Both run as fresh processes, timed
// from start to exit, alternately for R rounds; prints medians and their ratio as JSON (goal: 97% or more).
//   bench_worker [--rounds R] [--samples N] [--threads T] [--quick]
#include "format/SafeTensors.h"
#include "ml/Model.h"
#include "ml/Trainer.h"
#include "ml/data/DatasetLoader.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTextStream>

#include <algorithm>

using namespace gleaner;

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_worker [--rounds R] [--samples N] [--threads T] [--quick]\n";
        return 0;
    }
    const auto option = [&](const char* name, int fallback) { return bench::intOption(args, name, fallback); };
    // The bare loop runs in a fresh process too, like the worker: both pay the same cold start (library loading,
    // oneDNN primitive creation, allocator warm-up), so the ratio measures what the worker adds.
    if (const auto at = args.indexOf(QStringLiteral("--bare-child")); at >= 0) {
        const QString dir = args.value(at + 1);
        auto weights = SafeTensors::load(dir + QStringLiteral("/weights.safetensors"));
        auto bundle = SafeTensors::load(dir + QStringLiteral("/shard.safetensors"));
        if (!weights || !bundle)
            return bench::failBench("bench_worker", QStringLiteral("cannot read the task folder"));
        auto shard = ml::Dataset::fromBundle(std::move(*bundle), dir);
        if (!shard)
            return bench::failBench("bench_worker", shard.error());
        ml::TrainRequest request;
        request.batchSize = 32;
        request.seed = 5;
        request.threads = option("--threads", 2);
        request.checkpointIntervalSeconds = 0;
        QElapsedTimer timer;
        timer.start();
        auto outcome = ml::Trainer::train(request, *weights, *shard);
        if (!outcome)
            return bench::failBench("bench_worker", outcome.error());
        QTextStream(stdout) << double(outcome->samples) / (double(timer.nsecsElapsed()) / 1e9) << "\n";
        return 0;
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int rounds = option("--rounds", quick ? 1 : 5);
    const int samples = option("--samples", quick ? 256 : 2000);
    const int threads = option("--threads", 2);

    // A Fashion-MNIST shard and the default cnn, as the demo's subtasks are.
    auto data = ml::loadDataset(DatasetSpec{}, samples);
    if (!data)
        return bench::failBench("bench_worker", data.error());
    QTemporaryDir task;
    ModelSpec model; // cnn 1x28x28, 10 classes
    auto net = ml::Model::create(model, 1);
    if (!net || !SafeTensors::save(task.filePath(QStringLiteral("weights.safetensors")), net->weights())
        || !SafeTensors::save(task.filePath(QStringLiteral("shard.safetensors")), data->train.bundle()))
        return bench::failBench("bench_worker", QStringLiteral("cannot write the task folder"));
    OptimizerSpec optimizer;
    const QJsonObject hyper{{QStringLiteral("local_epochs"), 1}, {QStringLiteral("batch_size"), 32},
                            {QStringLiteral("optimizer"), optimizer.toJson()}, {QStringLiteral("seed"), 5}};
    QFile manifest(task.filePath(QStringLiteral("manifest.json")));
    if (!manifest.open(QIODevice::WriteOnly))
        return bench::failBench("bench_worker", QStringLiteral("cannot write the manifest"));
    manifest.write(QJsonDocument(QJsonObject{{QStringLiteral("base_version"), 0},
                                             {QStringLiteral("nonce"), QStringLiteral("0123456789abcdef0123456789abcdef")},
                                             {QStringLiteral("model"), model.toJson()},
                                             {QStringLiteral("hyperparameters"), hyper}})
                       .toJson());
    manifest.close();

    std::vector<double> bare, worker, workerTrain;
    for (int round = 0; round < rounds; ++round) {
        QProcess bareChild;
        QElapsedTimer bareTimer;
        bareTimer.start();
        bareChild.start(QCoreApplication::applicationFilePath(),
                        {QStringLiteral("--bare-child"), task.path(), QStringLiteral("--threads"), QString::number(threads)});
        if (!bareChild.waitForFinished(600'000) || bareChild.exitCode() != 0)
            return bench::failBench("bench_worker", QStringLiteral("the bare loop failed: %1").arg(QString::fromUtf8(bareChild.readAllStandardError())));
        // Whole process to whole process: start-up, reading the task and training, on both sides.
        const double bareWall = double(bareTimer.nsecsElapsed()) / 1e9;
        bare.push_back(double(data->train.size()) / bareWall);

        QElapsedTimer timer;
        QProcess process;
        timer.start();
        process.start(QStringLiteral(GLEANER_WORKER_BIN),
                      {QStringLiteral("--task"), task.path(), QStringLiteral("--threads"), QString::number(threads),
                       QStringLiteral("--checkpoint-interval"), QStringLiteral("0")});
        // stdin stays open, as the agent keeps it: its end would mean "checkpoint and stop".
        if (!process.waitForFinished(600'000))
            return bench::failBench("bench_worker", QStringLiteral("gleaner-worker did not finish"));
        const double wall = double(timer.nsecsElapsed()) / 1e9;
        QJsonObject done;
        for (const QByteArray& line : process.readAllStandardOutput().split('\n'))
            if (QJsonDocument::fromJson(line).object().value(QStringLiteral("event")).toString() == u"done")
                done = QJsonDocument::fromJson(line).object();
        if (done.isEmpty())
            return bench::failBench("bench_worker", QStringLiteral("gleaner-worker ended without a result (exit %1)").arg(process.exitCode()));
        worker.push_back(double(done.value(QStringLiteral("samples")).toInteger()) / wall);
        workerTrain.push_back(double(done.value(QStringLiteral("samples")).toInteger())
                              / done.value(QStringLiteral("train_seconds")).toDouble());
    }

    QJsonObject out;
    out.insert(QStringLiteral("rounds"), rounds);
    out.insert(QStringLiteral("samples"), samples);
    out.insert(QStringLiteral("threads"), threads);
    out.insert(QStringLiteral("bare_samples_per_s_wall"), bench::median(bare));
    out.insert(QStringLiteral("worker_samples_per_s_wall"), bench::median(worker));
    out.insert(QStringLiteral("worker_samples_per_s_training"), bench::median(workerTrain));
    out.insert(QStringLiteral("ratio_wall"), bench::median(worker) / bench::median(bare));

    out.insert(QStringLiteral("goal_ratio"), 0.97);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return 0;
}
