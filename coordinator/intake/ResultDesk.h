#pragma once
// The results of leases, from the checker thread's hop to the queued fold: what an upload must match,
// recording it durably before the answer, refusing it, and the later results of a workunit that already has
// its first (compared with it, never folded in twice). ResultIntake says what a result counts for; this desk
// stores it, records it in one transaction, brings memory after the commit and hands the update to the
// weights thread. State thread only.

#include "aggregation/UpdateChecker.h"
#include "http/HttpTypes.h"
#include "jobs/JobState.h"
#include "jobs/LeaseLookup.h"
#include "scheduling/ResultIntake.h"
#include "util/Clock.h"

#include <functional>
#include <map>
#include <optional>

namespace gleaner::coordinator {

class AdmissionCache;
class AgentStanding;
class BlobStore;
class Database;
class DashboardFeed;
class Enrollment;
class JobTallies;
class Scheduler;
class WeightsKeeper;
struct CoordinatorConfig;
namespace metrics {
class CoordinatorMetrics;
}

class ResultDesk
{
public:
    struct Hooks
    {
        LeaseLookup leases;
        // An update of the job's epoch was queued for its fold: the validations it may make due.
        std::function<void(JobState& job, int epoch)> queued;
    };
    struct Parts
    {
        std::map<qint64, JobState>& jobs;
        Database& db;
        Scheduler& scheduler;
        ResultIntake& intake;
        AdmissionCache& admission;
        Enrollment& enrollment;
        AgentStanding& standing;
        JobTallies& tallies;
        WeightsKeeper& weights;
        DashboardFeed& feed;
        metrics::CoordinatorMetrics& metrics;
        const BlobStore& blobs;
    };
    // `storage`: where updates/ is (DataDirectory::storageRoot); update rows name files relative to it.
    ResultDesk(Parts parts, const CoordinatorConfig& config, const Clock& clock, QString storage,
               Hooks hooks);

    // What a lease's upload must match and may claim (UpdateChecker); nullopt when the lease is unknown.
    std::optional<UpdateExpectations> expectationsFor(const QString& leaseId) const;
    // The upload at `file` has passed UpdateChecker: records it durably and queues it for aggregation (202),
    // or compares it with its workunit's first result, or refuses it.
    HttpResponse receive(const QString& agentId, const QString& leaseId, const QString& file,
                         ReceivedUpdate update);
    // An upload for this lease failed the checks (UpdateChecker, the job's bound): the lease is closed, its
    // workunit goes back to the queue and the agent's record counts an invalid result. When the lease resumed
    // a handed-back checkpoint, whatever was refused may be the checkpoint's doing: the checkpoint is
    // discarded (the next lease starts the workunit afresh) and the refusal counts against the agent that
    // handed it back, not this one.
    HttpResponse refuse(const QString& agentId, const QString& leaseId, const QString& reason);

private:
    // After the transaction that recorded an accepted result committed, both for one folded in (`seq`,
    // `file`) and for one compared with its workunit's first: the intake's memory, the admission cache, the
    // agent's record.
    void takeAccepted(ResultIntake::Verdict& verdict, const ResultIntake::Received& received, qint64 seq,
                      const QString& file);
    // A result for a workunit that already has its first result: compared with it, recorded, not folded in.
    HttpResponse resultOfDoneWorkunit(ResultIntake::Verdict& verdict, const ResultIntake::Received& received,
                                      const QString& file, const ReceivedUpdate& update);
    // Moves the upload next to the database under a name of this attempt's own, durably; answers its name
    // relative to the storage root.
    Result<QString> store(const QString& file, qint64 jobId, const QString& leaseId);

    Parts m_parts;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    const QString m_storage;
    const Hooks m_hooks;
};

} // namespace gleaner::coordinator
