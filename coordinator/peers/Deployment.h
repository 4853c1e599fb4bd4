#pragma once
// This coordinator as one of its deployment's, several coordinators on one database and one shared folder
// (docs/scale-out.md): that they are one deployment (one identity, one shared folder); what it learns of the
// agents, leases and jobs the others made when its own caches do not know them; and, every few seconds, the
// jobs, validations, counts, quarantines and revocations the others changed, the retired files none of them
// needs any more, and (the housekeeper) the updates a stopped coordinator received and never folded. Alone,
// the same lookups serve: a lease or agent not in memory is read from the database. State thread, but for the
// two thread-safe lookups.

#include "Result.h"
#include "admission/AdmissionCache.h"
#include "jobs/JobState.h"
#include "util/Clock.h"
#include "util/SerialExecutor.h"

#include <QSet>
#include <QString>

#include <functional>
#include <map>
#include <optional>

namespace gleaner::coordinator {

class AgentStanding;
class DataDirectory;
class Database;
class HandBacks;
class JobDesk;
class JobRecords;
class JobTakeUp;
class JobTallies;
class Scheduler;
class SigningKeys;
class WeightsKeeper;
struct CoordinatorConfig;

class Deployment
{
public:
    struct Hooks
    {
        // Deletes the retired weights files no job needs any more, nor `alsoNeeded`.
        std::function<void(const QSet<QString>& alsoNeeded)> removeRetiredWeights;
        // Whether this coordinator does the deployment's housekeeping now.
        std::function<bool()> doesHousekeeping;
    };
    struct Parts
    {
        std::map<qint64, JobState>& jobs;
        Database& db;
        Scheduler& scheduler;
        AdmissionCache& admission;
        JobRecords& records;
        JobTakeUp& takeUp;
        JobDesk& jobDesk;
        JobTallies& tallies;
        AgentStanding& standing;
        HandBacks& handBacks;
        WeightsKeeper& weights;
        SerialExecutor& state;
    };
    // `storage`: the shared folder (or the data directory alone).
    Deployment(Parts parts, const DataDirectory& dir, const CoordinatorConfig& config, const Clock& clock,
               QString storage, Hooks hooks);

    // At start (before the owners exist), among several: this coordinator's signing key and TLS certificate
    // are the deployment's (their fingerprints are kept in the database by the first one), and its shared
    // folder is the deployment's (marked with `deploymentId`).
    static Status checkIdentity(Database& db, const DataDirectory& dir, const QString& storage,
                                const QString& deploymentId, const SigningKeys& keys);
    // The lease, also when another coordinator issued it after this one last looked at its job; null when the
    // database does not know it as one that may still deliver.
    Lease* findLease(const QString& leaseId);
    // Thread-safe (asks the state thread and waits): brings every live job's leases up to date with what the
    // others wrote, and the admission cache with them.
    void catchUpOnLeases();
    // Thread-safe: what the database says of an agent whose token hash the admission cache does not know
    // (another coordinator enrolled it). Found, it is cached; nullopt when no agent has that token.
    std::optional<AdmissionCache::AgentEntry> lookUpAgent(const QString& tokenHash);
    // The scheduler learnt of a lease another coordinator wrote: this one takes its uploads and downloads
    // alike, and answers a closed one's repeats with the same 409.
    void leaseLearnt(const Lease& lease, const JobState& job);
    // Jobs that others submitted, and jobs that others paused, resumed or ended, as the database has them.
    void followJobs();
    // Validations the housekeeper made (a job's history grew), so that `job status` and the dashboard agree
    // whichever coordinator answers, and one that takes the housekeeping over does not validate an epoch
    // again.
    void followValidations();
    // Every few seconds (the tick): follows what the others changed, removes the retired files none needs,
    // and the housekeeper folds the updates a stopped coordinator received and never folded.
    void keepSharedHouse(qint64 nowMs);

private:
    // Every job's counts as the database holds them, after adding the file bytes this one sent.
    void followCounts();
    // Takes every running or paused job's lock, which applies what other coordinators changed.
    Status lockLiveJobs();

    Parts m_parts;
    const DataDirectory& m_dir;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    const QString m_storage;
    const Hooks m_hooks;
    qint64 m_lastLookMs = 0; // when keepSharedHouse last ran
};

} // namespace gleaner::coordinator
