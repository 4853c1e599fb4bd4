#include "ml/data/ShardWriter.h"

#include "ml/data/ShardFileWriter.h"

#include <map>
#include <random>

namespace gleaner::ml::Shards {
namespace {

// Fisher-Yates with our own bounded draw: std::shuffle and std::uniform_int_distribution differ between
// standard libraries, and shard contents must not depend on which one built the coordinator.
void shuffle(std::vector<qint64>& values, std::mt19937_64& rng)
{
    for (size_t i = values.size(); i > 1; --i) {
        const quint64 bound = i;
        const quint64 limit =
            std::numeric_limits<quint64>::max() - std::numeric_limits<quint64>::max() % bound;
        quint64 draw = rng();
        while (draw >= limit)
            draw = rng();
        std::swap(values[i - 1], values[size_t(draw % bound)]);
    }
}

} // namespace

std::vector<std::vector<qint64>> plan(const Dataset& train, int shards, quint64 seed)
{
    std::vector<qint64> labels(size_t(train.size()));
    for (qint64 i = 0; i < train.size(); ++i)
        labels[size_t(i)] = train.label(i);
    return plan(labels, shards, seed);
}

std::vector<std::vector<qint64>> plan(const std::vector<qint64>& labels, int shards, quint64 seed)
{
    std::vector<std::vector<qint64>> result(size_t(std::max(shards, 1)));
    std::mt19937_64 rng(seed);
    // Grouped in a map, not a vector indexed by label: memory follows the classes present, never the largest
    // label's value. Ascending label order, as before, so the same seed keeps giving the same shards.
    std::map<qint64, std::vector<qint64>> byClass;
    for (size_t i = 0; i < labels.size(); ++i)
        byClass[labels[i]].push_back(qint64(i));

    // Deal class after class round-robin, continuing where the previous class stopped, so both the shard
    // sizes and each class's count per shard differ by at most one.
    size_t next = 0;
    for (auto& group : byClass) {
        auto& members = group.second;
        shuffle(members, rng);
        for (qint64 index : members) {
            result[next].push_back(index);
            next = (next + 1) % result.size();
        }
    }
    for (auto& shard : result)
        shuffle(shard, rng);
    return result;
}

Status checkCount(qint64 samples, int shards)
{
    if (shards < 1)
        return fail(QStringLiteral("the number of shards must be at least 1, got %1").arg(shards));
    if (samples < shards)
        return fail(QStringLiteral("%1 training samples cannot fill %2 shards; use fewer shards or more data")
                        .arg(samples)
                        .arg(shards));
    return {};
}

Result<QList<ShardFile>> write(const Dataset& train, int shards, quint64 seed, const QString& dir)
{
    if (Status count = checkCount(train.size(), shards); !count)
        return fail(count.error());
    std::vector<qint64> labels(size_t(train.size()));
    for (qint64 i = 0; i < train.size(); ++i)
        labels[size_t(i)] = train.label(i);
    auto writer = ShardFileWriter::create(dir, plan(labels, shards, seed), labels, train.sampleShape(),
                                          train.sampleType(), seed);
    if (!writer)
        return fail(writer.error());
    const char* samples = train.bundle().data(train.x()).data();
    const qint64 stride = (*writer)->sampleBytes();
    for (qint64 i = 0; i < train.size(); ++i)
        if (Status written = (*writer)->write(i, QByteArrayView(samples + i * stride, stride)); !written)
            return fail(written.error());
    return (*writer)->finish();
}

} // namespace gleaner::ml::Shards
