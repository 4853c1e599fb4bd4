#include "ml/data/Cifar10Reader.h"

#include <QDir>
#include <QFile>

#include <algorithm>

namespace gleaner::ml::Cifar10 {

Result<Dataset> readBatches(const QStringList& paths)
{
    QByteArray pixels;
    std::vector<qint64> labels;
    constexpr qint64 pixelBytes = kRecordBytes - 1;
    for (const QString& path : paths) {
        QFile file(path);
        if (!file.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("%1: cannot open: %2").arg(path, file.errorString()));
        const QByteArray bytes = file.readAll();
        if (bytes.isEmpty() || bytes.size() % kRecordBytes != 0)
            return fail(QStringLiteral("%1: %2 bytes is not a whole number of %3-byte CIFAR-10 records "
                                       "(is this the binary version of the data set?)")
                            .arg(path)
                            .arg(bytes.size())
                            .arg(kRecordBytes));
        const qint64 records = bytes.size() / kRecordBytes;
        pixels.reserve(pixels.size() + qsizetype(records * pixelBytes));
        for (qint64 r = 0; r < records; ++r) {
            const char* record = bytes.constData() + r * kRecordBytes;
            const int label = quint8(record[0]);
            if (label > 9)
                return fail(QStringLiteral("%1: record %2 has label %3; CIFAR-10 labels are 0 to 9")
                                .arg(path)
                                .arg(r)
                                .arg(label));
            labels.push_back(label);
            pixels.append(record + 1, qsizetype(pixelBytes));
        }
    }
    return Dataset::fromBytes(pixels, {3, 32, 32}, labels, QStringLiteral("CIFAR-10"));
}

namespace {

constexpr qint64 kRecordsPerChunk = 256;

// The records of one batch file, kRecordsPerChunk at a time, after its size was checked.
template <typename Each>
Status forEachRecord(const QString& path, Each&& each)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly | QIODevice::Unbuffered))
        return fail(QStringLiteral("%1: cannot open: %2").arg(path, file.errorString()));
    const qint64 size = file.size();
    if (size == 0 || size % kRecordBytes != 0)
        return fail(QStringLiteral("%1: %2 bytes is not a whole number of %3-byte CIFAR-10 records "
                                   "(is this the binary version of the data set?)")
                        .arg(path)
                        .arg(size)
                        .arg(kRecordBytes));
    QByteArray chunk(qsizetype(kRecordsPerChunk * kRecordBytes), Qt::Uninitialized);
    for (qint64 record = 0; record < size / kRecordBytes;) {
        const qint64 want = std::min(kRecordsPerChunk, size / kRecordBytes - record) * kRecordBytes;
        qint64 got = 0;
        while (got < want) {
            const qint64 n = file.read(chunk.data() + got, want - got);
            if (n <= 0)
                return fail(QStringLiteral("%1: cannot read: %2").arg(path, n < 0 ? file.errorString() : QStringLiteral("the file ended early")));
            got += n;
        }
        for (qint64 at = 0; at < want; at += kRecordBytes, ++record)
            if (Status taken = each(record, chunk.constData() + at); !taken)
                return taken;
    }
    return {};
}

QStringList trainingBatches(const QDir& folder)
{
    QStringList train;
    for (int i = 1; i <= 5; ++i)
        train << folder.filePath(QStringLiteral("data_batch_%1.bin").arg(i));
    return train;
}

class BatchSource final : public SampleSource
{
public:
    explicit BatchSource(QStringList paths) : m_paths(std::move(paths))
    {
        m_sampleShape = {3, 32, 32};
        m_sampleType = DType::U8;
    }

    // The label bytes alone: the first of every record.
    Status readLabels()
    {
        for (const QString& path : std::as_const(m_paths)) {
            const Status read = forEachRecord(path, [&](qint64 record, const char* bytes) -> Status {
                const int label = quint8(bytes[0]);
                if (label > 9)
                    return fail(QStringLiteral("%1: record %2 has label %3; CIFAR-10 labels are 0 to 9")
                                    .arg(path)
                                    .arg(record)
                                    .arg(label));
                m_labels.push_back(label);
                return {};
            });
            if (!read)
                return read;
        }
        return {};
    }

    Status readSamples(const Sink& sink) override
    {
        qint64 index = 0;
        for (const QString& path : std::as_const(m_paths)) {
            const Status read = forEachRecord(path, [&](qint64, const char* bytes) {
                return sink(index++, QByteArrayView(bytes + 1, kRecordBytes - 1));
            });
            if (!read)
                return read;
        }
        return {};
    }

private:
    QStringList m_paths;
};

} // namespace

Result<std::unique_ptr<SampleSource>> openTrainingSource(const QString& dir)
{
    const QDir folder(dir);
    if (!folder.exists())
        return fail(QStringLiteral("%1: CIFAR-10 folder does not exist").arg(dir));
    auto source = std::make_unique<BatchSource>(trainingBatches(folder));
    if (Status labels = source->readLabels(); !labels)
        return fail(labels.error());
    return std::unique_ptr<SampleSource>(std::move(source));
}

Result<Dataset> readTestBatch(const QString& dir)
{
    return readBatches({QDir(dir).filePath(QStringLiteral("test_batch.bin"))});
}

Result<DatasetSplit> importDirectory(const QString& dir)
{
    const QDir folder(dir);
    if (!folder.exists())
        return fail(QStringLiteral("%1: CIFAR-10 folder does not exist").arg(dir));
    auto trainSet = readBatches(trainingBatches(folder));
    if (!trainSet)
        return fail(trainSet.error());
    auto testSet = readBatches({folder.filePath(QStringLiteral("test_batch.bin"))});
    if (!testSet)
        return fail(testSet.error());
    return DatasetSplit{std::move(*trainSet), std::move(*testSet)};
}

} // namespace gleaner::ml::Cifar10
