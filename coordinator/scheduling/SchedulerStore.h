#pragma once
// Where the Scheduler's changes go: the coordinator's database (SchedulerTables), or nowhere but memory
// (gleaner-sim). The Scheduler calls these as it changes its picture, inside the transaction its caller
// holds; a failed write fails that transaction, and the caller answers the request with an error.

#include "Result.h"
#include "core/JobState.h"

#include <functional>

namespace gleaner::coordinator {

class SchedulerStore
{
public:
    virtual ~SchedulerStore() = default;

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

// For gleaner-sim and tests: the picture in memory is all there is. Ids count up from 1.
class MemorySchedulerStore final : public SchedulerStore
{
public:
    Status transaction(const std::function<Status()>& work) override { return work(); }
    Result<qint64> addWorkunit(qint64, int, int) override { return ++m_lastWorkunitId; }
    Status saveWorkunit(const Workunit&) override { return {}; }
    Status saveLease(const Lease&) override { return {}; }
    Status saveEpoch(qint64, int) override { return {}; }

private:
    qint64 m_lastWorkunitId = 0;
};

} // namespace gleaner::coordinator
