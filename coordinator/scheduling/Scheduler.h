#pragma once
// The coordinator's scheduling decisions: which workunit an agent trains next, how long its lease lives, when
// a lease that missed its deadline gives its workunit to another agent, and when a job's next epoch opens and
// an epoch is due for validation.
//
// It owns the leases that may still deliver (open and expired ones) and works on the workunits and epochs of
// the jobs it is given (JobState). Time comes from a Clock, ids from an IdSource and every change goes to a
// SchedulerStore: the coordinator runs it on its database, the wall clock and random ids; gleaner-sim on
// memory, a simulated clock and counted ids. Both run exactly this code, so a change to scheduling is
// measured in the lab the day it is made. Not thread-safe: the coordinator uses it from its state thread
// only.
//
// Several coordinators on one database: every change to a job's workunits and leases is made in a transaction
// that first takes the job's lock (lockJob), which also brings this picture up to date with what the others
// wrote. A workunit is then never leased twice, and a result never completes a workunit another coordinator
// completed, whichever process the agent reached. Where the store grants in parallel (PostgreSQL), a grant
// takes the job's lock shared and claims its workunit's row instead, so that several coordinators lease one
// job at once; the grant that finds nothing pending turns the job's next grant to the exclusive lock, which
// catches the picture up, opens the next epoch or replicates a straggler.

#include "Result.h"
#include "jobs/JobState.h"
#include "scheduling/SchedulerStore.h"
#include "util/Clock.h"

#include <QHash>
#include <QMap>
#include <QSet>
#include <QStringList>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace gleaner::coordinator {

struct SchedulerLimits
{
    // A lease lives at most this many of its job's deadlines in all, however often its agent reports.
    int leaseLifetimeDeadlines = 6;
};

class Scheduler
{
public:
    using IdSource = std::function<QString()>;
    // Told of every lease that missed its deadline, after the store recorded it; `job` is null when the job is gone.
    using ExpiredObserver = std::function<void(const Lease& lease, const JobState* job)>;
    // Told of every lease that another coordinator wrote, as lockJob() learnt it (in any state).
    using LearntObserver = std::function<void(const Lease& lease, const JobState& job)>;

    Scheduler(std::map<qint64, JobState>& jobs, SchedulerStore& store, const Clock& clock, SchedulerLimits limits,
              IdSource ids);

    void setExpiredObserver(ExpiredObserver observer) { m_onExpired = std::move(observer); }
    void setLearntObserver(LearntObserver observer) { m_onLearnt = std::move(observer); }

    // Inside the caller's transaction: takes the job's lock until it ends and applies what other coordinators
    // changed (SchedulerStore::lockJob). Every method below that changes a job takes it itself; a caller that
    // decides on the job's picture before calling them (ResultIntake) takes it first. Leases in memory stay
    // where they are (a pointer to one stays good) unless the store says another coordinator closed them.
    Status lockJob(JobState& job);
    // Whether grants of one job run in parallel across coordinators (the store's choice).
    bool grantsInParallel() const { return m_store.grantsInParallel(); }
    // Inside the caller's transaction, before any job's lock: where grants run in parallel, the agent's lock
    // (its requests at several coordinators wait for each other) and the open leases it holds as stored, of
    // every job. Otherwise this picture's count, which is exact only once every running job's lock is held.
    Result<int> lockAgent(const QString& agentId);
    // Inside the caller's transaction: the job's lock as its next grant needs it (leaseNext takes it itself):
    // shared where grants run in parallel and the job has pending work, exclusive otherwise.
    Status lockForGrant(JobState& job);
    // Since the last call: a grant in parallel found nothing pending in some job, whose next grant takes the
    // exclusive lock (a caller that granted nothing asks again at once).
    bool takeEmptyClaims() { return std::exchange(m_emptyClaims, false); }
    // At start: the job's workunits and leases as the store holds them (SchedulerTables::loadJob).
    void adopt(JobState& job, const JobChanges& stored);

