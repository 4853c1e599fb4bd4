#pragma once
// The folder a worker trains in, prepared by the agent once the manifest's signature and every file's hash
// have been checked (the worker trusts what it finds here and never touches the network):
//   manifest.json           the verified manifest, exactly as signed (docs/protocol.md, section 7)
//   weights.safetensors     the starting weights (role "weights")
//   shard.safetensors       the training data (role "shard")
//   model.pt                a TorchScript job's archive (role "model"); zoo models are built from the manifest
//   optimizer-in.safetensors  optional: the local optimizer's state an earlier subtask of the job ended with
//   residual-in.safetensors   optional: what earlier uploads of the job left out (error feedback, UpdateCodec)
//   handed-checkpoint.safetensors  optional (role "checkpoint"): the checkpoint another agent handed back when it
//                           left; the worker resumes from it (protocol 6.8)
// and what the worker writes there:
//   checkpoint.safetensors  model, optimizer and data position, every N seconds and on request
//   result.safetensors      the trained weights with the metadata the coordinator asks for, or the update encoded
//                           as the manifest's "upload" asks (then zstd-compressed when it says so)
//   optimizer.safetensors   the local optimizer's state at the end, which the agent keeps for the job's next one
//   residual.safetensors    what this upload left out, which the agent keeps for the job's next one

#include "Result.h"
#include "spec/AugmentSpec.h"
#include "spec/ModelSpec.h"
#include "spec/OptimizerSpec.h"
#include "spec/UploadSpec.h"

#include <QString>

namespace gleaner::agent {

struct TaskFolder
{
    QString dir;
    ModelSpec model;
    OptimizerSpec optimizer;
    int localEpochs = 1;
    qint64 steps = 0; // mini-batches the coordinator sized the subtask to (0: whole local epochs)
    int batchSize = 32;
    quint64 seed = 0;
    AugmentSpec augment; // the manifest's hyperparameters.augment; off without one
    qint64 baseVersion = 0;
    QString leaseId;
    QString nonce; // the manifest's, copied into the result so that the coordinator can tell which lease it is for
    UploadSpec upload;     // how the result is sent (the manifest's "upload"; full fp32 weights without one)
    QString uploadProblem; // why the manifest's "upload" could not be read (the result then goes as fp32)

    QString manifestPath() const;
    QString modelPath() const;
    QString weightsPath() const;
    QString shardPath() const;
    QString checkpointPath() const;
    QString handedCheckpointPath() const;
    QString resultPath() const;
    QString optimizerInPath() const;
    QString optimizerOutPath() const;
    QString residualInPath() const;
    QString residualOutPath() const;

    // Reads manifest.json; the error names the file and the field.
    static Result<TaskFolder> open(const QString& dir);
};

} // namespace gleaner::agent
