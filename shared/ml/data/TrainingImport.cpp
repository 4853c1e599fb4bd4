#include "ml/data/TrainingImport.h"

#include "format/ByteStream.h"
#include "format/SafeTensors.h"
#include "ml/data/Cifar10Reader.h"
#include "ml/data/CsvReader.h"
#include "ml/data/DatasetLoader.h"
#include "ml/data/IdxReader.h"
#include "ml/data/NumPyReader.h"
#include "ml/data/ShardFileWriter.h"

#include <QFile>

#include <algorithm>

namespace gleaner::ml {
namespace {

// A safetensors training file: its header and labels when opened, its samples read at their offset.
class SafeTensorsSource final : public SampleSource
{
public:
    static Result<std::unique_ptr<SampleSource>> open(const QString& path)
    {
        auto header = SafeTensors::loadHeader(path);
        if (!header)
            return fail(header.error());
        const auto find = [&](QStringView name) -> const TensorEntry* {
            for (const TensorEntry& entry : header->entries)
                if (entry.name == name)
                    return &entry;
            return nullptr;
        };
        const TensorEntry* x = find(u"x");
        const TensorEntry* y = find(u"y");
        if (Status layout = Dataset::checkLayout(x, y, path); !layout)
            return fail(layout.error());
        QFile file(path);
        QByteArray raw;
        if (!file.open(QIODevice::ReadOnly) || !file.seek(y->offset) || (raw = file.read(y->byteSize)).size() != y->byteSize)
            return fail(QStringLiteral("%1: read failed: %2").arg(path, file.errorString()));
        auto labels = Dataset::labelsFrom(y->dtype, raw, path);
        if (!labels)
            return fail(labels.error());
        std::unique_ptr<SafeTensorsSource> source(new SafeTensorsSource(path, *x));
        source->m_labels = std::move(*labels);
        return std::unique_ptr<SampleSource>(std::move(source));
    }

    Status readSamples(const Sink& sink) override
    {
        auto stream = ByteStream::open(m_path, m_x.offset, m_x.byteSize, ByteStream::Coding::Plain);
        if (!stream)
            return fail(stream.error());
        const qint64 stride = sampleBytes();
        if (stride == 0) { // samples of no values
            for (qint64 index = 0; index < size(); ++index)
                if (Status taken = sink(index, {}); !taken)
                    return taken;
            return {};
        }
        const qint64 perChunk = std::max<qint64>(1, ByteStream::kChunkBytes / stride);
        QByteArray chunk(qsizetype(perChunk * stride), Qt::Uninitialized);
        for (qint64 index = 0; index < size();) {
            const qint64 want = std::min(perChunk, size() - index) * stride;
            auto got = (*stream)->read(chunk.data(), want);
            if (!got || *got != want)
                return fail(QStringLiteral("%1: %2").arg(m_path, got ? QStringLiteral("the file ended early") : got.error()));
            for (qint64 at = 0; at < want; at += stride)
                if (Status taken = sink(index++, QByteArrayView(chunk.constData() + at, stride)); !taken)
                    return taken;
        }
        return {};
    }

private:
    SafeTensorsSource(QString path, TensorEntry x) : m_path(std::move(path)), m_x(std::move(x))
    {
        m_sampleShape = m_x.shape.mid(1);
        m_sampleType = m_x.dtype;
    }

