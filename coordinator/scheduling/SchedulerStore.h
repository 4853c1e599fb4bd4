#pragma once
// Where the Scheduler's changes go: the coordinator's database (SchedulerTables), or nowhere but memory
// (gleaner-sim). The Scheduler calls these as it changes its picture, inside the transaction its caller
// holds; a failed write fails that transaction, and the caller answers the request with an error.

#include "Result.h"
#include "core/JobState.h"

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

private:
    qint64 m_lastWorkunitId = 0;
};

} // namespace gleaner::coordinator
