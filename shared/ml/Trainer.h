#pragma once
// The training core of one subtask: from a model spec, starting weights and a shard, run the local epochs and
// return the new weights with the mean loss and the number of samples. Between mini-batches it asks its
// caller what to do (continue, pause by blocking, checkpoint, checkpoint and stop, cancel), so throttling and
// pausing happen at batch granularity and no work is lost. Deterministic for a seed and a thread count: a run
// resumed from a checkpoint ends with the same weights, bit for bit, as one that never stopped.

#include "Result.h"
#include "ml/data/Dataset.h"
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
    quint64 seed = 0; // data order of every local epoch derives from it
    QString device = QStringLiteral("cpu");
    int threads = 0;                         // intra-op threads; 0 leaves libtorch's default
    QString checkpointPath;                  // empty: no checkpoints
    double checkpointIntervalSeconds = 60.0; // periodic checkpoints; 0 only on request

    // Identifies everything that shapes the result; a checkpoint resumes only a request with the same one.
    QString fingerprint(qint64 shardSamples) const;
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
};

class Trainer
{
public:
    // Starts from `initialWeights` (which must match the model spec).
    static Result<TrainOutcome> train(const TrainRequest& request, const TensorBundle& initialWeights,
                                      const Dataset& shard, const TrainHooks& hooks = {});
    // Continues from the checkpoint at request.checkpointPath, refusing one written for another request.
    static Result<TrainOutcome> resume(const TrainRequest& request, const Dataset& shard,
                                       const TrainHooks& hooks = {});
};

} // namespace gleaner::ml