    QString m_path;
    TensorEntry m_x;
};

struct Opened
{
    std::unique_ptr<SampleSource> train;
    Dataset test;
    QStringList notes;
};

Result<Opened> fromIdx(const QString& trainImages, const QString& trainLabels, const QString& testImages,
                       const QString& testLabels)
{
    auto train = Idx::openSource(trainImages, trainLabels);
    if (!train)
        return fail(train.error());
    auto test = Idx::importPair(testImages, testLabels);
    if (!test)
        return fail(test.error());
    return Opened{std::move(*train), std::move(*test), {}};
}

// The training file by `open`, and the spec's "test" file by `load` unless test_fraction holds it out.
Result<Opened> trainAndTest(Result<std::unique_ptr<SampleSource>> train, const QString& testPath,
                            Result<Dataset> (*load)(const QString&))
{
    if (!train)
        return fail(train.error());
    Opened opened{std::move(*train), {}, {}};
    if (testPath.isEmpty())
        return opened;
    auto test = load(testPath);
    if (!test)
        return fail(test.error());
    opened.test = std::move(*test);
    return opened;
}

Result<Dataset> loadNpzPair(const QString& path)
{
    auto arrays = NumPy::loadNpz(path);
    if (!arrays)
        return fail(arrays.error());
    return datasetFromArrays(*arrays, QStringLiteral("x"), QStringLiteral("y"), path);
}

Result<Opened> openAny(const DatasetSpec& spec, const QList<qint64>& inputShape)
{
    switch (spec.format) {
    case DatasetSpec::Format::FashionMnist: {
        auto files = fashionMnistFiles(spec.dir);
        if (!files)
            return fail(files.error());
        return fromIdx(files->trainImages, files->trainLabels, files->testImages, files->testLabels);
    }
    case DatasetSpec::Format::Idx:
        return fromIdx(spec.trainImages, spec.trainLabels, spec.testImages, spec.testLabels);
    case DatasetSpec::Format::Cifar10: {
        auto train = Cifar10::openTrainingSource(spec.dir);
        if (!train)
            return fail(train.error());
        auto test = Cifar10::readTestBatch(spec.dir);
        if (!test)
            return fail(test.error());
        return Opened{std::move(*train), std::move(*test), {}};
    }
    case DatasetSpec::Format::SafeTensors:
        return trainAndTest(SafeTensorsSource::open(spec.train), spec.test, loadSafeTensors);
    case DatasetSpec::Format::Npz: {
        if (spec.file.isEmpty())
            return trainAndTest(NumPy::openNpzSource(spec.train, QStringLiteral("x"), QStringLiteral("y")), spec.test,
                                loadNpzPair);
        auto train = NumPy::openNpzSource(spec.file, QStringLiteral("x_train"), QStringLiteral("y_train"));
        if (!train)
            return fail(train.error());
        auto arrays = NumPy::loadNpzArrays(spec.file, QStringLiteral("x_test"), QStringLiteral("y_test"));
        if (!arrays)
            return fail(arrays.error());
        auto test = datasetFromArrays(*arrays, QStringLiteral("x_test"), QStringLiteral("y_test"), spec.file);
        if (!test)
            return fail(test.error());
        return Opened{std::move(*train), std::move(*test), {}};
    }
    case DatasetSpec::Format::Csv: {
        Csv::Columns columns;
        auto train = Csv::openSource(spec.train, spec.label, columns);
        if (!train)
            return fail(train.error());
        Opened opened{std::move(*train), {}, {}};
        if (spec.test.isEmpty())
            return opened;
        auto test = Csv::read(spec.test, spec.label, &columns.classes);
        if (!test)
            return fail(test.error());
        if (test->features != columns.features)
            return fail(QStringLiteral("%1 has the feature columns %2, %3 has %4; both files need the same")
                            .arg(spec.test, test->features.join(QStringLiteral(", ")), spec.train,
                                 columns.features.join(QStringLiteral(", "))));
        opened.test = std::move(test->data);
        return opened;
    }
    case DatasetSpec::Format::Images: {
        auto options = imageOptions(spec, inputShape);
        if (!options)
            return fail(options.error());
        ImageFolder::Folder folder;
        auto train = ImageFolder::openSource(spec.dir, *options, folder);
        if (!train)
            return fail(train.error());
        if (Status split = checkImageSplit(spec, folder.hasTestSplit); !split)
            return fail(split.error());
        QStringList notes = imageNotes(spec, folder, (*train)->size(), folder.split.test.size(), inputShape);
        return Opened{std::move(*train), std::move(folder.split.test), std::move(notes)};
    }
    }
    return fail(QStringLiteral("unknown dataset format"));
}

qint64 boundOf(const std::vector<qint64>& labels, const std::vector<qint64>& indices)
{
    qint64 bound = 0;
    for (qint64 index : indices)
        bound = std::max(bound, labels[size_t(index)] + 1);
    return bound;
}

} // namespace

Result<TrainingImport> TrainingImport::open(const DatasetSpec& spec, std::optional<qint64> limitTrain,
                                            const QList<qint64>& inputShape)
{
    auto opened = openAny(spec, inputShape);
    if (!opened)
        return fail(opened.error());
    TrainingImport import;
    import.m_source = std::move(opened->train);
    import.m_test = std::move(opened->test);
    import.m_notes = std::move(opened->notes);
    const qint64 n = import.m_source->size();
    if (spec.testFraction > 0) {
        const QString source = spec.format == DatasetSpec::Format::Images ? spec.dir : spec.train;
        auto held = holdOutIndices(n, spec.testFraction, quint64(spec.splitSeed), source);
        if (!held)
            return fail(held.error());
        import.m_train = std::move(held->train);
        import.m_heldOut = std::move(held->test);
    } else {
        import.m_train.resize(size_t(n));
        for (qint64 i = 0; i < n; ++i)
            import.m_train[size_t(i)] = i;
        if (import.sampleShape() != import.m_test.sampleShape())
            return fail(QStringLiteral("training samples have shape %1 but test samples %2; both sets must match")
                            .arg(shapeToString(import.sampleShape()), shapeToString(import.m_test.sampleShape())));
    }
    if (limitTrain && *limitTrain < qint64(import.m_train.size()))
        import.m_train.resize(size_t(std::max<qint64>(*limitTrain, 0)));
    if (!spec.normalizeMean.isEmpty()) {
        import.m_mean = spec.normalizeMean;
        import.m_std = spec.normalizeStd;
        if (!import.m_train.empty()) {
            auto normalizer = Normalizer::create(spec.normalizeMean, spec.normalizeStd, import.sampleShape());
            if (!normalizer)
                return fail(normalizer.error());
            import.m_normalizer = std::move(*normalizer);
        }
        if (import.m_heldOut.empty()) {
            auto normalized = normalize(import.m_test, spec.normalizeMean, spec.normalizeStd);
            if (!normalized)
                return fail(normalized.error());
            import.m_test = std::move(*normalized);
        }
    }
    return import;
}

qint64 TrainingImport::trainBytes() const
{
    const DType type = m_normalizer ? DType::F32 : m_source->sampleType();
    return trainSize() * TensorBundle::byteSizeFor(type, sampleShape()).value_or(0);
}

qint64 TrainingImport::trainLabelBound() const
{
    return boundOf(m_source->labels(), m_train);
}

qint64 TrainingImport::testLabelBound() const
{
    return m_heldOut.empty() ? m_test.labelBound() : boundOf(m_source->labels(), m_heldOut);
}

Result<QList<ShardFile>> TrainingImport::writeShards(int shards, quint64 seed, const QString& dir,
                                                     const std::function<void(qint64 done, qint64 total)>& progress)
{
    if (Status count = Shards::checkCount(trainSize(), shards); !count)
        return fail(count.error());
    const std::vector<qint64>& labels = m_source->labels();
    std::vector<qint64> trainLabels(m_train.size());
    for (size_t j = 0; j < m_train.size(); ++j)
        trainLabels[j] = labels[size_t(m_train[j])];
    const DType type = m_normalizer ? DType::F32 : m_source->sampleType();
    auto writer = ShardFileWriter::create(dir, Shards::plan(trainLabels, shards, seed), trainLabels, sampleShape(),
                                          type, seed);
    if (!writer)
        return fail(writer.error());
    trainLabels = {};

    // The file's samples in order: each either the next training sample, the next held-out one, or neither
    // (beyond limit_train).
    size_t nextTrain = 0, nextHeld = 0;
    const qint64 sourceBytes = m_source->sampleBytes();
    QByteArray heldX;
    heldX.reserve(qsizetype(qint64(m_heldOut.size()) * sourceBytes));
    std::vector<float> normalized(m_normalizer ? size_t(m_normalizer->values()) : 0);
    const Status read = m_source->readSamples([&](qint64 index, QByteArrayView sample) -> Status {
        if (nextTrain < m_train.size() && m_train[nextTrain] == index) {
            const qint64 j = qint64(nextTrain++);
            if (progress)
                progress(qint64(nextTrain), qint64(m_train.size()));
            if (!m_normalizer)
                return (*writer)->write(j, sample);
            m_normalizer->apply(sample.data(), m_source->sampleType(), normalized.data());
            return (*writer)->write(j, QByteArrayView(reinterpret_cast<const char*>(normalized.data()),
                                                      qsizetype(normalized.size() * sizeof(float))));
        }
        if (nextHeld < m_heldOut.size() && m_heldOut[nextHeld] == index) {
            ++nextHeld;
            heldX.append(sample);
        }
        return {};
    });
    if (!read)
        return fail(read.error());
    auto files = (*writer)->finish();
    if (!files)
        return fail(files.error());

    if (!m_heldOut.empty()) {
        TensorBundle bundle;
        QList<qint64> shape{qint64(m_heldOut.size())};
        shape += sampleShape();
        std::vector<qint64> heldLabels(m_heldOut.size());
        for (size_t i = 0; i < m_heldOut.size(); ++i)
            heldLabels[i] = labels[size_t(m_heldOut[i])];
        if (Status added = bundle.add(QStringLiteral("x"), m_source->sampleType(), shape, heldX); !added)
            return fail(added.error());
        heldX = {};
        if (Status added = bundle.addValues<qint64>(QStringLiteral("y"), DType::I64, {qint64(heldLabels.size())}, heldLabels);
            !added)
            return fail(added.error());
        auto test = Dataset::fromBundle(std::move(bundle), QStringLiteral("held-out test samples"));
        if (!test)
            return fail(test.error());
        m_test = std::move(*test);
        if (!m_mean.isEmpty()) {
            auto normalizedTest = normalize(m_test, m_mean, m_std);
            if (!normalizedTest)
                return fail(normalizedTest.error());
            m_test = std::move(*normalizedTest);
        }
    }
    return files;
}

} // namespace gleaner::ml
