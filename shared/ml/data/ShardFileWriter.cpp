#include "ml/data/ShardFileWriter.h"

#include "crypto/Sha256.h"
#include "format/SafeTensors.h"

#include <QDir>

#include <algorithm>

namespace gleaner::ml {

Result<std::unique_ptr<ShardFileWriter>> ShardFileWriter::create(const QString& dir,
                                                                 const std::vector<std::vector<qint64>>& assignment,
                                                                 const std::vector<qint64>& labels,
                                                                 const QList<qint64>& sampleShape, DType sampleType,
                                                                 quint64 seed)
{
    if (!QDir().mkpath(dir))
        return fail(QStringLiteral("%1: cannot create the shard folder").arg(dir));
    std::unique_ptr<ShardFileWriter> writer(new ShardFileWriter);
    const auto sampleBytes = TensorBundle::byteSizeFor(sampleType, sampleShape);
    if (!sampleBytes)
        return fail(QStringLiteral("samples of shape %1 are too large to shard").arg(shapeToString(sampleShape)));
    writer->m_sampleBytes = *sampleBytes;
    writer->m_slot.assign(labels.size(), -1);
    const int count = int(assignment.size());
    qint64 place = 0;
    for (int i = 0; i < count; ++i) {
        const std::vector<qint64>& members = assignment[size_t(i)];
        const qint64 n = qint64(members.size());
        writer->m_shardStart.push_back(place);
        std::vector<qint64> shardLabels(members.size());
        for (size_t p = 0; p < members.size(); ++p) {
            writer->m_slot[size_t(members[p])] = place + qint64(p);
            shardLabels[p] = labels[size_t(members[p])];
        }
        place += n;

        QList<qint64> shape{n};
        shape += sampleShape;
        const QList<TensorEntry> entries{
            TensorEntry{QStringLiteral("x"), sampleType, shape, 0, n * *sampleBytes},
            TensorEntry{QStringLiteral("y"), DType::I64, {n}, 0, n * qint64(sizeof(qint64))}};
        const QMap<QString, QString> metadata{{QStringLiteral("gleaner.shard.index"), QString::number(i)},
                                              {QStringLiteral("gleaner.shard.count"), QString::number(count)},
                                              {QStringLiteral("gleaner.shard.seed"), QString::number(seed)}};
        auto layout = SafeTensors::layout(entries, metadata);
        if (!layout)
            return fail(QStringLiteral("shard %1: %2").arg(i).arg(layout.error()));

        Shard shard;
        shard.path = QDir(dir).filePath(QStringLiteral("shard-%1-of-%2.safetensors")
                                            .arg(i, 5, 10, QLatin1Char('0'))
                                            .arg(count, 5, 10, QLatin1Char('0')));
        shard.samples = n;
        shard.xOffset = layout->offsets[0];
        shard.bytes = layout->lengthAndHeader.size() + entries[0].byteSize + entries[1].byteSize;
        writer->m_shards.push_back(std::move(shard));
        // The file at its full size (the samples' stretch a hole until they arrive), its header and labels.
        QFile file(writer->m_shards.back().path);
        const QByteArray y(reinterpret_cast<const char*>(shardLabels.data()), qsizetype(shardLabels.size() * sizeof(qint64)));
        if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || !file.resize(writer->m_shards.back().bytes) ||
            file.write(layout->lengthAndHeader) != layout->lengthAndHeader.size() || !file.seek(layout->offsets[1]) ||
            file.write(y) != y.size())
            return fail(QStringLiteral("%1: cannot write the shard: %2").arg(writer->m_shards.back().path, file.errorString()));
    }
    return writer;
}

ShardFileWriter::~ShardFileWriter()
{
    if (m_finished)
        return;
    for (Shard& shard : m_shards) {
        shard.file.reset();
        QFile::remove(shard.path);
    }
}

Result<QFile*> ShardFileWriter::fileFor(int index)
{
    Shard& shard = m_shards[size_t(index)];
    if (shard.file)
        return shard.file.get();
    if (int(m_open.size()) >= kOpenFiles) {
        m_shards[size_t(m_open.front())].file.reset();
        m_open.pop_front();
    }
    auto file = std::make_unique<QFile>(shard.path);
    // Unbuffered: each sample goes to the kernel at its offset, without a stop in QFileDevice's buffer.
    if (!file->open(QIODevice::ReadWrite | QIODevice::Unbuffered))
        return fail(QStringLiteral("%1: cannot write the shard: %2").arg(shard.path, file->errorString()));
    shard.file = std::move(file);
    m_open.push_back(index);
    return shard.file.get();
}

Status ShardFileWriter::write(qint64 index, QByteArrayView sample)
{
    Q_ASSERT(sample.size() == m_sampleBytes);
    const qint64 slot = index >= 0 && index < qint64(m_slot.size()) ? m_slot[size_t(index)] : -1;
    if (slot < 0)
        return {}; // not a training sample any shard holds
    const auto after = std::upper_bound(m_shardStart.begin(), m_shardStart.end(), slot);
    const int shardIndex = int(after - m_shardStart.begin()) - 1;
    auto file = fileFor(shardIndex);
    if (!file)
        return fail(file.error());
    const Shard& shard = m_shards[size_t(shardIndex)];
    const qint64 at = shard.xOffset + (slot - m_shardStart[size_t(shardIndex)]) * m_sampleBytes;
    if (!(*file)->seek(at) || (*file)->write(sample.data(), sample.size()) != sample.size())
        return fail(QStringLiteral("%1: cannot write the shard: %2").arg(shard.path, (*file)->errorString()));
    m_slot[size_t(index)] = -1; // written: a second delivery of the same sample is not counted twice
    ++m_written;
    return {};
}

Result<QList<ShardFile>> ShardFileWriter::finish()
{
    const qint64 expected = m_shardStart.empty() ? 0 : m_shardStart.back() + m_shards.back().samples;
    if (m_written != expected)
        return fail(QStringLiteral("the shards received %1 of their %2 samples").arg(m_written).arg(expected));
    QList<ShardFile> files;
    for (size_t i = 0; i < m_shards.size(); ++i) {
        Shard& shard = m_shards[i];
        if (shard.file && !shard.file->flush())
            return fail(QStringLiteral("%1: cannot write the shard: %2").arg(shard.path, shard.file->errorString()));
        shard.file.reset();
        auto hash = Sha256::hashFile(shard.path);
        if (!hash)
            return fail(hash.error());
        files.append(ShardFile{int(i), shard.path, shard.samples, shard.bytes, *hash});
    }
    m_open.clear();
    m_finished = true;
    return files;
}

} // namespace gleaner::ml
