#pragma once
// The checkpoint of a subtask in training: one safetensors file holding everything needed to continue exactly
// where training stopped, so that a resumed run ends with the same weights as an uninterrupted one.
//   tensors  "model.<name>"        the model's parameters and buffers
//            "optim.<name>.<slot>" the optimizer's state per parameter, "optim.steps"
//   metadata gleaner.checkpoint = 2, the fields of CheckpointInfo (progress and the run's identity), and
//            "checksum": SHA-256 over every tensor and every other metadata entry, so a damaged file is
//            refused instead of resuming from wrong numbers.
// There is no generator state: training draws nothing from torch's global generator (the data order of every
// local epoch comes from its own generator seeded by (seed, epoch), augmentation draws from a hash of (seed,
// epoch, mini-batch), and the model zoo has no dropout). A
// future stochastic layer must draw from a per-run generator whose state is stored here, never from the
// global one, which other threads share. Version 1 files (with "rng.default") are refused with a message. The
// agent reads CheckpointInfo without torch to report how far a paused subtask got.

#include "Result.h"
#include "spec/AugmentSpec.h"
#include "tensor/TensorBundle.h"

#include <QJsonObject>

namespace gleaner::ml {

// What a training run's result depends on besides its progress. A checkpoint resumes only a run whose
// identity matches the recorded one; each part is stored on its own so a refusal names what differs.
struct RunIdentity
{
    QString request;        // SHA-256 (hex) of the model spec, optimizer, local epochs, batch size, seed, ...
                            // (requestHash)
    QString shard;          // Checkpoint::contentHash() of the shard
    QString initialWeights; // Checkpoint::contentHash() of the weights train() started from
    int threads = 0;        // effective intra-op thread count (what torch::get_num_threads() gave)
    QString device;         // as resolved: "cpu", "cuda:0"
    QString torchVersion;   // "1.13.1"

    // SHA-256 (hex) over all parts: TrainRequest::fingerprint().
    QString fingerprint() const;
    // Empty when `current` may resume a checkpoint recorded with this identity. Otherwise what differs and
    // what to do ("the checkpoint was written with 1 thread; resume with threads=1 or start the subtask
    // afresh"). The initial weights are not compared: resume() takes them from the checkpoint.
    QString mismatch(const RunIdentity& current) const;
    // Empty when a checkpoint another agent handed back may be continued here: the same request, shard and
    // starting weights (`current.initialWeights` is the hash of the weights this run was handed). The thread
    // count, device and libtorch version may differ: the result is then the same training, not the same bits.
    QString mismatchForAdoption(const RunIdentity& current) const;

    // SHA-256 (hex) over what shapes a run besides its data and starting weights: the model spec, optimizer,
    // local epochs, batch size, seed, mini-batch count (0: whole local epochs) and augmentation. The
    // coordinator computes it too, to tell whether a handed-back checkpoint belongs to the workunit it
    // claims. The count and the augmentation enter only when set, so checkpoints written before either
    // existed keep their hash.
    static QString requestHash(const QJsonObject& model, const QJsonObject& optimizer, int localEpochs,
                               int batchSize, quint64 seed, qint64 steps, const AugmentSpec& augment);

    bool operator==(const RunIdentity&) const = default;
};

struct CheckpointInfo
{
    RunIdentity run;    // a checkpoint resumes only the run that wrote it
    int epoch = 0;      // local epoch in progress (0-based)
    qint64 batch = 0;   // next mini-batch of that epoch
    qint64 samples = 0; // samples trained so far
    qint64 totalSteps = 0;
    double lossSum = 0.0; // sum of per-sample losses so far (exact: written with 17 significant digits)
    double seconds = 0.0; // training time so far

    // Writes the metadata and the checksum over the bundle's tensors and metadata: call it after the last
    // tensor is added.
    void writeTo(TensorBundle& bundle) const;
    // Checks the version, the checksum and every field; messages say what is wrong and what to do.
    static Result<CheckpointInfo> readFrom(const TensorBundle& bundle);

    // The most a checkpoint may claim of time (30 days of training for one subtask) and of loss per sample (a
    // cross-entropy of 1e6 is a run diverged past any use).
    static constexpr double kMaxSeconds = 30.0 * 24 * 3600;
    static constexpr double kMaxLossPerSample = 1e6;
    // Empty when the progress is exactly what training does: full passes of ceil(shardSamples / batchSize)
    // mini-batches over the shard, the last of a pass short, at most `maxSteps` in all; `samples` what those
    // mini-batches hold, `total_steps` their count, `loss_sum` and `seconds` within the bounds above. Otherwise
    // which field is wrong and why. A checkpoint another agent handed back is held to it before anything trains
    // on from it: its counts go into the result of whoever resumes it, and a count raised by 16 (the checksum
    // recomputed) would have that honest result refused.
    QString progressMismatch(qint64 shardSamples, qint64 batchSize, qint64 maxSteps) const;
};

namespace Checkpoint {
inline QString modelPrefix()
{
    return QStringLiteral("model.");
}
inline QString optimizerPrefix()
{
    return QStringLiteral("optim.");
}
// SHA-256 (hex) over every tensor's name, dtype, shape and bytes, in name order: names a shard or a set of
// weights by content, whatever the file layout, tensor order or metadata.
QString contentHash(const TensorBundle& bundle);
} // namespace Checkpoint

} // namespace gleaner::ml
