#pragma once
// A job's rows as the database holds them: the `jobs` row read into a JobState and written back, a switch of
// its stored state under the job's lock (so that among several coordinators the stored state decides), and
// its validations. State thread only.

#include "Result.h"
#include "jobs/JobState.h"
#include "util/Clock.h"

#include <QSqlQuery>

#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace gleaner::coordinator {

class BlobStore;
class Database;
class Scheduler;

class JobRecords
{
public:
    JobRecords(Database& db, Scheduler& scheduler, const BlobStore& blobs, const Clock& clock)
        : m_db(db), m_scheduler(scheduler), m_blobs(blobs), m_clock(clock)
    {
    }

    // Every job's row, in the order of their ids, as fromRow() reads them.
    Result<QSqlQuery> selectAll();
    // A job as its row in `jobs` holds it (selectAll's columns). A spec this version cannot read makes a
    // failed job, so that one such job does not keep the others from running.
    JobState fromRow(const QSqlQuery& row) const;
    // Writes the job's state, reason, epoch and last accuracy; an ended job stays ended (among several
    // coordinators, one may pause a job that another has just completed).
    Status persist(const JobState& job);
    // Moves the job's stored state from one of `from` to `to` in one transaction under the job's lock (grants
    // under way end first, and those after see it), with `alongside` written in the same transaction. Answers
    // nullopt when it moved, else the stored state that refused it (set by another coordinator: memory is
    // left as it is, and the next look brings it). Memory is the caller's to change once it moved.
    Result<std::optional<JobStatus>> switchStatus(JobState& job, const std::vector<JobStatus>& from,
                                                  JobStatus to, const QString& reason,
                                                  const std::function<Status()>& alongside = {});
    // The job's validations as the database has them (the history and the validated epochs), whichever
    // coordinator made them.
    void loadHistory(JobState& job);
    // The number of validations of each job that has any, for noticing that another coordinator made some.
    Result<std::map<qint64, qint64>> validationCounts();

private:
    Database& m_db;
    Scheduler& m_scheduler;
    const BlobStore& m_blobs;
    const Clock& m_clock;
};

} // namespace gleaner::coordinator
