#pragma once
// The checkpoint of a subtask in training: one safetensors file holding everything needed to continue exactly
// where training stopped, so that a resumed run ends with the same weights as an uninterrupted one.
//   tensors  "model.<name>"       the model's parameters and buffers
//            "optim.<name>.<slot>" the optimizer's state per parameter, "optim.steps"
//            "rng.default"        torch's generator state
//   metadata gleaner.checkpoint = 1, and the fields of CheckpointInfo
// The agent reads CheckpointInfo without torch to report how far a paused subtask got.

#include "Result.h"
#include "tensor/TensorBundle.h"

namespace gleaner::ml {

struct CheckpointInfo
{
    QString fingerprint; // of the training request; a checkpoint resumes only the request that wrote it
    int epoch = 0;       // local epoch in progress (0-based)
    qint64 batch = 0;    // next mini-batch of that epoch
    qint64 samples = 0;  // samples trained so far
    qint64 totalSteps = 0;
    double lossSum = 0.0; // sum of per-sample losses so far (exact: written with 17 significant digits)
    double seconds = 0.0; // training time so far

    void writeTo(TensorBundle& bundle) const;
    static Result<CheckpointInfo> readFrom(const TensorBundle& bundle);
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
inline QString rngTensor()
{
    return QStringLiteral("rng.default");
}
} // namespace Checkpoint

} // namespace gleaner::ml
