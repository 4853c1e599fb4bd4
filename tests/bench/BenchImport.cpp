// The coordinator's import of a training set (TrainingImport: labels first, then the samples streamed into their
// shards), timed, with its peak resident memory measured in a fresh process per import, so that no import is
// charged with another's pages. Prints JSON: per dataset the seconds, the peak (VmHWM, reset when the child
// starts; getrusage's ru_maxrss too, which Linux carries over exec from the parent), the training bytes and
// peak / training bytes; and, over datasets of growing size, how the peak grows with the
// training set (MiB of peak per GiB of samples) and what that gives for a dataset twice this machine's memory.
//   bench_import [JOB.json] [--times 1,4,8] [--dir /var/tmp] [--shards N] [--in-memory] [--quick]
// With a job spec, that job's dataset is imported (its shards, seed, limit_train and input_shape). Without one,
// Fashion-MNIST (Debian's dataset-fashion-mnist) is written into a temporary folder under --dir as a stored
// and a deflated .npz, and as IDX files holding it 1, 4 and 8 times over (--times); all removed afterwards.
// --in-memory imports the same way as before streaming (loadDataset + Shards::write), for comparison.
#include "ml/data/DatasetLoader.h"
#include "ml/data/ShardWriter.h"
#include "ml/data/TrainingImport.h"
#include "spec/JobSpec.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTextStream>

#include <sys/resource.h>
#include <zlib.h>

using namespace gleaner;

