#pragma once
// The checks a checkpoint that a leaving agent handed back (protocol 6.8) passes before another agent is told to
// resume from it. A checkpoint is code's input like an upload is: the next agent trains on from whatever it holds,
// and its result is folded in. So it is bounded as an upload is, and bound to the workunit it claims:
//   - at most maxBytes(schema): the model once, the optimizer's state at most twice, and room for names;
//   - a well-formed checkpoint (gleaner.checkpoint 2, its checksum over every tensor and field);
//   - written for this workunit's request (model, optimizer, local epochs, batch size, seed, size in
//     mini-batches, augmentation), its shard and the lease's base weights, each compared by hash;
//   - exactly the model's tensors ("model.<name>", names, shapes and dtypes), and optimizer state only for the
//     model's parameters ("optim.<name>.<slot>" of the parameter's shape, "optim.steps"), every value finite;
//   - progress exactly as training counts it (CheckpointInfo::progressMismatch: the mini-batches within the
//     subtask, the samples they hold, a loss sum and a time that are finite and bounded), and integer buffers
//     that count no more than those mini-batches: the agent that resumes carries them into its result;
//   - the distance its weights moved from the base, for the state thread to compare with the job's UpdateBound.
// Runs on the HTTP side's checker thread.

#include "Result.h"
#include "aggregation/UpdateChecker.h"
#include "tensor/TensorBundle.h"

namespace gleaner::coordinator {

// What a checkpoint handed back with one lease must match; decided on the state thread from the lease.
struct CheckpointExpectations
{
    TensorBundle schema;     // the model's names, shapes and dtypes
    QString baseWeightsSha;  // the weights file the lease handed out ...
    QString baseWeightsPath; // ... and where it lies
    QString shardSha;        // the shard's blob ...
    QString shardPath;       // ... and where it lies
    QString requestHash;     // ml::RunIdentity::requestHash of the workunit's training
    qint64 shardSamples = 0; // samples in the shard
    qint64 batchSize = 0;    // samples in a full mini-batch
    qint64 maxSteps = 0;     // mini-batches the subtask runs
};

struct CheckedCheckpoint
{
    qint64 step = 0;       // mini-batches done
    qint64 samples = 0;
    double distance = 0.0; // ||weights - base|| over the floating-point tensors
    double baseNorm = 0.0;
};

namespace CheckpointChecker {

qint64 maxBytes(const TensorBundle& schema);
// The content hash of a shard (ml::Checkpoint::contentHash), read once per shard and kept (checker thread only).
class ShardHashes
{
public:
    Result<QString> get(const QString& sha256, const QString& path);

private:
    QHash<QString, QString> m_hashes;
};

Result<CheckedCheckpoint> check(const QString& path, const CheckpointExpectations& expected,
                                const BaseWeightsCache::Entry& base, ShardHashes& shards);

} // namespace CheckpointChecker
} // namespace gleaner::coordinator
