#pragma once
// What the weights thread (WeightsKeeper) reports to whoever keeps the jobs: each call is made on the weights
// thread, or for a validation on the validation thread, and the listener hands it to its own thread. The
// keeper knows nothing of its listener beyond this.

#include "aggregation/PublishedWeights.h"

#include <QString>

#include <optional>

namespace gleaner::coordinator {

class WeightsListener
{
public:
    virtual ~WeightsListener() = default;

    // Update `seq` is folded in: the server weights are at `version`.
    virtual void applied(qint64 jobId, qint64 seq, qint64 version) = 0;
    // Update `seq` is not folded in (`reason`); `agentsFault` false when the coordinator lost it.
    virtual void foldRefused(qint64 jobId, qint64 seq, const QString& reason, bool agentsFault) = 0;
    // A publication asked for: what it gave, or nullopt when it failed or the job is gone.
    virtual void published(qint64 jobId, std::optional<PublishedWeights> published, bool forParked) = 0;
    // A snapshot of the weights at `version` (holding every update up to `lastSeq`) is written as blob `sha`,
    // the rule's state as `ruleSha` (empty: none).
    virtual void snapshotWritten(qint64 jobId, qint64 version, qint64 lastSeq, const QString& sha,
                                 const QString& ruleSha) = 0;
    virtual void validated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy,
                           double loss) = 0;
    virtual void validationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error) = 0;
    // The rule measured the job's gradient noise scale anew (a round ended) at `version` (NoiseScale).
    virtual void widthMeasured(qint64 jobId, qint64 version, double noiseScale)
    {
        (void)jobId;
        (void)version;
        (void)noiseScale;
    }
};

} // namespace gleaner::coordinator
