// Importing an image-folder dataset of Fashion-MNIST's size: Fashion-MNIST written out as one 28x28 grayscale
// PNG per sample (DIR/train/<class>/, DIR/test/<class>/), then imported in a fresh process as the coordinator
// imports it (TrainingImport: streamed into 100 shards; --in-memory: loadDataset, the whole set in memory), timed,
// with its peak resident memory (/proc/self/status; getrusage where that peak cannot be reset). Prints JSON:
// seconds, images per second, the peak and what the samples themselves take, so a regression in decoding
// speed or in memory shows as a number.
//   bench_image_import [--train N] [--test M] [--rounds R] [--in-memory] [--quick]
#include "ml/data/DatasetLoader.h"
#include "ml/data/TrainingImport.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTextStream>

#include <sys/resource.h>

using namespace gleaner;

namespace {

// Fashion-MNIST's classes by label, as folder names.
const QStringList& classNames()
{
    static const QStringList names{QStringLiteral("t-shirt"),  QStringLiteral("trouser"),
                                   QStringLiteral("pullover"), QStringLiteral("dress"),
                                   QStringLiteral("coat"),     QStringLiteral("sandal"),
                                   QStringLiteral("shirt"),    QStringLiteral("sneaker"),
                                   QStringLiteral("bag"),      QStringLiteral("ankle-boot")};
    return names;
}

// Writes the first `count` samples of `data` as PNGs under dir/<class>/.
bool writeImages(const ml::Dataset& data, qint64 count, const QString& dir)
{
    for (const QString& name : classNames())
        if (!QDir().mkpath(dir + QLatin1Char('/') + name))
            return false;
    const auto pixels = data.bundle().values<quint8>(data.x());
    for (qint64 i = 0; i < std::min(count, data.size()); ++i) {
        const QImage image(pixels.data() + i * 28 * 28, 28, 28, 28, QImage::Format_Grayscale8);
        const QString path = QStringLiteral("%1/%2/%3.png")
                                 .arg(dir, classNames().at(data.label(i)))
                                 .arg(i, 5, 10, QLatin1Char('0'));
        if (!image.save(path))
            return false;
    }
    return true;
}

// The measured part, in a process of its own so the peak is the import's alone.
int importChild(const QString& dir, bool inMemory)
{
    const bool reset = bench::resetPeak();
    const double before = bench::statusMiB("VmRSS");
    DatasetSpec spec;
    spec.format = DatasetSpec::Format::Images;
    spec.dir = dir;
    QElapsedTimer timer;
    timer.start();
    qint64 train = 0, test = 0;
    if (inMemory) {
        auto split = ml::loadDataset(spec, std::nullopt, {1, 28, 28});
        if (!split)
            return bench::failBench("bench_image_import", split.error());
        train = split->train.size();
        test = split->test.size();
    } else {
        QTemporaryDir shards;
        auto import = ml::TrainingImport::open(spec, std::nullopt, {1, 28, 28});
        if (!import)
            return bench::failBench("bench_image_import", import.error());
        auto written = import->writeShards(100, 7, shards.path());
        if (!written)
            return bench::failBench("bench_image_import", written.error());
        train = import->trainSize();
        test = import->test().size();
    }
    const double seconds = double(timer.nsecsElapsed()) / 1e9;
    const QJsonObject out{{QStringLiteral("seconds"), seconds},
                          {QStringLiteral("train"), train},
                          {QStringLiteral("test"), test},
                          {QStringLiteral("rss_before_mib"), before},
                          // Without the reset only the whole process's peak (getrusage) is known.
                          {QStringLiteral("peak_rss_mib"), reset ? bench::statusMiB("VmHWM") : bench::peakRssMiB()},
                          {QStringLiteral("peak_is_the_imports"), reset}};
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Compact) << "\n";
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_image_import [--train N] [--test M] [--rounds R] [--in-memory] [--quick]\n";
        return 0;
    }
    if (const auto at = args.indexOf(QStringLiteral("--import-child")); at >= 0)
        return importChild(args.value(at + 1), args.contains(QStringLiteral("--in-memory")));
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int trainCount = bench::intOption(args, "--train", quick ? 600 : 60000);
    const int testCount = bench::intOption(args, "--test", quick ? 100 : 10000);
    const int rounds = bench::intOption(args, "--rounds", quick ? 1 : 3);
    const bool inMemory = args.contains(QStringLiteral("--in-memory"));

    DatasetSpec fashion; // Debian's dataset-fashion-mnist
    auto source = ml::loadDataset(fashion);
    if (!source)
        return bench::failBench("bench_image_import", source.error());
    QTemporaryDir dir;
    QElapsedTimer writing;
    writing.start();
    if (!dir.isValid() || !writeImages(source->train, trainCount, dir.filePath(QStringLiteral("train"))) ||
        !writeImages(source->test, testCount, dir.filePath(QStringLiteral("test"))))
        return bench::failBench("bench_image_import",
                                QStringLiteral("cannot write the images into %1").arg(dir.path()));
    const double writeSeconds = double(writing.nsecsElapsed()) / 1e9;

    std::vector<double> seconds, peaks;
    QJsonObject last;
    for (int round = 0; round < rounds; ++round) {
        QProcess child;
        QStringList childArgs{QStringLiteral("--import-child"), dir.path()};
        if (inMemory)
            childArgs << QStringLiteral("--in-memory");
        child.start(QCoreApplication::applicationFilePath(), childArgs);
        if (!child.waitForFinished(600'000) || child.exitCode() != 0)
            return bench::failBench(
                "bench_image_import",
                QStringLiteral("the import failed: %1").arg(QString::fromUtf8(child.readAllStandardError())));
        last = QJsonDocument::fromJson(child.readAllStandardOutput().trimmed()).object();
        seconds.push_back(last.value(QStringLiteral("seconds")).toDouble());
        peaks.push_back(last.value(QStringLiteral("peak_rss_mib")).toDouble());
    }
    const qint64 images =
        last.value(QStringLiteral("train")).toInteger() + last.value(QStringLiteral("test")).toInteger();
    const double sampleMiB = double(images) * 28 * 28 / (1024.0 * 1024.0);
    QJsonObject out;
    out.insert(QStringLiteral("mode"), inMemory ? QStringLiteral("in-memory") : QStringLiteral("streamed"));
    out.insert(QStringLiteral("rounds"), rounds);
    out.insert(QStringLiteral("images"), images);
    out.insert(QStringLiteral("write_seconds"), writeSeconds);
    out.insert(QStringLiteral("import_seconds"), bench::median(seconds));
    out.insert(QStringLiteral("images_per_second"), double(images) / bench::median(seconds));
    // The peak while importing, of a process that links the dataset library (libtorch included); less the
    // resident size before, what the import itself took, against the floor of the samples' own bytes.
    const double before = last.value(QStringLiteral("rss_before_mib")).toDouble();
    out.insert(QStringLiteral("peak_rss_mib"), bench::median(peaks));
    out.insert(QStringLiteral("rss_before_import_mib"), before);
    out.insert(QStringLiteral("import_peak_added_mib"), bench::median(peaks) - before);
    out.insert(QStringLiteral("samples_mib"), sampleMiB);
    out.insert(QStringLiteral("peak_is_the_imports"),
               last.value(QStringLiteral("peak_is_the_imports")).toBool());
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return 0;
}
