#pragma once
// One project's subtask files: fetched from the cache or the coordinator (whole, or patched from an earlier
// weights file) and checked against the signed manifest, laid out in the subtask's task folder, and what a
// job's subtasks hand on to the next on this agent (the local optimizer's state, the residual of error
// feedback). Per project: its task folders, its client and its job states; the cache it fills is the
// machine's.
//
// fetch() and layOut() are disk and network work: they run on the network thread, in order, and say how it
// went in a FetchOutcome; the rest runs on the event loop. Only a checked lease id (LeaseId) names a task
// folder.

#include "Result.h"
#include "runner/SubtaskStore.h"
#include "runner/TaskManifest.h"

#include <QString>
#include <QStringList>

#include <atomic>

namespace gleaner::agent {

class CoordinatorClient;
class FileCache;
class StopSignal;

struct FetchOutcome
{
    bool ok = false;
    bool contentRefused =
        false; // a file did not match its hash, or the coordinator has none for this lease: final
    QString error;
    QStringList warnings; // logged by the daemon's thread (a patch that did not apply, for one)
};

class TaskFiles
{
public:
    // `dataDir` holds tasks/ (which must exist) and the job states; `stop` ends transfers when the agent
    // stops.
    TaskFiles(QString dataDir, FileCache& cache, CoordinatorClient& client, const StopSignal& stop);

    // DATA_DIR/tasks/<id>: the only place a subtask's files go, named by nothing but a checked id.
    QString taskFolder(const LeaseId& leaseId) const;

    // Network thread: the manifest's files into the cache. With `reverify`, files already cached are hashed
    // again first (after a mismatch in the task folder; an altered one is removed and fetched again).
    FetchOutcome fetch(const LeaseId& leaseId, const TaskManifest& manifest, bool reverify);
    // Network thread: the task folder `dir` with the signed manifest's bytes and its files, each hashed in
    // place right before a worker may read it, and the job's state from this agent's earlier subtasks.
    FetchOutcome layOut(const QString& dir, const QByteArray& manifestBytes, const TaskManifest& manifest);

    // A finished worker's optimizer state and residual move to the job's files, which the job's next subtask
    // starts from; the warnings say what could not be kept.
    QStringList keepJobState(qint64 jobId, const QString& taskDir) const;
    // A subtask handed back: the residual its folder took goes with the job's next upload instead.
    void keepHandedBackResidual(qint64 jobId, const QString& taskDir) const;
    // The subtask's folder, when it is done with.
    void removeTaskFolder(const LeaseId& leaseId) const;

    // Leaving: downloads in flight end (their subtasks are handed back bare).
    void abortFetches() { m_abortFetches = true; }
    // Moves what the network thread fetched into the store's totals: a fetch cut short by a stop never
    // reports back, but what it fetched was downloaded all the same (the coordinator counted it).
    Status recordFetchedBytes(SubtaskStore& store);

private:
    QString jobStateFile(const char* folder, qint64 jobId) const;
    bool fetchesGoOn() const;

    const QString m_dataDir;
    FileCache& m_cache;
    CoordinatorClient& m_client; // used on the network thread only
    const StopSignal& m_stop;
    std::atomic<qint64> m_fetchedBytes{0};
    std::atomic<bool> m_abortFetches{false};
};

} // namespace gleaner::agent
