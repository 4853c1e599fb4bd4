#pragma once
// The checks an uploaded result passes before it may touch the server weights: a well-formed safetensors file,
// exactly the model's tensor names, shapes and dtypes, every value finite, the metadata the protocol asks for,
// and numbers bounded by what the subtask could honestly have produced: no more samples than its shard holds
// times its local epochs, integer buffers (BatchNorm's num_batches_tracked) counted up by at most its number of
// mini-batches from the weights it was handed, and the distance it moved from those weights measured (the state
// thread compares it with the job's UpdateBound). Runs on the HTTP side's checker thread, so a bad upload costs
// the state thread nothing.
//
// Result metadata (safetensors "__metadata__", all strings):
//   gleaner.base_version   the server version the agent trained from (must match the lease's)
//   gleaner.samples        samples trained
//   gleaner.nonce          the nonce of the lease's signed manifest: binds the file to the lease it was made for
//   gleaner.loss           mean training loss (optional)
//   gleaner.train_seconds  training time (optional)

#include "Result.h"
#include "spec/UploadSpec.h"
#include "tensor/TensorBundle.h"

#include <deque>
#include <functional>

namespace gleaner::coordinator {

// What an upload for one lease must match and may claim; decided on the state thread from the lease.
struct UpdateExpectations
{
    TensorBundle schema;     // names, shapes and dtypes
    QString baseWeightsSha;  // the weights file the lease handed out ...
    QString baseWeightsPath; // ... and where it lies
    QString nonce;           // the nonce signed into the lease's manifest, which the result must carry
    qint64 maxSamples = 0;   // the shard's samples x local epochs
    qint64 maxSteps = 0;     // mini-batches the subtask runs: ceil(samples / batch size) x local epochs
    UploadSpec upload;       // the job's upload encoding, which the manifest announced (full fp32 is always taken)
    // The workunit's first result, when one was received from the same base version and its file is still kept:
    // this upload is then a replica and is compared with it.
    QString firstResultPath;
};

struct ReceivedUpdate
{
    TensorBundle weights; // full weights, decoded when the upload was an encoded update
    UploadSpec::Encoding encoding = UploadSpec::Encoding::Fp32; // as the upload came
    qint64 uploadBytes = 0;                                     // the body's size, as it came over the wire
    qint64 baseVersion = 0;
    qint64 samples = 0;
    double loss = 0.0;
    double trainSeconds = 0.0;
    double step = 0.0;     // ||weights - base||, over the floating-point tensors
    double baseNorm = 0.0; // ||base||
    std::optional<double> replicaDistance; // ||weights - first result||, when the expectations named one
};

// The base weights of recent uploads, read once and kept while uploads keep naming them (checker thread only):
// agents train from the few most recently published versions.
class BaseWeightsCache
{
public:
    struct Entry
    {
        QString sha256;
        TensorBundle weights;
        double norm = 0.0;
    };
    Result<const Entry*> get(const QString& sha256, const QString& path);

private:
    static constexpr size_t kEntries = 3;
    std::deque<Entry> m_entries; // most recently used first
};

namespace UpdateChecker {

// Integer buffers count mini-batches: those of `weights` hold `base`'s count plus between 0 and `maxSteps`. An
// upload is held to it, and so is a handed-back checkpoint, whose counts the result trained on from it carries.
Status checkCounters(const TensorBundle& weights, const TensorBundle& base, qint64 maxSteps);
// The largest body a result upload of this model may have: the tensors plus room for the header and metadata.
qint64 maxUploadBytes(const TensorBundle& schema);
// Reads the file (decompressing zstd and decoding an encoded update against the base, both bounded by the
// model's size), checks it against the expectations and the weights the lease handed out (from
// BaseWeightsCache: a coordinator that cannot read them answers 503, it is not the agent's fault); the error
// says what is wrong in words an agent's log can show.
Result<ReceivedUpdate> check(const QString& path, const UpdateExpectations& expected,
                             const BaseWeightsCache::Entry& base);

// An update file as the coordinator keeps it: as it came (an encoded update stays encoded: a fraction of the disk,
// and no 20 MB rewrite on the way to the answer), whose base the coordinator keeps until a snapshot holds it. This
// reads it back, as full weights: read (zstd undone, at most `maxBytes`), then decoded against
// `base()` when it is an encoded update (`base` is asked only then).
Result<TensorBundle> readKept(const QString& path, qint64 maxBytes, const std::function<Result<TensorBundle>()>& base);

} // namespace UpdateChecker
} // namespace gleaner::coordinator
