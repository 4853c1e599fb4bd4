#pragma once
// Where the Scheduler's changes go: the coordinator's database (SchedulerTables), or nowhere but memory
// (gleaner-sim). The Scheduler calls these as it changes its picture, inside the transaction its caller
// holds; a failed write fails that transaction, and the caller answers the request with an error.

#include "Result.h"
#include "jobs/JobState.h"

#include <functional>
#include <vector>

namespace gleaner::coordinator {

// What the store holds of a job that the scheduler's picture may lack: rows another coordinator wrote.
struct JobChanges
{
    bool stale = false; // others changed the job since this process last saw it: the rest says what
    int epoch = 0;      // the job's highest epoch
    QString state;      // the job's state as stored, and why it ended (empty: a store that keeps none)
    QString reason;
    std::vector<Workunit>
        workunits; // workunits written since: state (pending or done), issued, resume, first result
    std::vector<Lease> leases; // leases written since, in any state
};

class SchedulerStore
{
public:
    virtual ~SchedulerStore() = default;

    // Inside the caller's transaction: takes the job's lock until that transaction ends (a second
    // coordinator's lockJob of the same job waits for it), and answers what others changed since this
    // process's last committed look. Every change to a job's workunits and leases is made under it, so a
    // scheduler that applied the answer decides on the whole picture.
    virtual Result<JobChanges> lockJob(qint64 jobId) = 0;

    // Runs `work` as one transaction (nested calls join the outer one).
    virtual Status transaction(const std::function<Status()>& work) = 0;
    // A new pending workunit of `jobId` for (epoch, shard); answers its id.
    virtual Result<qint64> addWorkunit(qint64 jobId, int epoch, int shard) = 0;
    // The workunit's state and how often it was leased.
    virtual Status saveWorkunit(const Workunit& unit) = 0;
    // A new lease, or a known lease's deadline and state.
    virtual Status saveLease(const Lease& lease) = 0;
    // The highest epoch whose workunits exist.
    virtual Status saveEpoch(qint64 jobId, int epoch) = 0;

    // ---- grants in parallel (several coordinators on PostgreSQL)
    // Whether several coordinators may grant leases of one job at once. Then a grant takes the job's lock
    // shared (shareJob) and claims its workunit's row (claimWorkunit); lockJob waits for the grants under way
    // and holds new ones back, and always reads what changed since (a grant does not move the change count).
    // Otherwise every grant takes lockJob.
    virtual bool grantsInParallel() const { return false; }
    enum class Held
    {
        None,
        Shared,
        Exclusive
    };
    // How the open transaction holds the job's lock.
    virtual Held heldLock(qint64 jobId) const = 0;
    // Inside the caller's transaction: the job's lock, shared with other grants, until the transaction ends.
    // Answers the job's stored epoch, state and reason; nothing of its rows (`stale` stays false).
    virtual Result<JobChanges> shareJob(qint64 jobId) { return inParallelOnly(jobId); }
    // Under the job's shared lock: its pending workunit that the scheduler would choose (oldest epoch, then
    // one that resumes a checkpoint, then one of `preferredShards`), its row locked (rows other grants hold
    // are skipped), marked leased and counted as issued. nullopt when no workunit is pending.
    virtual Result<std::optional<Workunit>> claimWorkunit(qint64 jobId,
                                                          const std::vector<int>& /*preferredShards*/)
    {
        return inParallelOnly(jobId);
    }
    // Inside the caller's transaction, before any job's lock: the agent's lock until the transaction ends
    // (its lease requests at several coordinators wait for each other), and the open leases it holds of every
    // running or paused job whose deadline is after `nowMs`.
    virtual Result<int> lockAgent(const QString& /*agentId*/, qint64 /*nowMs*/) { return inParallelOnly(0); }

private:
    static Error inParallelOnly(qint64 jobId)
    {
        return fail(QStringLiteral("job %1: this store grants leases under each job's lock only").arg(jobId));
    }
};

// For gleaner-sim and tests: the picture in memory is all there is (nobody else changes it). Ids count up
// from 1.
class MemorySchedulerStore final : public SchedulerStore
{
public:
    Status transaction(const std::function<Status()>& work) override { return work(); }
    Result<JobChanges> lockJob(qint64) override { return JobChanges{}; }
    Result<qint64> addWorkunit(qint64, int, int) override { return ++m_lastWorkunitId; }
    Status saveWorkunit(const Workunit&) override { return {}; }
    Status saveLease(const Lease&) override { return {}; }
    Status saveEpoch(qint64, int) override { return {}; }
    Held heldLock(qint64) const override { return Held::None; }

private:
    qint64 m_lastWorkunitId = 0;
};

} // namespace gleaner::coordinator
