#include "scheduling/CheckpointChecker.h"

#include "format/SafeTensors.h"
#include "ml/Checkpoint.h"
#include "ml/WeightMath.h"

#include <QFile>
#include <QFileInfo>

#include <cmath>

namespace gleaner::coordinator::CheckpointChecker {
namespace {

// The optimizer state per parameter: a momentum (SGD), two moments (Adam); a few scalars besides.
constexpr int kMaxOptimizerSlots = 2;
constexpr int kMaxOptimizerScalars = 4;

} // namespace

qint64 maxBytes(const TensorBundle& schema)
{
    return (1 + kMaxOptimizerSlots) * schema.tensorBytes() + 512 * (1 + kMaxOptimizerSlots) * schema.size() +
           64 * 1024;
}

Result<QString> ShardHashes::get(const QString& sha256, const QString& path)
{
    if (auto known = m_hashes.constFind(sha256); known != m_hashes.cend())
        return *known;
    auto shard = SafeTensors::load(path);
    if (!shard)
        return fail(shard.error());
    const QString hash = ml::Checkpoint::contentHash(*shard);
    m_hashes.insert(sha256, hash);
    return hash;
}

Result<CheckedCheckpoint> check(const QString& path, const CheckpointExpectations& expected,
                                const BaseWeightsCache::Entry& base, ShardHashes& shards)
{
    const qint64 size = QFileInfo(path).size();
    if (size > maxBytes(expected.schema))
        return fail(QStringLiteral("the checkpoint has %1 bytes; one of this model has at most %2")
                        .arg(size)
                        .arg(maxBytes(expected.schema)));
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read the checkpoint: %1").arg(file.errorString()));
    auto bundle = SafeTensors::parse(file.readAll());
    if (!bundle)
        return fail(QStringLiteral("the checkpoint is not a valid safetensors file: %1").arg(bundle.error()));
    auto info = ml::CheckpointInfo::readFrom(*bundle);
    if (!info)
        return fail(QStringLiteral("the checkpoint: %1").arg(info.error()));

    // Bound to this workunit and this lease: its training, its shard, its base weights.
    if (info->run.request != expected.requestHash)
        return fail(
            QStringLiteral("the checkpoint was written for another training (model, optimizer, local epochs, "
                           "batch size, seed, size or augmentation) than this lease's workunit"));
    auto shardHash = shards.get(expected.shardSha, expected.shardPath);
    if (!shardHash)
        return fail(QStringLiteral("cannot read the workunit's shard: %1").arg(shardHash.error()));
    if (info->run.shard != *shardHash)
        return fail(QStringLiteral("the checkpoint was written for another shard than this lease's"));
    if (info->run.initialWeights != ml::Checkpoint::contentHash(base.weights))
        return fail(QStringLiteral("the checkpoint did not start from the weights this lease handed out"));

    // Progress exactly as training counts it: whoever resumes carries these counts into its result.
    if (const QString why = info->progressMismatch(expected.shardSamples, expected.batchSize, expected.maxSteps);
        !why.isEmpty())
        return fail(QStringLiteral("the checkpoint claims progress the subtask does not have: %1").arg(why));
    const qint64 step = info->totalSteps;

    // Exactly the model's tensors, and optimizer state for its parameters only.
    const QString modelPrefix = ml::Checkpoint::modelPrefix();
    const QString optimizerPrefix = ml::Checkpoint::optimizerPrefix();
    TensorBundle weights;
    int optimizerTensors = 0;
    for (const TensorEntry& entry : bundle->entries()) {
        if (entry.name.startsWith(modelPrefix)) {
            const QString name = entry.name.mid(modelPrefix.size());
            const TensorEntry* expectedEntry = expected.schema.find(name);
            if (!expectedEntry)
                return fail(QStringLiteral("the checkpoint holds \"%1\", which the model does not have").arg(name));
            if (expectedEntry->dtype != entry.dtype || expectedEntry->shape != entry.shape)
                return fail(QStringLiteral("the checkpoint's \"%1\" is %2 %3; the model's is %4 %5")
                                .arg(name, dtypeName(entry.dtype), shapeToString(entry.shape),
                                     dtypeName(expectedEntry->dtype), shapeToString(expectedEntry->shape)));
            if (auto s = weights.add(name, entry.dtype, entry.shape, bundle->data(entry)); !s)
                return fail(s.error());
            continue;
        }
        if (!entry.name.startsWith(optimizerPrefix))
            return fail(QStringLiteral("the checkpoint holds \"%1\", which no checkpoint has").arg(entry.name));
        ++optimizerTensors;
        const QString rest = entry.name.mid(optimizerPrefix.size());
        const qsizetype dot = rest.lastIndexOf(u'.');
        const TensorEntry* parameter = dot > 0 ? expected.schema.find(rest.left(dot)) : nullptr;
        if (parameter) {
            if (entry.dtype != DType::F32 || entry.shape != parameter->shape)
                return fail(QStringLiteral("the checkpoint's optimizer state \"%1\" is %2 %3; its parameter is %4")
                                .arg(entry.name, dtypeName(entry.dtype), shapeToString(entry.shape),
                                     shapeToString(parameter->shape)));
        } else if (entry.shape.size() > 1 || (entry.shape.size() == 1 && entry.shape[0] > 1)) {
            return fail(QStringLiteral("the checkpoint's optimizer state \"%1\" belongs to no parameter of the model")
                            .arg(entry.name));
        }
    }
    if (weights.size() != expected.schema.size())
        return fail(QStringLiteral("the checkpoint holds %1 of the model's %2 tensors")
                        .arg(weights.size())
                        .arg(expected.schema.size()));
    if (optimizerTensors > kMaxOptimizerSlots * expected.schema.size() + kMaxOptimizerScalars)
        return fail(QStringLiteral("the checkpoint holds %1 optimizer tensors; this model's optimizer has at most %2")
                        .arg(optimizerTensors)
                        .arg(kMaxOptimizerSlots * expected.schema.size() + kMaxOptimizerScalars));
    QString where;
    if (!ml::WeightMath::allFinite(*bundle, &where))
        return fail(QStringLiteral("the checkpoint holds NaN or infinite values in \"%1\"").arg(where));
    if (auto s = UpdateChecker::checkCounters(weights, base.weights, step); !s)
        return fail(QStringLiteral("the checkpoint's counters are impossible: %1").arg(s.error()));
    auto distance = ml::WeightMath::l2Distance(weights, base.weights);
    if (!distance)
        return fail(QStringLiteral("the checkpoint's weights: %1").arg(distance.error()));
    if (!std::isfinite(*distance))
        return fail(QStringLiteral("the checkpoint's weights are too far from the lease's to measure"));

    CheckedCheckpoint checked;
    checked.step = step;
    checked.samples = info->samples;
    checked.distance = *distance;
    checked.baseNorm = base.norm;
    return checked;
}

} // namespace gleaner::coordinator::CheckpointChecker
