#pragma once
// A job's running counts in the coordinator's database (table job_tallies): the deployment's, whichever
// coordinator answers. Each coordinator adds what it took to the stored count, and reads the stored counts
// back, rather than keeping counts of its own that the others never see.
//
// - An update received and its upload's bytes are added inside the transaction that records the update; an
//   update the weights thread refused to fold, inside the one that records why. Both are exact at commit.
// - File bytes sent for a job's leases are counted in memory as they go out (every file request would
// otherwise
//   write a row) and added to the stored count by flush(), which the coordinator calls at its housekeeping
//   tick: what a killed coordinator sent in its last tick is lost from the count, nothing more.
//
// Coordinators that share a deployment read every job's counts back at each housekeeping tick (every 2 s): a
// figure that another coordinator changed is at most that old here. The coordinator's state thread only.

#include "Result.h"

#include <QByteArray>
#include <QByteArrayView>

#include <map>
#include <utility>
#include <vector>

namespace gleaner::coordinator {

class Database;

// What a job's status says it received and sent.
struct JobCounts
{
    qint64 updatesReceived = 0;
    qint64 uploadedBytes = 0;  // result bodies as they came over the wire, of the updates that counted them
    qint64 uploadsCounted = 0; // updates whose bytes are known (those recorded before version 5 of the
                               // database are not)
    qint64 updatesNotFolded = 0; // received (202) but not folded in: the weights thread refused the result
    std::map<QByteArray, qint64> downloadedByRole; // file bytes sent for the job's leases, by the file's role
                                                   // ("weights", "weights-patch", ...)

    qint64 downloadedBytes() const;
    // This process took an update (after the transaction that recorded it committed).
    void countUpdate(qint64 uploadBytes);
};

class JobTallies
{
public:
    explicit JobTallies(Database& db);

    // Inside the transaction that records the update.
    Status countUpdate(qint64 jobId, qint64 uploadBytes);
    // Inside the transaction that records why the update was not folded in.
    Status countNotFolded(qint64 jobId);
    // File bytes this process sent: stored at the next flush().
    void countDownloaded(qint64 jobId, QByteArrayView role, qint64 bytes);
    // Adds the file bytes counted since the last flush to the stored counts. On failure they are kept for the
    // next one.
    Status flush();
    // The same at most every kFlushEveryMs (a transaction each time, synced to disk on SQLite).
    static constexpr qint64 kFlushEveryMs = 2000;
    Status flushIfDue(qint64 nowMs);

    // The stored counts of one job, or of every job that has any, with the file bytes not flushed yet added.
    Result<JobCounts> load(qint64 jobId);
    Result<std::map<qint64, JobCounts>> loadAll();

private:
    // Adds each (name, delta) to the job's stored counts, in one statement.
    Status add(qint64 jobId, const std::vector<std::pair<QString, qint64>>& deltas);
    void addUnflushed(qint64 jobId, JobCounts& counts) const;

    Database& m_db;
    std::map<qint64, std::map<QByteArray, qint64>>
        m_unflushed; // job -> role -> bytes sent since the last flush
    qint64 m_flushedMs = 0;
};

} // namespace gleaner::coordinator
