#include "ml/data/DatasetLoader.h"

#include "format/SafeTensors.h"
#include "ml/data/Cifar10Reader.h"
#include "ml/data/IdxReader.h"

#include <QDir>
#include <QFileInfo>

namespace gleaner::ml {
namespace {

// Fashion-MNIST ships as gzip files in Debian's package; an unpacked copy works too.
QString idxFile(const QDir& dir, const QString& stem)
{
    const QString gz = dir.filePath(stem + QStringLiteral(".gz"));
    return QFileInfo::exists(gz) ? gz : dir.filePath(stem);
}

Result<DatasetSplit> loadFashionMnist(const QString& dirPath)
{
    const QDir dir(dirPath.isEmpty() ? DatasetSpec::defaultFashionMnistDir() : dirPath);
    if (!dir.exists())
        return fail(QStringLiteral("%1: Fashion-MNIST folder does not exist; install Debian's "
                                   "dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or "
                                   "set dataset.dir")
                        .arg(dir.path()));
    auto train = Idx::importPair(idxFile(dir, QStringLiteral("train-images-idx3-ubyte")),
                                 idxFile(dir, QStringLiteral("train-labels-idx1-ubyte")));
    if (!train)
        return fail(train.error());
    auto test = Idx::importPair(idxFile(dir, QStringLiteral("t10k-images-idx3-ubyte")),
                                idxFile(dir, QStringLiteral("t10k-labels-idx1-ubyte")));
    if (!test)
        return fail(test.error());
    return DatasetSplit{std::move(*train), std::move(*test)};
}

Result<Dataset> loadSafeTensors(const QString& path)
{
    auto bundle = SafeTensors::load(path);
    if (!bundle)
        return fail(bundle.error());
    return Dataset::fromBundle(std::move(*bundle), path);
}

Result<DatasetSplit> loadAny(const DatasetSpec& spec)
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
    case DatasetSpec::Format::SafeTensors: {
        auto train = loadSafeTensors(spec.train);
        if (!train)
            return fail(train.error());
        auto test = loadSafeTensors(spec.test);
        if (!test)
            return fail(test.error());
        return DatasetSplit{std::move(*train), std::move(*test)};
    }
    }
    return fail(QStringLiteral("unknown dataset format"));
}

} // namespace

Result<DatasetSplit> loadDataset(const DatasetSpec& spec, std::optional<qint64> limitTrain)
{
    auto split = loadAny(spec);
    if (!split)
        return split;
    if (split->train.sampleShape() != split->test.sampleShape())
        return fail(
            QStringLiteral("training samples have shape %1 but test samples %2; both sets must match")
                .arg(shapeToString(split->train.sampleShape()), shapeToString(split->test.sampleShape())));
    if (limitTrain)
        split->train = split->train.head(*limitTrain);
    return split;
}

} // namespace gleaner::ml
