#pragma once
// Leases that come back without a result: the agent cannot run the subtask and gives the lease back (protocol
// 6.7), or it is leaving and hands the lease back with the checkpoint its worker wrote (6.8), so that the
// next agent resumes where it stopped instead of waiting for the lease's deadline and starting over. Also the
// handed-back checkpoints kept on disk, within the coordinator's handback_cap_mb. State thread only.

#include "http/HttpTypes.h"
#include "jobs/JobState.h"
#include "jobs/LeaseLookup.h"
#include "scheduling/CheckpointChecker.h"
#include "store/BlobStore.h"
#include "util/Clock.h"

#include <QHash>
#include <QJsonObject>
#include <QSet>

#include <functional>
#include <map>
#include <optional>

namespace gleaner::coordinator {

class AdmissionCache;
class AgentStanding;
class Database;
class Enrollment;
class Scheduler;
struct CoordinatorConfig;

class HandBacks
{
public:
    struct Parts
    {
        std::map<qint64, JobState>& jobs;
        Database& db;
        Scheduler& scheduler;
        AdmissionCache& admission;
        Enrollment& enrollment;
        AgentStanding& standing;
        BlobStore& blobs;
    };
    HandBacks(Parts parts, const CoordinatorConfig& config, const Clock& clock, LeaseLookup leases);

    // The agent gives the lease back because it cannot run the subtask; `report` is the request body,
    // {"reason", "stage"}. Committed before the answer: the lease is closed as failed, its workunit goes back
    // to the queue at once (unless done or held by another lease) and the agent's record counts a failed
    // subtask; unless the lease resumed a handed-back checkpoint, which may be what failed: that checkpoint
    // is discarded and nothing is counted.
    HttpResponse failed(const QString& agentId, const QString& leaseId, const QJsonObject& report);
    // What a checkpoint handed back with the lease must match (CheckpointChecker); nullopt when the lease is
    // not open, or its job takes no work.
    std::optional<CheckpointExpectations> checkpointExpectationsFor(const QString& leaseId) const;
    // The agent is leaving and hands the lease back. `checkpoint`, when the agent sent one and it passed
    // CheckpointChecker, is the blob it was stored as (`refusal` says why one sent was not taken). Committed
    // before the answer: the lease closes as handed back, its workunit goes back to the queue at once (unless
    // done or held by another lease), resuming from the checkpoint when it is kept (it must also stay within
    // the job's update bound and the coordinator's handback_cap_mb). Not counted against the agent. A
    // checkpoint that CheckpointChecker refused (`refusedByCheck`: malformed, another workunit's, hostile)
    // counts against the agent like a refused result.
    HttpResponse handBack(const QString& agentId, const QString& leaseId, std::optional<BlobInfo> checkpoint,
                          std::optional<CheckedCheckpoint> checked, const QString& refusal,
                          bool refusedByCheck = false);

    // A checkpoint the stored workunits or leases name (read at a job's take-up): kept, and counted in the
    // cap.
    void keep(const QString& sha256, qint64 size) { m_checkpoints.insert(sha256, size); }
    // Deletes the handed-back checkpoints that no workunit resumes from and no lease names any more, nor
    // `alsoNeeded` (those other coordinators of the deployment still need).
    void removeUnused(const QSet<QString>& alsoNeeded = {});

private:
    JobState* findJob(qint64 jobId);

    Parts m_parts;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    const LeaseLookup m_leases;
    QHash<QString, qint64>
        m_checkpoints; // handed-back checkpoint blobs kept, and their sizes (handback_cap_mb)
};

} // namespace gleaner::coordinator