    // ---- leases
    const QMap<QString, Lease>& leases() const { return m_leases; }
    Lease* find(const QString& leaseId);
    int openLeasesOf(const QString& agentId) const;
    // How many agents train the job at once (adaptive-nesterov's period): those holding an open lease of it,
    // and those that delivered one within twice the job's recent median subtask time (an agent between two
    // subtasks is still at work; one gone for longer is not counted).
    int agentsTraining(qint64 jobId) const;
    // The agents other than `except` that hold an open lease of the job or wait for the publication that
    // holds their last result (JobState::unpublishedOf: they ask for their next lease as soon as it is out).
    int agentsAtWork(const JobState& job, const QString& except) const;
    // Whether the agent may take the job's work: the job has no cap (JobState::agentCap), or fewer agents
    // than the cap are at work on it (agentsAtWork), the asking agent not counted. An agent between two
    // subtasks keeps its place while it waits for its publication: a newcomer that asks meanwhile does not
    // take it (it would start without the other's local optimizer state and cache, and the other would wait).
    // An agent that did not come back once its result was published has no place. Among several coordinators,
    // the count is this picture's (exact under the job's exclusive lock; under grants in parallel, others'
    // newest grants may be missing).
    bool hasRoomFor(const JobState& job, const QString& agentId) const;
    // The job ended: what the scheduler learnt of its agents' activity goes (its leases close as they deliver or
    // expire).
    void forget(qint64 jobId);
    // The job leaves this coordinator's memory without ending (another coordinator of the deployment serves
    // it): its leases go too, so that nothing here acts on them. Answers their ids.
    QStringList drop(qint64 jobId);

    // The next workunit of `job` (which must be running and have published weights) for the agent: a pending
    // one of the oldest epoch, preferring one that resumes a handed-back checkpoint (work half done, on an
    // old base), then one whose shard the agent holds (`cached`: SHA-256 of its files); else, when the job
    // allows replicas, a straggler another agent holds. Opens the next epoch first when it is due. Records
    // the lease (store) with the job's published weights as its base, and answers it; nullopt when the job
    // has nothing for this agent now, or as many agents as it can use hold its leases (hasRoomFor). A
    // speed-aware job sizes the lease to the agent (stepsFor()). A workunit
    // with a resume point is leased with its base and size instead, naming its checkpoint.
    Result<std::optional<Lease>> leaseNext(JobState& job, const QString& agentId, const QSet<QString>& cached);

    // A progress report with mini-batch `step`: a step that moves keeps the lease alive one deadline from now; a
    // lease whose step stopped is kept one more deadline after it last moved, and none outlives
    // leaseLifetimeDeadlines deadlines. Records a new deadline.
    Status progressed(Lease& lease, JobState& job, qint64 step);

    // Every open lease whose deadline passed expires: its workunit goes back to the queue unless another lease
    // still holds it. An expired lease may still deliver (a late result counts once). Cheap when no deadline
    // passed: it only compares the clock with the earliest deadline.
    void expire();
    // Every open lease of the agent expires now (revoked or quarantined: its work goes to other agents).
    void expireAllOf(const QString& agentId);

    // The result of a lease was received. recordCompleted() writes the closed lease and the done workunit to the
    // store, inside the caller's transaction; completed() changes memory once that transaction committed (a done
    // workunit has no resume point any more).
    Status recordCompleted(JobState& job, const QString& leaseId);
    void completed(JobState& job, const QString& leaseId);
    // The lease closes without a result it counts (Refused, or Failed: given back): the store records it closed
    // as `closedAs`, it leaves memory, and its workunit goes back to the queue unless it is done or another lease
    // holds it. `job` may be null (the job is gone). Answers whether the workunit went back to the queue.
    bool released(JobState* job, const QString& leaseId, Lease::State closedAs);
    // The agent left and handed the lease back (protocol 6.8): it closes as HandedBack and its workunit goes back
    // to the queue at once, unless it is done or another lease holds it. `resume`, when given and the workunit
    // went back, is where its next lease starts (it replaces an older one). Answers whether the workunit went
    // back to the queue and `resume` was kept.
    struct HandBackOutcome
    {
        bool requeued = false;
        bool resumeKept = false;
    };
    HandBackOutcome handedBack(JobState* job, const QString& leaseId, std::optional<Workunit::ResumePoint> resume);
    // The workunit's resume point `checkpointSha` led to a result that was refused, or a worker that failed on it:
    // its next lease starts afresh. Answers the agent that handed it back, when it was still the workunit's resume
    // point (not discarded or replaced meanwhile) and the discard was recorded; the caller counts it there.
    std::optional<QString> discardResume(JobState* job, qint64 workunitId, const QString& checkpointSha);

