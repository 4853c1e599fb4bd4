#pragma once
// Writes a training set's shard files one sample at a time, in whatever order the samples arrive: each file is
// created at its full size with its safetensors header and labels, and every sample is written at its own
// offset. The import streams a dataset larger than memory through it; memory is an index per sample and a
// bounded number of open files, never the samples. The files are byte for byte what SafeTensors::serialize()
// makes of the shard's bundle (x, then y as I64, and the shard's metadata).
//
// Until finish() succeeds, the files are the writer's: destroying it first removes every file it created, so a
// failed import leaves no partial shard behind.

#include "Result.h"
#include "ml/data/ShardWriter.h"
#include "tensor/DType.h"

#include <QFile>
#include <QList>
#include <QString>

#include <deque>
#include <memory>
#include <vector>

namespace gleaner::ml {

class ShardFileWriter
{
public:
    // More shards than this are reopened as needed rather than all held open (the usual limit is 1024 files).
    static constexpr int kOpenFiles = 64;

    // `assignment` is Shards::plan()'s: shard i holds the training samples assignment[i] in that order;
    // `labels[j]` is training sample j's label. Samples are `sampleType` (U8 or F32) of `sampleShape`.
    static Result<std::unique_ptr<ShardFileWriter>> create(const QString& dir,
                                                           const std::vector<std::vector<qint64>>& assignment,
                                                           const std::vector<qint64>& labels,
                                                           const QList<qint64>& sampleShape, DType sampleType,
                                                           quint64 seed);
    ~ShardFileWriter();
    ShardFileWriter(const ShardFileWriter&) = delete;
    ShardFileWriter& operator=(const ShardFileWriter&) = delete;

    qint64 sampleBytes() const { return m_sampleBytes; }
    // Training sample `index`'s bytes (sampleBytes() of them) into its place.
    Status write(qint64 index, QByteArrayView sample);
    // Checks that every sample was written, closes the files and hashes them; they are the caller's from here.
    Result<QList<ShardFile>> finish();

private:
    ShardFileWriter() = default;
    Result<QFile*> fileFor(int shard);

    struct Shard
    {
        QString path;
        qint64 samples = 0;
        qint64 xOffset = 0; // where the samples start in the file
        qint64 bytes = 0;
        std::unique_ptr<QFile> file; // open while among the most recently used
    };
    std::vector<Shard> m_shards;
    std::vector<qint64> m_slot;       // training sample -> its place among all shards' samples
    std::vector<qint64> m_shardStart; // the first place of each shard
    std::deque<int> m_open;           // shards with an open file, oldest first
    qint64 m_sampleBytes = 0;
    qint64 m_written = 0;
    bool m_finished = false;
};

} // namespace gleaner::ml
