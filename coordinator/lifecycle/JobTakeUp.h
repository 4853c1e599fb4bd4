#pragma once
// Taking jobs up and setting them going: a job read back from the database and its files (every job at start,
// and among several coordinators a job submitted or imported at another one), a new job's data set imported
// on the importer thread, and the server weights, replay and test split handed to the weights and validation
// threads. Among several coordinators, a job this coordinator cannot take up (its mount of the shared folder
// or its connection failed) is left to the others, tried again later, and its agents are told to try again.
// State thread only, but for the importer's work.

#include "Result.h"
#include "aggregation/WeightsKeeper.h"
#include "http/HttpTypes.h"
#include "jobs/JobImporter.h"
#include "jobs/JobState.h"
#include "util/Clock.h"
#include "util/SerialExecutor.h"

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace gleaner::coordinator {

class AdmissionCache;
class BlobStore;
class Database;
class HandBacks;
class JobRecords;
class JobTallies;
class Scheduler;
class SchedulerTables;
class ValidationRunner;
struct CoordinatorConfig;

class JobTakeUp
{
public:
    struct Hooks
    {
        // Ends the job (JobDesk::finish); `persist` false: the database says so already.
        std::function<void(JobState& job, JobStatus status, const QString& reason, bool persist)> finish;
        // Starts the validations the job's complete epochs are due.
        std::function<void(JobState& job)> scheduleValidations;
        // Among several coordinators: brings the jobs as the database has them (another one changed this
        // one).
        std::function<void()> followJobs;
    };
    struct Parts
    {
        std::map<qint64, JobState>& jobs;
        Database& db;
        JobRecords& records;
        Scheduler& scheduler;
        SchedulerTables& schedulerTables;
        JobTallies& tallies;
        AdmissionCache& admission;
        HandBacks& handBacks;
        WeightsKeeper& weights;
        ValidationRunner& validation;
        BlobStore& blobs;
        SerialExecutor& importer; // imports, which may take minutes
        SerialExecutor& state;    // where onImported runs
        // How many jobs are left to the others: the coordinator's, read by the HTTP threads (notServedHere)
        // for as long as it lives.
        std::atomic<int>& leftCount;
    };
    // `scratch`: the folder imports unpack in; `storage`: where updates/ is (update rows are relative to it).
    JobTakeUp(Parts parts, const CoordinatorConfig& config, const Clock& clock, QString scratch,
              QString storage, Hooks hooks);

    // Reads every job at start and sets the live ones going; closed leases keep answering with why they
    // closed. `importHere`: a job whose import a stop interrupted is imported by this coordinator.
    Status loadAll(bool importHere);
    // Reads what a job has in the database beside its row (history, counts, work, weights) and sets it going.
    // `importHere`: a job still being imported is imported by this coordinator. False: among several
    // coordinators, what the job runs on could not be read here (leaveToOthers); the caller lets the job go
    // from memory. Alone, such a job fails.
    bool prepare(JobState& job, bool importHere);
    // Imports the job's data set on the importer thread; the caller holds its import (Database::claimImport),
    // which the import's end gives back.
    void startImport(qint64 jobId);
    // Imports the job here when its import is free (a new job, or one whose importer stopped).
    void importWhenUnclaimed(qint64 jobId);
    // The job's received updates that its weights may not hold, in the order they came, after the snapshot at
    // `snapshotVersion` whose last update was `afterSeq`. `receivedBeforeMs` (among several coordinators):
    // only those not folded yet, received before then (a coordinator that received them stopped before it
    // folded).
    Result<std::vector<ReplayedUpdate>> updatesToReplay(JobState& job, qint64 afterSeq,
                                                        qint64 snapshotVersion, qint64 receivedBeforeMs = 0);

    // Among several coordinators: this one could not take a running job up; the job is the deployment's, and
    // the others serve it. Tried again, less often while it keeps failing.
    void leaveToOthers(qint64 jobId, const QString& why);
    // Whether a job left to others may be tried again now; `servedAgain` once it was taken up.
    bool mayTryAgain(qint64 jobId) const;
    void servedAgain(qint64 jobId);
    // 404 for a job the deployment does not have; 503, with why, for one left to the others.
    HttpResponse noSuchJob(qint64 jobId) const;
    // 503 for an agent's request about its lease `leaseId` (when empty: about any of its open leases) while
    // that lease's job is left to the others; nullopt otherwise. Agents are not told why (paths, database
    // errors).
    std::optional<HttpResponse> leaseLeftToOthers(const QString& agentId, const QString& leaseId) const;

private:
    void onImported(qint64 jobId, Result<ImportedJob> imported);
    // Sets a job going on what was read of it: `weights` at `version`, `schema` (the job's initial weights,
    // what every upload must match), the updates received after that version (`replay`, folded again in
    // order) and the aggregation rule's state the snapshot left (`ruleState`, empty: none).
    void activate(JobState& job, const TensorBundle& weights, TensorBundle schema, qint64 version,
                  std::vector<ReplayedUpdate> replay, TensorBundle ruleState);
    JobState* findJob(qint64 jobId);

    Parts m_parts;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    const QString m_scratch;
    const QString m_storage;
    const Hooks m_hooks;
    std::set<qint64> m_importing; // jobs this coordinator imports now
    struct Left
    {
        QString reason;
        qint64 retryAtMs = 0;
        qint64 waitMs = 0;
    };
    std::map<qint64, Left> m_left; // jobs not taken up here (leaveToOthers); their number is Parts::leftCount
};

} // namespace gleaner::coordinator
