#pragma once
// The training core of one subtask: from a model spec, starting weights and a shard, run the local epochs and
// return the new weights with the mean loss and the number of samples. Between mini-batches it asks its
// caller what to do (continue, pause by blocking, checkpoint, checkpoint and stop, cancel), so throttling and
// pausing happen at batch granularity and no work is lost.
//
// Deterministic for a seed, a thread count and a device: on the CPU, a run resumed from a checkpoint ends
// with the same weights, bit for bit, as one that never stopped. On CUDA, training sets cuDNN to
// deterministic algorithms without benchmarking, which makes runs repeatable in practice; bit-identical
// resume is guaranteed on the CPU only.
//
// libtorch's intra-op thread count and cuDNN flags are process-wide: train() and resume() set what the
// request asks for and put back what they found when they return. Two trainings at once in one process must
// therefore use the same threads value. Every function here returns errors as values; no exception escapes.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "spec/AugmentSpec.h"
#include "spec/ModelSpec.h"
#include "spec/OptimizerSpec.h"
#include "tensor/TensorBundle.h"

#include <functional>

namespace gleaner::ml {

struct TrainRequest
{
    ModelSpec model;
    OptimizerSpec optimizer;
    int localEpochs = 1;
    int batchSize = 32;
    // Mini-batches to train in all; 0: every mini-batch of every local epoch. When set, `localEpochs` is not
    // used: training passes over the shard as often as it takes (each pass in its own order) and stops after
    // `steps`, mid-pass or not. The coordinator sizes subtasks with it (speed-aware work).
    qint64 steps = 0;
    quint64 seed = 0; // data order of every local epoch derives from it, and augmentation's draws
    // Random crops and flips of every mini-batch (Augmentation.h), drawn from (seed, local epoch,
    // mini-batch); only for a model whose input_shape is [C, H, W]. Default: off.
    AugmentSpec augment;
    QString device = QStringLiteral("cpu");
    int threads = 0;                         // intra-op threads; 0 leaves libtorch's default
    QString checkpointPath;                  // empty: no checkpoints
    double checkpointIntervalSeconds = 60.0; // periodic checkpoints; 0 only on request
    // The local optimizer's state to start from instead of a fresh one: what an earlier subtask of the same job
    // ended with (TrainOutcome::optimizerState), so that its moments and step count carry over from subtask to
    // subtask as they would in one long run. Empty: a fresh optimizer. train() refuses a state that does not fit
    // the model and optimizer, naming the tensor; resume() takes the checkpoint's state instead.
    TensorBundle optimizerState;
    // resume() only: the checkpoint at checkpointPath was handed back by another agent. It is taken when it was
    // written for the same request and shard from the starting weights whose Checkpoint::contentHash this is;
    // its thread count, device and libtorch version may differ from this run's. Its values must be finite.
    // Empty: the checkpoint is this run's own and must match it exactly.
    QString adoptFromWeights;

    // Identifies everything that shapes the result, as train() records it in a checkpoint (RunIdentity in
    // Checkpoint.h): SHA-256 over the model, optimizer, local epochs, batch size, seed, steps and
    // augmentation (RunIdentity::requestHash); the SHA-256 of the shard's tensors and of the starting
    // weights; the effective intra-op thread count (`threads`, or libtorch's current count when 0); the
    // resolved device; the libtorch version. resume() recomputes it with the starting-weights hash stored in
    // the checkpoint and refuses a checkpoint whose parts differ, naming the part.
    QString fingerprint(const Dataset& shard, const TensorBundle& initialWeights) const;
};

struct TrainProgress
{
    int epoch = 0;   // 0-based local epoch
    qint64 step = 0; // mini-batches done, over all local epochs
    qint64 totalSteps = 0;
    qint64 samples = 0;
    double meanLoss = 0.0; // over the samples so far
    double samplesPerSecond = 0.0;
    double seconds = 0.0;
};

enum class TrainControl
{
    Continue,
    Checkpoint,        // write a checkpoint now, then continue
    CheckpointAndStop, // write a checkpoint and return with TrainOutcome::Status::Stopped
    Cancel,            // return at once with TrainOutcome::Status::Cancelled, writing nothing
};

struct TrainHooks
{
    // Called after every mini-batch. A caller pauses training by blocking in here.
    std::function<TrainControl(const TrainProgress&)> betweenBatches;
    // Called before every mini-batch with the samples trained so far (resumed runs included): the learning
    // rate of that mini-batch. Unset: the request's optimizer's rate throughout. gleaner-sim's single process
    // follows a job's schedule with it; agents train a subtask at the one rate their manifest names.
    std::function<double(qint64 samples)> learningRate;
};

struct TrainOutcome
{
    enum class Status
    {
        Finished,
        Stopped,
        Cancelled
    };
    Status status = Status::Finished;
    TensorBundle weights; // the trained weights when Finished; empty otherwise
    double meanLoss = 0.0;
    qint64 samples = 0; // samples processed in total (local epochs x shard size when Finished)
    qint64 steps = 0;
    double seconds = 0.0; // training time, summed over resumed runs
    int checkpointsWritten = 0;
    TensorBundle optimizerState; // when Finished: the local optimizer's state at the end (see TrainRequest)
};

class Trainer
{
public:
    // Starts from `initialWeights` (which must match the model spec). Checkpoints record the run's identity,
    // including the hash of `initialWeights`, so only this run can resume them.
    static Result<TrainOutcome> train(const TrainRequest& request, const TensorBundle& initialWeights,
                                      const Dataset& shard, const TrainHooks& hooks = {});
    // Continues from the checkpoint at request.checkpointPath. Refuses a damaged checkpoint, and one written
    // for another request, shard, thread count, device or libtorch version, with a message naming which.
    static Result<TrainOutcome> resume(const TrainRequest& request, const Dataset& shard,
                                       const TrainHooks& hooks = {});
};

} // namespace gleaner::ml
