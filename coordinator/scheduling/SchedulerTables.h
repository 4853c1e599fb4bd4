#pragma once
// The Scheduler's changes in the coordinator's database: workunits, leases and each job's current epoch, in
// the tables the coordinator reads back at start (JobTakeUp::loadAll).
//
// Several coordinators on one database: lockJob() bumps the job's change count (jobs.sched_version) with an
// UPDATE, which holds the job's row lock until the transaction ends, and every workunit and lease row written
// records the count it was written under (changed_version). A process knows the count its own picture holds
// (committed); when the count it gets is not the next one, it reads the rows written after it, and nothing
// more.
//
// On PostgreSQL, grants run in parallel: a grant takes the job's advisory lock shared (shareJob), claims the
// workunit with FOR UPDATE SKIP LOCKED (claimWorkunit) and stamps its rows with the count lockJob will raise
// next, without moving it. lockJob takes the same advisory lock exclusively after the row's: it waits for the
// grants under way and holds new ones back (PostgreSQL queues a shared request behind a waiting exclusive
// one), and then reads the rows stamped above the process's count, which include those grants.

#include "scheduling/SchedulerStore.h"

#include <map>
#include <optional>
#include <set>

namespace gleaner::coordinator {

class Database;

class SchedulerTables final : public SchedulerStore
{
public:
    explicit SchedulerTables(Database& db);

    Status transaction(const std::function<Status()>& work) override;
    Result<JobChanges> lockJob(qint64 jobId) override;
    Result<qint64> addWorkunit(qint64 jobId, int epoch, int shard) override;
    Status saveWorkunit(const Workunit& unit) override;
    Status saveLease(const Lease& lease) override;
    Status saveEpoch(qint64 jobId, int epoch) override;
    bool grantsInParallel() const override { return m_parallel; }
    Held heldLock(qint64 jobId) const override;
    Result<JobChanges> shareJob(qint64 jobId) override;
    Result<std::optional<Workunit>> claimWorkunit(qint64 jobId,
                                                  const std::vector<int>& preferredShards) override;
    Result<int> lockAgent(const QString& agentId, qint64 nowMs) override;

    // At start: the job's workunits (with their first results) and the leases that may still deliver (open,
    // expired), read after the job's change count, which becomes this process's.
    Result<JobChanges> loadJob(qint64 jobId);

private:
    // Rows of the job written after change count `since` (-1: all of them; leases then only open and
    // expired).
    Status readChanged(qint64 jobId, qint64 since, JobChanges& into);

    Database& m_db;
    bool m_parallel = false;
    std::map<qint64, qint64> m_known; // job -> the change count of the last committed look (lockJob, loadJob)
    std::set<qint64> m_locked;        // jobs whose lock the open transaction holds exclusively
    std::set<qint64> m_shared;        // jobs whose lock the open transaction holds shared
};

} // namespace gleaner::coordinator
