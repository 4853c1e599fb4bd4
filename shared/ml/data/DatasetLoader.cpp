#include "ml/data/DatasetLoader.h"

#include "format/SafeTensors.h"
#include "ml/data/Cifar10Reader.h"
#include "ml/data/CsvReader.h"
#include "ml/data/IdxReader.h"
#include "ml/data/ImageFolderReader.h"
#include "ml/data/Normalization.h"
#include "ml/data/NumPyReader.h"

#include <QDir>
#include <QFileInfo>

#include <algorithm>
#include <cmath>
#include <random>

namespace gleaner::ml {
namespace {

Result<DatasetSplit> loadFashionMnist(const QString& dirPath)
{
    auto files = fashionMnistFiles(dirPath);
    if (!files)
        return fail(files.error());
    auto train = Idx::importPair(files->trainImages, files->trainLabels);
    if (!train)
        return fail(train.error());
    auto test = Idx::importPair(files->testImages, files->testLabels);
    if (!test)
        return fail(test.error());
    return DatasetSplit{std::move(*train), std::move(*test)};
}

} // namespace

Result<FashionMnistFiles> fashionMnistFiles(const QString& dirPath)
{
    const QDir dir(dirPath.isEmpty() ? DatasetSpec::defaultFashionMnistDir() : dirPath);
    if (!dir.exists())
        return fail(QStringLiteral("%1: Fashion-MNIST folder does not exist; install Debian's "
                                   "dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or "
                                   "set dataset.dir")
                        .arg(dir.path()));
    // Fashion-MNIST ships as gzip files in Debian's package; an unpacked copy works too.
    const auto idxFile = [&dir](const char* stem) {
        const QString name = QLatin1StringView(stem);
        const QString gz = dir.filePath(name + QStringLiteral(".gz"));
        return QFileInfo::exists(gz) ? gz : dir.filePath(name);
    };
    return FashionMnistFiles{idxFile("train-images-idx3-ubyte"), idxFile("train-labels-idx1-ubyte"),
                             idxFile("t10k-images-idx3-ubyte"), idxFile("t10k-labels-idx1-ubyte")};
}

Result<Dataset> loadSafeTensors(const QString& path)
{
    auto bundle = SafeTensors::load(path);
    if (!bundle)
        return fail(bundle.error());
    return Dataset::fromBundle(std::move(*bundle), path);
}

Result<Dataset> datasetFromArrays(const TensorBundle& arrays, const QString& xName, const QString& yName,
                                  const QString& what)
{
    const TensorEntry* x = arrays.find(xName);
    const TensorEntry* y = arrays.find(yName);
    if (!x || !y) {
        QStringList held;
        for (const TensorEntry& entry : arrays.entries())
            held << entry.name;
        return fail(QStringLiteral("%1 holds no array \"%2\" (it holds %3); it needs \"%4\" and \"%5\"")
                        .arg(what, !x ? xName : yName, held.isEmpty() ? QStringLiteral("none") : held.join(QStringLiteral(", ")),
                             xName, yName));
    }
    TensorBundle bundle;
    if (x->dtype == DType::F64) {
        const auto values = arrays.values<double>(*x);
        char* out = bundle.addZeroed(QStringLiteral("x"), DType::F32, x->shape);
        if (!out)
            return fail(QStringLiteral("%1: \"%2\" has a shape Gleaner cannot hold").arg(what, xName));
        auto* floats = reinterpret_cast<float*>(out);
        for (size_t i = 0; i < values.size(); ++i)
            floats[i] = float(values[i]);
    } else if (x->dtype == DType::U8 || x->dtype == DType::F32) {
        if (auto added = bundle.add(QStringLiteral("x"), x->dtype, x->shape, arrays.data(*x)); !added)
            return fail(QStringLiteral("%1: %2").arg(what, added.error()));
    } else {
        return fail(QStringLiteral("%1: \"%2\" is %3; samples must be uint8, float32 or float64 (x.astype(np.float32))")
                        .arg(what, xName, dtypeName(x->dtype)));
    }
    if (auto added = bundle.add(QStringLiteral("y"), y->dtype, y->shape, arrays.data(*y)); !added)
        return fail(QStringLiteral("%1: %2").arg(what, added.error()));
    return Dataset::fromBundle(std::move(bundle), what);
}

namespace {

Result<Dataset> loadNpzPair(const QString& path)
{
    auto arrays = NumPy::loadNpz(path);
    if (!arrays)
        return fail(arrays.error());
    return datasetFromArrays(*arrays, QStringLiteral("x"), QStringLiteral("y"), path);
}

// The spec's "train" and "test" files, each read by `load`; without "test" (test_fraction) the test set is held
// out of the training set afterwards.
Result<DatasetSplit> trainAndTest(const DatasetSpec& spec, Result<Dataset> (*load)(const QString&))
{
    auto train = load(spec.train);
    if (!train)
        return fail(train.error());
    if (spec.test.isEmpty())
        return DatasetSplit{std::move(*train), {}};
    auto test = load(spec.test);
    if (!test)
        return fail(test.error());
    return DatasetSplit{std::move(*train), std::move(*test)};
}

// An image folder decoded to the model's input.
Result<DatasetSplit> loadImages(const DatasetSpec& spec, const QList<qint64>& inputShape)
{
    auto options = imageOptions(spec, inputShape);
    if (!options)
        return fail(options.error());
    auto folder = ImageFolder::read(spec.dir, *options);
    if (!folder)
        return fail(folder.error());
    if (Status split = checkImageSplit(spec, folder->hasTestSplit); !split)
        return fail(split.error());
    DatasetSplit split = std::move(folder->split);
    split.notes = imageNotes(spec, *folder, split.train.size(), split.test.size(), inputShape);
    return split;
}

Result<DatasetSplit> loadAny(const DatasetSpec& spec, const QList<qint64>& inputShape)
{
    switch (spec.format) {
    case DatasetSpec::Format::FashionMnist:
        return loadFashionMnist(spec.dir);
    case DatasetSpec::Format::Idx: {
        auto train = Idx::importPair(spec.trainImages, spec.trainLabels);
        if (!train)
            return fail(train.error());
        auto test = Idx::importPair(spec.testImages, spec.testLabels);
        if (!test)
            return fail(test.error());
        return DatasetSplit{std::move(*train), std::move(*test)};
    }
    case DatasetSpec::Format::Cifar10:
        return Cifar10::importDirectory(spec.dir);
    case DatasetSpec::Format::SafeTensors:
        return trainAndTest(spec, loadSafeTensors);
    case DatasetSpec::Format::Npz: {
        if (!spec.file.isEmpty()) {
            auto arrays = NumPy::loadNpz(spec.file);
            if (!arrays)
                return fail(arrays.error());
            auto train = datasetFromArrays(*arrays, QStringLiteral("x_train"), QStringLiteral("y_train"), spec.file);
            if (!train)
                return fail(train.error());
            auto test = datasetFromArrays(*arrays, QStringLiteral("x_test"), QStringLiteral("y_test"), spec.file);
            if (!test)
                return fail(test.error());
            return DatasetSplit{std::move(*train), std::move(*test)};
        }
        return trainAndTest(spec, loadNpzPair);
    }
    case DatasetSpec::Format::Csv:
        return Csv::readPair(spec.train, spec.test, spec.label);
    case DatasetSpec::Format::Images:
        return loadImages(spec, inputShape);
    }
    return fail(QStringLiteral("unknown dataset format"));
}

} // namespace

Result<ImageFolder::Options> imageOptions(const DatasetSpec& spec, const QList<qint64>& inputShape)
{
    const auto side = [](qint64 pixels) { return pixels >= 1 && pixels <= 4096; };
    if (inputShape.size() != 3 || (inputShape[0] != 1 && inputShape[0] != 3) || !side(inputShape[1]) ||
        !side(inputShape[2]))
        return fail(QStringLiteral("format \"images\" decodes every image to the model's input_shape, which must be "
                                   "[C, H, W] with C 1 (grayscale) or 3 (RGB) and H, W 1..4096, not %1")
                        .arg(shapeToString(inputShape)));
    ImageFolder::Options options;
    options.channels = inputShape[0];
    options.height = inputShape[1];
    options.width = inputShape[2];
    options.stopAtBadFile = spec.stopOnBadFile;
    return options;
}

Status checkImageSplit(const DatasetSpec& spec, bool hasTestSplit)
{
    // Its own test/ split, or test_fraction's hold-out, never both and never neither.
    if (hasTestSplit && spec.testFraction > 0)
        return fail(QStringLiteral("%1 holds its own test/ folder; remove dataset.test_fraction, or move the test "
                                   "images into train/")
                        .arg(spec.dir));
    if (!hasTestSplit && spec.testFraction == 0)
        return fail(QStringLiteral("%1 has no test/ folder to validate with; add one beside train/ "
                                   "(%1/train/<class>/, %1/test/<class>/), or set dataset.test_fraction to hold a "
                                   "share of the images out")
                        .arg(spec.dir));
    return {};
}

QStringList imageNotes(const DatasetSpec& spec, const ImageFolder::Folder& folder, qint64 trainImages,
                       qint64 testImages, const QList<qint64>& inputShape)
{
    QStringList notes;
    // Paths and folder names may hold "%": every message is built in one arg() pass.
    QStringList labels;
    for (qsizetype i = 0; i < folder.classes.size(); ++i)
        labels << QString::number(i) + QLatin1Char(' ') + folder.classes[i];
    notes << QStringLiteral("%1: %2 classes (labels %3); %4 images%5, each decoded to %6")
                 .arg(spec.dir, QString::number(folder.classes.size()), labels.join(QStringLiteral(", ")),
                      QString::number(trainImages),
                      folder.hasTestSplit ? QStringLiteral(" in train/ and %1 in test/").arg(testImages) : QString(),
                      shapeToString(inputShape));
    if (!folder.leftOut.isEmpty()) {
        // The first few by name; every one is in the log.
        constexpr qsizetype kShown = 10;
        const qsizetype shown = std::min(kShown, folder.leftOut.size());
        const qsizetype more = folder.leftOut.size() - shown;
        notes << QStringLiteral("%1: %2 bad files left out (on_bad_file \"skip\"): %3%4")
                     .arg(spec.dir, QString::number(folder.leftOut.size()),
                          folder.leftOut.first(shown).join(QStringLiteral("; ")),
                          more > 0 ? QStringLiteral("; and %1 more in the log").arg(more) : QString());
    }
    return notes;
}

Result<HeldOut> holdOutIndices(qint64 n, double fraction, quint64 seed, const QString& what)
{
    const qint64 held = qint64(std::llround(double(n) * fraction));
    if (held < 1 || held >= n)
        return fail(QStringLiteral("%1: test_fraction %2 of %3 samples leaves no test or no training set")
                        .arg(what)
                        .arg(fraction)
                        .arg(n));
    // Fisher-Yates over a standard engine's raw output: the same file and seed give the same split on every
    // machine and library (std::shuffle's algorithm is the library's choice).
    std::vector<qint64> order(static_cast<size_t>(n));
    for (qint64 i = 0; i < n; ++i)
        order[size_t(i)] = i;
    std::mt19937_64 engine(seed);
    for (qint64 i = n - 1; i > 0; --i)
        std::swap(order[size_t(i)], order[size_t(engine() % quint64(i + 1))]);
    std::vector<qint64> test(order.begin(), order.begin() + held);
    std::vector<qint64> train(order.begin() + held, order.end());
    std::sort(test.begin(), test.end()); // keep the file's order within each set
    std::sort(train.begin(), train.end());
    return HeldOut{std::move(train), std::move(test)};
}

Result<DatasetSplit> holdOut(Dataset all, double fraction, quint64 seed, const QString& what)
{
    auto held = holdOutIndices(all.size(), fraction, seed, what);
    if (!held)
        return fail(held.error());
    return DatasetSplit{all.select(held->train), all.select(held->test)};
}

Result<DatasetSplit> loadDataset(const DatasetSpec& spec, std::optional<qint64> limitTrain,
                                 const QList<qint64>& inputShape)
{
    auto split = loadAny(spec, inputShape);
    if (!split)
        return split;
    if (spec.testFraction > 0) {
        const QString source = spec.format == DatasetSpec::Format::Images ? spec.dir : spec.train;
        auto held = holdOut(std::move(split->train), spec.testFraction, quint64(spec.splitSeed), source);
        if (!held)
            return fail(held.error());
        split->train = std::move(held->train);
        split->test = std::move(held->test);
    }
    if (split->train.sampleShape() != split->test.sampleShape())
        return fail(
            QStringLiteral("training samples have shape %1 but test samples %2; both sets must match")
                .arg(shapeToString(split->train.sampleShape()), shapeToString(split->test.sampleShape())));
    if (limitTrain)
        split->train = split->train.head(*limitTrain);
    if (!spec.normalizeMean.isEmpty()) {
        for (Dataset* set : {&split->train, &split->test}) {
            auto normalized = normalize(*set, spec.normalizeMean, spec.normalizeStd);
            if (!normalized)
                return fail(normalized.error());
            *set = std::move(*normalized);
        }
    }
    return split;
}

} // namespace gleaner::ml
