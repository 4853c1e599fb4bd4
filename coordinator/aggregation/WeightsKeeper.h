#pragma once
// The server weights of every active job, on a thread of their own. Accepted updates are folded in one at a time
// in the order they were received (the aggregation rule decides how), the result is published as a weights file
// for new leases at most once per publish interval, and snapshotted to disk every N updates or T seconds, so that
// a restart replays only the updates received after the last snapshot.

#include "aggregation/AggregationRule.h"
#include "core/SerialExecutor.h"
#include "store/BlobStore.h"
#include "tensor/TensorBundle.h"

#include <functional>
#include <map>
#include <memory>

namespace gleaner::coordinator {

class Coordinator;

struct ReplayedUpdate
{
    qint64 seq = 0;
    QString file;
    UpdateContext context;
};

class WeightsKeeper
{
public:
    WeightsKeeper(Coordinator& coordinator, BlobStore& blobs);
    ~WeightsKeeper();

    SerialExecutor& executor() { return m_thread; }

    // Takes charge of a job's weights at `version`, then folds in `replay` (read from disk) in order.
    void load(qint64 jobId, TensorBundle weights, qint64 version, const AggregationSpec& rule,
              std::vector<ReplayedUpdate> replay);
    void apply(qint64 jobId, qint64 seq, TensorBundle update, UpdateContext context);
    void publish(qint64 jobId);
    // Evaluates the weights as they stand after everything queued before this call; `epochEnd` marks the
    // validation of epoch `epoch`'s end (false: an intermediate point).
    void validate(qint64 jobId, int epoch, bool epochEnd);
    // Writes a snapshot when `force` or when the job's snapshot interval has passed.
    void snapshot(qint64 jobId, bool force);
    void exportWeights(qint64 jobId, std::function<void(Result<BlobInfo>)> done);
    void unload(qint64 jobId);

private:
    struct JobWeights
    {
        TensorBundle weights;
        qint64 version = 0;
        qint64 lastSeq = 0;
        qint64 snapshotVersion = 0;
        qint64 snapshotMs = 0;
        qint64 publishedVersion = -1;
        std::unique_ptr<AggregationRule> rule;
    };
    void applyNow(qint64 jobId, JobWeights& job, qint64 seq, const TensorBundle& update, UpdateContext context);
    void validateNow(qint64 jobId, const JobWeights& job, int epoch, bool epochEnd);
    // The weights as a safetensors blob, stamped with their version (publish, snapshot and export all need it).
    Result<BlobInfo> writeBlob(JobWeights& job);

    Coordinator& m_coordinator;
    BlobStore& m_blobs;
    std::map<qint64, JobWeights> m_jobs; // weights thread only
    SerialExecutor m_thread;             // last: runs tasks that use the members above
};

} // namespace gleaner::coordinator
