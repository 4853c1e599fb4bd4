#pragma once
// What the weights thread reports back, on the state thread (through ListenerRelay): updates folded in or not
// (the database, the job's counts, the dashboard, a refusal held against its agent), publications (the
// weights leases hand out, the lease requests parked for them) and snapshots (their rows, and the update
// files they make unneeded). Validations are the JobDesk's.

#include "aggregation/WeightsListener.h"
#include "jobs/JobState.h"
#include "util/Clock.h"

#include <QString>

namespace gleaner::coordinator {

class AgentStanding;
class DashboardFeed;
class Database;
class JobDesk;
class JobTallies;
class LeasePacer;
struct CoordinatorConfig;
namespace metrics {
class CoordinatorMetrics;
}

class FoldReports final : public WeightsListener
{
public:
    struct Parts
    {
        Database& db;
        JobDesk& jobDesk;
        JobTallies& tallies;
        AgentStanding& standing;
        LeasePacer& pacer;
        DashboardFeed& feed;
        metrics::CoordinatorMetrics& metrics;
    };
    // `storage`: where updates/ is (update rows name files relative to it).
    FoldReports(Parts parts, const CoordinatorConfig& config, const Clock& clock, QString storage);

    void applied(qint64 jobId, qint64 seq, qint64 version) override;
    // The update is marked and shown to the admin (job status, metrics, log) and, when it was the agent's
    // fault and not a handed-back checkpoint's, counted against the agent.
    void foldRefused(qint64 jobId, qint64 seq, const QString& reason, bool agentsFault) override;
    // `forParked`: parked lease requests asked for it (LeasePacer), as against the tick or a take-over.
    void published(qint64 jobId, std::optional<PublishedWeights> published, bool forParked) override;
    void snapshotWritten(qint64 jobId, qint64 version, qint64 lastSeq, const QString& sha,
                         const QString& ruleSha) override;
    void validated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy,
                   double loss) override;
    void validationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error) override;
    // The job's width (JobWidth: the scheduler's cap, job status, the dashboard's "width" event).
    void widthMeasured(qint64 jobId, qint64 version, double noiseScale) override;

private:
    Parts m_parts;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    const QString m_storage;
};

} // namespace gleaner::coordinator
