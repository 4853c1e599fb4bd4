#pragma once
// Splits a training set into N shards, one safetensors file each: the unit of data an agent downloads and
// caches. Shards are class-balanced (every class is dealt round-robin across shards, so no agent trains on a
// lopsided slice) and seeded (the same seed gives byte-identical files, so content addresses are stable).

#include "Result.h"
#include "ml/data/Dataset.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <vector>

namespace gleaner::ml {

struct ShardFile
{
    int index = 0;
    QString path;
    qint64 samples = 0;
    qint64 bytes = 0;
    QByteArray sha256; // raw 32 bytes of the file's content
};

namespace Shards {

// Which sample goes into which shard: indices[i] lists shard i's samples in training order. Sizes differ by
// at most one, and so does each class's count across shards. Deterministic for a seed on every platform.
std::vector<std::vector<qint64>> plan(const Dataset& train, int shards, quint64 seed);
// The same from the training samples' labels alone, which is all the plan depends on.
std::vector<std::vector<qint64>> plan(const std::vector<qint64>& labels, int shards, quint64 seed);

// Whether `samples` training samples can fill `shards` shards; the message says what to change.
Status checkCount(qint64 samples, int shards);

// Writes shard-00000-of-N.safetensors ... into `dir` (created when missing) and returns them in order, through
// ShardFileWriter as the streamed import does (no file is left behind when it fails).
// Each carries metadata: gleaner.shard.index, gleaner.shard.count, gleaner.shard.seed.
Result<QList<ShardFile>> write(const Dataset& train, int shards, quint64 seed, const QString& dir);

} // namespace Shards
} // namespace gleaner::ml
