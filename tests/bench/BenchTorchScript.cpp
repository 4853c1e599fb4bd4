// The Trainer's throughput on a TorchScript program against the same network built by the zoo: the default job's
// cnn, scripted by tests/bench/zoo_cnn_torchscript.py with the zoo's tensor names, trained from the same weights on
// the same Fashion-MNIST samples with the same seed and thread count, alternately for R rounds. Prints the medians,
// their ratio (goal: 0.90 or more) and how far apart the two results lie (L2) as JSON.
//   bench_torchscript [--archive FILE] [--rounds R] [--samples N] [--threads T] [--quick]
// Without --archive it runs the script itself (Debian's python3-torch).
#include "ml/Model.h"
#include "ml/Trainer.h"
#include "ml/WeightMath.h"
#include "ml/data/Dataset.h"
#include "ml/data/IdxReader.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTextStream>

using namespace gleaner;

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_torchscript [--archive FILE] [--rounds R] [--samples N] [--threads T] "
                               "[--quick]\nFILE: written by /usr/bin/python3 tests/bench/zoo_cnn_torchscript.py FILE "
                               "(run here when --archive is not given)\n";
        return 0;
    }
    QTemporaryDir scratch;
    QString archive = args.value(args.indexOf(QStringLiteral("--archive")) + 1);
    if (!args.contains(QStringLiteral("--archive"))) {
        archive = scratch.filePath(QStringLiteral("cnn.pt"));
        QProcess python;
        python.start(QStringLiteral("/usr/bin/python3"), {QStringLiteral(GLEANER_ZOO_CNN_SCRIPT), archive});
        if (!python.waitForFinished(300'000) || python.exitCode() != 0)
            return bench::failBench("bench_torchscript",
                                    QStringLiteral("zoo_cnn_torchscript.py failed (is python3-torch installed?): ") +
                                        QString::fromUtf8(python.readAllStandardError()));
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int rounds = bench::intOption(args, "--rounds", quick ? 1 : 5);
    const qint64 samples = bench::intOption(args, "--samples", quick ? 256 : 6000);
    const int threads = bench::intOption(args, "--threads", 1);

    const QString dir = QStringLiteral("/usr/share/datasets/fashion-mnist/");
    auto data = ml::Idx::importPair(dir + QStringLiteral("train-images-idx3-ubyte.gz"),
                                    dir + QStringLiteral("train-labels-idx1-ubyte.gz"));
    if (!data)
        return bench::failBench("bench_torchscript", data.error());
    const ml::Dataset shard = data->head(samples);

    ml::TrainRequest zoo;
    zoo.model.arch = Architecture::Cnn;
    zoo.model.inputShape = {1, 28, 28};
    zoo.model.numClasses = 10;
    zoo.model.channels = {32, 64};
    zoo.model.hidden = {128};
    zoo.optimizer.kind = OptimizerSpec::Kind::Adam;
    zoo.optimizer.lr = 0.001;
    zoo.batchSize = 32;
    zoo.seed = 3;
    zoo.threads = threads;
    ml::TrainRequest script = zoo;
    script.model = ModelSpec{};
    script.model.arch = Architecture::TorchScript;
    script.model.torchscript = archive;
    script.model.inputShape = zoo.model.inputShape;
    script.model.numClasses = 10;

    auto start = ml::Model::create(zoo.model, 7);
    auto scripted = ml::Model::create(script.model, 7);
    if (!start || !scripted)
        return bench::failBench("bench_torchscript", start ? scripted.error() : start.error());
    const TensorBundle weights = start->weights();
    if (auto same = scripted->setWeights(weights); !same) // the same names: the same starting point
        return bench::failBench("bench_torchscript", QStringLiteral("the archive is not the zoo's cnn: ") + same.error());

    std::vector<double> zooRates, scriptRates;
    TensorBundle zooResult, scriptResult;
    for (int round = 0; round < rounds; ++round) {
        for (ml::TrainRequest* request : {&zoo, &script}) {
            QElapsedTimer timer;
            timer.start();
            auto outcome = ml::Trainer::train(*request, weights, shard);
            const double seconds = double(timer.nsecsElapsed()) / 1e9;
            if (!outcome)
                return bench::failBench("bench_torchscript", outcome.error());
            (request == &zoo ? zooRates : scriptRates).push_back(double(outcome->samples) / seconds);
            (request == &zoo ? zooResult : scriptResult) = outcome->weights;
        }
    }
    const double zooRate = bench::median(zooRates), scriptRate = bench::median(scriptRates);
    auto distance = ml::WeightMath::l2Distance(zooResult, scriptResult);
    QJsonObject json{{QStringLiteral("model"), QStringLiteral("cnn [32, 64] / [128], Fashion-MNIST")},
                     {QStringLiteral("samples"), samples},
                     {QStringLiteral("rounds"), rounds},
                     {QStringLiteral("threads"), threads},
                     {QStringLiteral("zoo_samples_per_second"), zooRate},
                     {QStringLiteral("torchscript_samples_per_second"), scriptRate},
                     {QStringLiteral("ratio"), scriptRate / zooRate},
                     {QStringLiteral("l2_distance_of_results"), distance ? QJsonValue(*distance) : QJsonValue()}};
    QTextStream(stdout) << QJsonDocument(json).toJson();
    return 0;
}
