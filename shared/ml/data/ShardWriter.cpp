#include "ml/data/ShardWriter.h"

#include "crypto/Sha256.h"
#include "format/SafeTensors.h"

#include <QDir>
#include <QSaveFile>

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
    std::vector<std::vector<qint64>> result(size_t(std::max(shards, 1)));
    std::mt19937_64 rng(seed);
    // Grouped in a map, not a vector indexed by label: memory follows the classes present, never the largest
    // label's value. Ascending label order, as before, so the same seed keeps giving the same shards.
    std::map<qint64, std::vector<qint64>> byClass;
    for (qint64 i = 0; i < train.size(); ++i)
        byClass[train.label(i)].push_back(i);

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

Result<QList<ShardFile>> write(const Dataset& train, int shards, quint64 seed, const QString& dir)
{
    if (shards < 1)
        return fail(QStringLiteral("the number of shards must be at least 1, got %1").arg(shards));
    if (train.size() < shards)
        return fail(QStringLiteral("%1 training samples cannot fill %2 shards; use fewer shards or more data")
                        .arg(train.size())
                        .arg(shards));
    if (!QDir().mkpath(dir))
        return fail(QStringLiteral("%1: cannot create the shard folder").arg(dir));

    QList<ShardFile> files;
    const auto assignment = plan(train, shards, seed);
    for (int i = 0; i < shards; ++i) {
        Dataset shard = train.select(assignment[size_t(i)]);
        TensorBundle& bundle = shard.bundle();
        bundle.metadata().clear();
        bundle.setMetadata(QStringLiteral("gleaner.shard.index"), QString::number(i));
        bundle.setMetadata(QStringLiteral("gleaner.shard.count"), QString::number(shards));
        bundle.setMetadata(QStringLiteral("gleaner.shard.seed"), QString::number(seed));

        const QByteArray bytes = SafeTensors::serialize(bundle);
        const QString path = QDir(dir).filePath(QStringLiteral("shard-%1-of-%2.safetensors")
                                                    .arg(i, 5, 10, QLatin1Char('0'))
                                                    .arg(shards, 5, 10, QLatin1Char('0')));
        QSaveFile file(path);
        if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
            return fail(QStringLiteral("%1: cannot write the shard: %2").arg(path, file.errorString()));
        files.append(ShardFile{i, path, shard.size(), qint64(bytes.size()), Sha256::hash(bytes)});
    }
    return files;
}

} // namespace gleaner::ml::Shards