    // ---- speeds (speed-aware work)
    // What one result showed of an agent's speed: `samples` trained in `seconds` (smoothed over its results).
    void noteSpeed(const QString& agentId, qint64 samples, double seconds);
    // Samples per second, smoothed; nullopt before the agent's first result.
    std::optional<double> speedOf(const QString& agentId) const;
    // The mini-batches a subtask of `shard` should take for the agent so that every agent reports at about the
    // cadence of the median agent: the whole local epochs times its speed over the median speed of the agents
    // with a known speed, within a quarter and four times. 0 (whole local epochs) when the job is not
    // speed-aware, the agent's speed is not known yet, or the size comes out unchanged.
    qint64 stepsFor(const JobState& job, int shard, const QString& agentId) const;
    static constexpr double kMinSizeFactor = 0.25;
    static constexpr double kMaxSizeFactor = 4.0;

    // ---- epochs
    // Creates the pending workunits of `epoch`, one per shard, and makes it the job's current epoch.
    Status createEpoch(JobState& job, int epoch);
    // Opens the next epoch when the current one has nothing pending and validation is far enough (overlap: at
    // most one epoch ahead of the last validated one; without overlap, none), up to the job's max epochs.
    void openNextEpochIfReady(JobState& job);
    // Complete epochs that have no end-of-epoch validation recorded or in flight; they count as in flight from now.
    std::vector<int> validationsDue(JobState& job);
    // The end-of-epoch validation of `epoch` is recorded / failed (it is due again).
    void validated(JobState& job, int epoch);
    void validationFailed(JobState& job, int epoch);

private:
    JobState* findJob(qint64 jobId);
    // The store's rows replace what memory holds of them (lockJob, adopt).
    void apply(JobState& job, const JobChanges& changes, bool learnt);
    // The job's leases whose deadline passed expire (under its lock).
    void expireLeasesOf(JobState* job, qint64 jobId, qint64 now);
    // Records a progress report's step on the lease and answers the deadline it earns (progressed()).
    qint64 deadlineAfter(Lease& lease, const JobState& job, qint64 step) const;
    // The halves of released() and handedBack() that run under the job's lock.
    bool release(JobState* job, const QString& leaseId, Lease::State closedAs);
    HandBackOutcome handBack(JobState* job, const QString& leaseId,
                             std::optional<Workunit::ResumePoint> resume);
    // Leases `unit` to the agent (under the job's lock, in the caller's transaction).
    Result<Lease> grant(JobState& job, Workunit& unit, const QString& agentId);
    // A new lease of `unit` for the agent, from the job's published weights or the unit's resume point.
    Lease newLease(const JobState& job, const Workunit& unit, const QString& agentId);
    // Under the job's shared lock: the store claims the workunit, and this picture learns it and the lease.
    Result<std::optional<Lease>> grantClaimed(JobState& job, const QString& agentId,
                                              const QSet<QString>& cached);
    // The state the store holds: a job ended by another coordinator is noted (lockJob, lockForGrant).
    static void noteStoredState(JobState& job, const JobChanges& stored);
    Workunit* choose(JobState& job, const QString& agentId, const QSet<QString>& cached);

    std::map<qint64, JobState>& m_jobs;
    SchedulerStore& m_store;
    const Clock& m_clock;
    SchedulerLimits m_limits;
    IdSource m_ids;
    ExpiredObserver m_onExpired;
    LearntObserver m_onLearnt;
    QMap<QString, Lease> m_leases;   // a map: pointers to its leases stay good while others are added
    QHash<QString, double> m_speeds; // agent -> samples per second, smoothed
    struct Activity
    {
        QHash<QString, qint64> lastDeliveredMs; // agent -> when its last result of the job came
        std::vector<qint64> recentDurationsMs;  // issue to result, the last kDurations subtasks
    };
    static constexpr size_t kDurations = 32;
    std::map<qint64, Activity> m_activity; // by job
    qint64 m_nextDeadlineMs = 0; // no open lease expires before this: expire() skips its scan until then
    std::set<qint64> m_grantUnderLock; // jobs whose next grant takes the exclusive lock (nothing to claim)
    bool m_emptyClaims = false;
};

} // namespace gleaner::coordinator