namespace {

constexpr const char* kName = "bench_import";

double memTotalMiB()
{
    QFile file(QStringLiteral("/proc/meminfo"));
    if (!file.open(QIODevice::ReadOnly))
        return 0;
    for (const QByteArray& line : file.readAll().split('\n'))
        if (line.startsWith("MemTotal:"))
            return line.mid(9).trimmed().split(' ').value(0).toDouble() / 1024.0;
    return 0;
}

bool writeFile(const QString& path, const QList<QByteArray>& parts)
{
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return false;
    for (const QByteArray& part : parts)
        if (file.write(part) != part.size())
            return false;
    return file.flush();
}

QByteArray idxHeader(const QList<qint64>& shape)
{
    QByteArray out("\x00\x00\x08", 3);
    out += char(shape.size());
    for (qint64 d : shape)
        for (int b = 3; b >= 0; --b)
            out += char((d >> (8 * b)) & 0xff);
    return out;
}

QByteArray npy(const char* descr, const QList<qint64>& shape, QByteArrayView data)
{
    QStringList dims;
    for (qint64 d : shape)
        dims << QString::number(d);
    QByteArray text = QStringLiteral("{'descr': '%1', 'fortran_order': False, 'shape': (%2%3), }")
                          .arg(QLatin1StringView(descr), dims.join(QStringLiteral(", ")),
                               shape.size() == 1 ? QStringLiteral(",") : QString())
                          .toLatin1();
    while ((10 + text.size() + 1) % 64 != 0)
        text += ' ';
    text += '\n';
    QByteArray out("\x93NUMPY\x01\x00", 8);
    out += char(text.size() & 0xff);
    out += char(text.size() >> 8);
    return out + text + data.toByteArray();
}

void le(QByteArray& out, quint64 value, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        out += char((value >> (8 * i)) & 0xff);
}

QByteArray rawDeflate(const QByteArray& data)
{
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    QByteArray out(qsizetype(deflateBound(&z, uLong(data.size()))), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.constData()));
    z.avail_in = uInt(data.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    deflate(&z, Z_FINISH);
    out.truncate(qsizetype(z.total_out));
    deflateEnd(&z);
    return out;
}

// A .npz as np.savez (stored) or np.savez_compressed (deflated) writes it.
QByteArray npz(const QList<std::pair<QByteArray, QByteArray>>& members, bool deflated)
{
    QByteArray out, directory;
    for (const auto& [name, data] : members) {
        const QByteArray packed = deflated ? rawDeflate(data) : data;
        const quint32 crc = quint32(crc32(0, reinterpret_cast<const Bytef*>(data.constData()), uInt(data.size())));
        const qint64 at = out.size();
        for (QByteArray* header : {&out, &directory}) {
            const bool central = header == &directory;
            le(*header, central ? 0x02014b50 : 0x04034b50, 4);
            if (central)
                le(*header, 20, 2);
            le(*header, 20, 2);
            le(*header, 0, 2);
            le(*header, deflated ? 8 : 0, 2);
            le(*header, 0, 4);
            le(*header, crc, 4);
            le(*header, quint64(packed.size()), 4);
            le(*header, quint64(data.size()), 4);
            le(*header, quint64(name.size()), 2);
            le(*header, 0, 2);
            if (central) {
                le(*header, 0, 2);
                le(*header, 0, 2);
                le(*header, 0, 2);
                le(*header, 0, 4);
                le(*header, quint64(at), 4);
            }
            *header += name;
        }
        out += packed;
    }
    const qint64 directoryAt = out.size();
    out += directory;
    le(out, 0x06054b50, 4);
    le(out, 0, 4);
    le(out, quint64(members.size()), 2);
    le(out, quint64(members.size()), 2);
    le(out, quint64(directory.size()), 4);
    le(out, quint64(directoryAt), 4);
    le(out, 0, 2);
    return out;
}

// The measured part, in a process of its own: import the dataset of `specPath` into `shardDir`.
int importChild(const QString& specPath, const QString& shardDir, bool inMemory, int shards)
{
    QFile file(specPath);
    if (!file.open(QIODevice::ReadOnly))
        return bench::failBench(kName, QStringLiteral("%1: cannot read").arg(specPath));
    const QByteArray text = file.readAll();
    const QJsonObject json = QJsonDocument::fromJson(text).object();
    DatasetSpec dataset;
    std::optional<qint64> limit;
    QList<qint64> inputShape;
    quint64 seed = 1;
    if (json.contains(QStringLiteral("dataset"))) {
        auto job = JobSpec::fromJsonText(text);
        if (!job)
            return bench::failBench(kName, job.error());
        dataset = job->dataset;
        limit = job->limitTrain;
        inputShape = job->model.inputShape;
        seed = quint64(job->seed);
        if (shards <= 0)
            shards = job->shards;
    } else {
        auto parsed = DatasetSpec::fromJson(json);
        if (!parsed)
            return bench::failBench(kName, parsed.error());
        dataset = *parsed;
    }
    if (shards <= 0)
        shards = 100;
    const bool reset = bench::resetPeak();
    const double before = bench::statusMiB("VmRSS");
    QElapsedTimer timer;
    timer.start();
    qint64 trainBytes = 0, samples = 0;
    if (inMemory) {
        auto split = ml::loadDataset(dataset, limit, inputShape);
        if (!split)
            return bench::failBench(kName, split.error());
        auto files = ml::Shards::write(split->train, shards, seed, shardDir);
        if (!files)
            return bench::failBench(kName, files.error());
        trainBytes = split->train.x().byteSize;
        samples = split->train.size();
    } else {
        auto import = ml::TrainingImport::open(dataset, limit, inputShape);
        if (!import)
            return bench::failBench(kName, import.error());
        auto files = import->writeShards(shards, seed, shardDir);
        if (!files)
            return bench::failBench(kName, files.error());
        trainBytes = import->trainBytes();
        samples = import->trainSize();
    }
    const double seconds = double(timer.nsecsElapsed()) / 1e9;
    const double peak = reset ? bench::statusMiB("VmHWM") : bench::peakRssMiB();
    const QJsonObject out{{QStringLiteral("seconds"), seconds},
                          {QStringLiteral("ru_maxrss_mib"), bench::peakRssMiB()},
                          {QStringLiteral("peak_is_the_imports"), reset},
                          {QStringLiteral("samples"), samples},
                          {QStringLiteral("train_bytes"), trainBytes},
                          {QStringLiteral("rss_before_mib"), before},
                          {QStringLiteral("peak_rss_mib"), peak},
                          // What the import added to the resident size it started from (the libraries').
                          {QStringLiteral("import_added_mib"), peak - before},
                          {QStringLiteral("peak_over_train_bytes"), peak * 1024 * 1024 / double(std::max<qint64>(trainBytes, 1))}};
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Compact) << "\n";
    return 0;
}

