#include "ml/data/Cifar10Reader.h"

#include <QDir>
#include <QFile>

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

Result<DatasetSplit> importDirectory(const QString& dir)
{
    const QDir folder(dir);
    if (!folder.exists())
        return fail(QStringLiteral("%1: CIFAR-10 folder does not exist").arg(dir));
    QStringList train;
    for (int i = 1; i <= 5; ++i)
        train << folder.filePath(QStringLiteral("data_batch_%1.bin").arg(i));
    auto trainSet = readBatches(train);
    if (!trainSet)
        return fail(trainSet.error());
    auto testSet = readBatches({folder.filePath(QStringLiteral("test_batch.bin"))});
    if (!testSet)
        return fail(testSet.error());
    return DatasetSplit{std::move(*trainSet), std::move(*testSet)};
}

} // namespace gleaner::ml::Cifar10
