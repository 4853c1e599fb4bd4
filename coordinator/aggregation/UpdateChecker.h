#pragma once
// The checks an uploaded result passes before it may touch the server weights: a well-formed safetensors file,
// exactly the model's tensor names, shapes and dtypes, every value finite, and the metadata the protocol asks
// for. Runs on the HTTP thread that received the upload, so a bad upload costs the state thread nothing.
//
// Result metadata (safetensors "__metadata__", all strings):
//   gleaner.base_version   the server version the agent trained from (must match the lease's)
//   gleaner.samples        samples trained
//   gleaner.loss           mean training loss (optional)
//   gleaner.train_seconds  training time (optional)

#include "Result.h"
#include "tensor/TensorBundle.h"

namespace gleaner::coordinator {

struct ReceivedUpdate
{
    TensorBundle weights;
    qint64 baseVersion = 0;
    qint64 samples = 0;
    double loss = 0.0;
    double trainSeconds = 0.0;
};

namespace UpdateChecker {

// The largest body a result upload of this model may have: the tensors plus room for the header and metadata.
qint64 maxUploadBytes(const TensorBundle& schema);
// Reads and checks the file; the error says what is wrong in words an agent's log can show.
Result<ReceivedUpdate> check(const QString& path, const TensorBundle& schema);

} // namespace UpdateChecker
} // namespace gleaner::coordinator