// One import in a fresh child process; its JSON with the dataset's name added.
std::optional<QJsonObject> measure(const QString& name, const QString& specPath, const QString& workDir, bool inMemory,
                                   int shards)
{
    const QString shardDir = QDir(workDir).filePath(QStringLiteral("shards"));
    QStringList args{QStringLiteral("--child"), specPath, shardDir, QStringLiteral("--shards"), QString::number(shards)};
    if (inMemory)
        args << QStringLiteral("--in-memory");
    QProcess child;
    child.start(QCoreApplication::applicationFilePath(), args);
    const bool done = child.waitForFinished(1800'000);
    QDir(shardDir).removeRecursively();
    if (!done || child.exitCode() != 0) {
        bench::failBench(kName, QStringLiteral("%1: the import failed: %2").arg(name, QString::fromUtf8(child.readAllStandardError())));
        return std::nullopt;
    }
    QJsonObject out = QJsonDocument::fromJson(child.readAllStandardOutput().trimmed()).object();
    out.insert(QStringLiteral("dataset"), name);
    out.insert(QStringLiteral("mode"), inMemory ? QStringLiteral("in-memory") : QStringLiteral("streamed"));
    QTextStream(stderr) << QJsonDocument(out).toJson(QJsonDocument::Compact) << "\n";
    return out;
}

bool writeSpec(const QString& path, const QJsonObject& spec)
{
    return writeFile(path, {QJsonDocument(spec).toJson()});
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_import [JOB.json] [--times 1,4,8] [--dir /var/tmp] [--shards N] "
                               "[--in-memory] [--quick]\n";
        return 0;
    }
    const bool inMemory = args.contains(QStringLiteral("--in-memory"));
    const int shards = bench::intOption(args, "--shards", 0);
    if (const auto at = args.indexOf(QStringLiteral("--child")); at >= 0)
        return importChild(args.value(at + 1), args.value(at + 2), inMemory, shards);
    const bool quick = args.contains(QStringLiteral("--quick"));
    const auto dirAt = args.indexOf(QStringLiteral("--dir"));
    const QString base = dirAt >= 0 ? args.value(dirAt + 1) : QStringLiteral("/var/tmp");
    QTemporaryDir work(QDir(base).filePath(QStringLiteral("bench-import-XXXXXX")));
    if (!work.isValid())
        return bench::failBench(kName, QStringLiteral("cannot make a folder in %1").arg(base));

    QJsonArray results;
    QString jobSpec;
    for (qsizetype i = 1; i < args.size(); ++i) {
        if (args[i].startsWith(QStringLiteral("--"))) {
            if (args[i] == QStringLiteral("--times") || args[i] == QStringLiteral("--dir") || args[i] == QStringLiteral("--shards"))
                ++i;
            continue;
        }
        jobSpec = args[i];
    }
    if (!jobSpec.isEmpty()) {
        auto result = measure(jobSpec, jobSpec, work.path(), inMemory, shards);
        if (!result)
            return 1;
        QTextStream(stdout) << QJsonDocument(*result).toJson(QJsonDocument::Indented);
        return 0;
    }

    // Fashion-MNIST, or its first 2,000 samples with --quick.
    auto fashion = ml::loadDataset(DatasetSpec{});
    if (!fashion)
        return bench::failBench(kName, fashion.error());
    const ml::Dataset train = quick ? fashion->train.head(2000) : fashion->train;
    const ml::Dataset& test = fashion->test;
    const qint64 n = train.size();
    const QByteArray x = train.bundle().data(train.x()).toByteArray();
    QByteArray y(qsizetype(n), Qt::Uninitialized);
    for (qint64 i = 0; i < n; ++i)
        y[qsizetype(i)] = char(train.label(i));
    const QString testImages = work.filePath(QStringLiteral("t10k-images"));
    const QString testLabels = work.filePath(QStringLiteral("t10k-labels"));
    {
        QByteArray testY(qsizetype(test.size()), Qt::Uninitialized);
        for (qint64 i = 0; i < test.size(); ++i)
            testY[qsizetype(i)] = char(test.label(i));
        if (!writeFile(testImages, {idxHeader({test.size(), 28, 28}), test.bundle().data(test.x()).toByteArray()}) ||
            !writeFile(testLabels, {idxHeader({test.size()}), testY}))
            return bench::failBench(kName, QStringLiteral("cannot write into %1").arg(work.path()));
    }
    const int importShards = shards > 0 ? shards : (quick ? 10 : 100);

    // .npz, stored and deflated, of the training set once.
    std::vector<qint64> labels64(static_cast<size_t>(n));
    for (qint64 i = 0; i < n; ++i)
        labels64[size_t(i)] = train.label(i);
    const QByteArray yNpy = npy("<i8", {n}, QByteArrayView(reinterpret_cast<const char*>(labels64.data()), qsizetype(n * 8)));
    for (const bool deflated : {false, true}) {
        const QString name = deflated ? QStringLiteral("npz-deflated-1x") : QStringLiteral("npz-stored-1x");
        const QString file = work.filePath(name + QStringLiteral(".npz"));
        const QString testFile = work.filePath(name + QStringLiteral("-test.npz"));
        if (!writeFile(file, {npz({{"x.npy", npy("|u1", {n, 1, 28, 28}, x)}, {"y.npy", yNpy}}, deflated)}) ||
            !writeFile(testFile, {npz({{"x.npy", npy("|u1", {10, 1, 28, 28}, x.left(10 * 784))},
                                       {"y.npy", npy("|u1", {10}, y.left(10))}},
                                      false)}))
            return bench::failBench(kName, QStringLiteral("cannot write into %1").arg(work.path()));
        const QString spec = work.filePath(name + QStringLiteral(".json"));
        writeSpec(spec, {{QStringLiteral("format"), QStringLiteral("npz")}, {QStringLiteral("train"), file},
                         {QStringLiteral("test"), testFile}});
        auto result = measure(name, spec, work.path(), inMemory, importShards);
        QFile::remove(file);
        if (!result)
            return 1;
        results.append(*result);
    }

    // IDX of the training set repeated `times` times.
    QList<int> times;
    const auto timesAt = args.indexOf(QStringLiteral("--times"));
    for (const QString& t : (timesAt >= 0 ? args.value(timesAt + 1) : QStringLiteral("1,4,8")).split(u','))
        if (t.toInt() > 0)
            times << t.toInt();
    if (quick)
        times = {1, 2};
    QList<std::pair<double, double>> points; // (GiB of samples, MiB of peak)
    for (int k : std::as_const(times)) {
        const QString name = QStringLiteral("idx-%1x").arg(k);
        const QString images = work.filePath(name + QStringLiteral("-images"));
        const QString labels = work.filePath(name + QStringLiteral("-labels"));
        QList<QByteArray> imageParts{idxHeader({n * k, 28, 28})}, labelParts{idxHeader({n * k})};
        for (int r = 0; r < k; ++r) {
            imageParts << x;
            labelParts << y;
        }
        if (!writeFile(images, imageParts) || !writeFile(labels, labelParts))
            return bench::failBench(kName, QStringLiteral("cannot write into %1").arg(work.path()));
        imageParts.clear();
        const QString spec = work.filePath(name + QStringLiteral(".json"));
        writeSpec(spec, {{QStringLiteral("format"), QStringLiteral("idx")}, {QStringLiteral("train_images"), images},
                         {QStringLiteral("train_labels"), labels}, {QStringLiteral("test_images"), testImages},
                         {QStringLiteral("test_labels"), testLabels}});
        auto result = measure(name, spec, work.path(), inMemory, importShards);
        QFile::remove(images);
        QFile::remove(labels);
        if (!result)
            return 1;
        results.append(*result);
        points.append({result->value(QStringLiteral("train_bytes")).toDouble() / double(1 << 30),
                       result->value(QStringLiteral("peak_rss_mib")).toDouble()});
    }

    QJsonObject out{{QStringLiteral("imports"), results}, {QStringLiteral("shards"), importShards}};
    if (points.size() >= 2) {
        // Least squares: peak = intercept + slope * GiB of training samples.
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (const auto& [gib, mib] : std::as_const(points)) {
            sx += gib;
            sy += mib;
            sxx += gib * gib;
            sxy += gib * mib;
        }
        const double count = double(points.size());
        const double slope = (count * sxy - sx * sy) / (count * sxx - sx * sx);
        const double intercept = (sy - slope * sx) / count;
        const double twiceMemoryGiB = 2 * memTotalMiB() / 1024.0;
        out.insert(QStringLiteral("peak_mib_per_train_gib"), slope);
        out.insert(QStringLiteral("peak_mib_at_zero"), intercept);
        out.insert(QStringLiteral("machine_memory_gib"), memTotalMiB() / 1024.0);
        out.insert(QStringLiteral("train_gib_twice_memory"), twiceMemoryGiB);
        out.insert(QStringLiteral("predicted_peak_mib_twice_memory"), intercept + slope * twiceMemoryGiB);
    }
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return 0;
}
