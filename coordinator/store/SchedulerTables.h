#pragma once
// The Scheduler's changes in the coordinator's database: workunits, leases and each job's current epoch, in the
// tables the coordinator reads back at start (Coordinator::loadState).

#include "scheduling/SchedulerStore.h"

namespace gleaner::coordinator {

class Database;

class SchedulerTables final : public SchedulerStore
{
public:
    explicit SchedulerTables(Database& db) : m_db(db) {}

    Status transaction(const std::function<Status()>& work) override;
    Result<qint64> addWorkunit(qint64 jobId, int epoch, int shard) override;
    Status saveWorkunit(const Workunit& unit) override;
    Status saveLease(const Lease& lease) override;
    Status saveEpoch(qint64 jobId, int epoch) override;

private:
    Database& m_db;
};

} // namespace gleaner::coordinator
