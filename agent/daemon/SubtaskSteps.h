#pragma once
// One project's subtasks, step by step from a lease to its upload, each arrow persisted in the SubtaskStore
// before the next step starts:
//   leased --pin files--> downloading --every file hashed--> verified --task folder--> training (WorkerRuns)
//   --worker exit 0--> uploading --202--> done
// A check that fails (a file's size or hash, the coordinator having no file for the lease) is final: the
// subtask is reported failed with the reason and nothing of it runs. The coordinator being unreachable is
// never final: the step is tried again later, with backoff. After a restart each unfinished subtask first
// asks the coordinator (a progress report) whether its lease is still open; open ones resume where they were,
// the others are dropped. Progress reports extend the lease. Per project; the workers are the machine's
// (WorkerRuns, reached through a hook). On the event loop's thread; the coordinator calls and the hashing go
// through the network thread.

#include "runner/SubtaskStore.h"
#include "util/Clock.h"

#include <QObject>
#include <QTimer>

#include <functional>
#include <memory>

namespace gleaner::agent {

class AgentStatus;
class CoordinatorClient;
class Departure;
class EventFeed;
class FileCache;
class LeaseDesk;
class NetworkHop;
class Reachability;
class StopSignal;
class SubtaskTable;
class TaskFiles;
struct ActiveSubtask;
struct FailureStreak;
struct Lifecycle;

class SubtaskSteps
{
public:
    // The parts the steps work with; `loop` bounds the timers and the workers' connections.
    struct Parts
    {
        QObject& loop;
        Lifecycle& lifecycle;
        SubtaskTable& subtasks;
        FailureStreak& failures;
        EventFeed& feed;
        const Clock& clock;
        SubtaskStore& store;
        FileCache& cache;
        TaskFiles& files;
        CoordinatorClient& client; // on the network thread only
        NetworkHop& network;
        StopSignal& stop;
        LeaseDesk& leasing;
        Reachability& reachability;
        Departure& departure;
        AgentStatus& status;
    };
    struct Settings
    {
        qint64 progressReportMs = 30'000;
        qint64 maxBackoffMs = 60'000;
    };
    struct Hooks
    {
        std::function<void(const LeaseId&)> startWorker; // the task folder is ready
        std::function<void(const QString& error)> credentialsRefused;
    };

    SubtaskSteps(Parts parts, Settings settings, Hooks hooks);

    // At start: what the store holds unfinished, each checked again and resumed; then keeps leases alive.
    void resumeUnfinished();
    // The subtask's next step, unless one is in flight or its worker runs.
    void continueSubtask(const LeaseId& leaseId);
    void upload(const LeaseId& leaseId);
    void reportProgress(const LeaseId& leaseId);
    // A call was answered: steps that were waiting for the coordinator go on now.
    void coordinatorReached();
    bool setState(const LeaseId& leaseId, SubtaskState state, const QString& error = {});
    // Final outcomes: each persists, releases the subtask's pinned files and folder, and tells the control
    // socket. A failure is reported to the coordinator unless `stage` is empty.
    void fail(const LeaseId& leaseId, const QString& stage, const QString& reason);
    void drop(const LeaseId& leaseId, const QString& reason);
    // Leaving: gives the lease back to the coordinator (with the checkpoint file, or bare when empty) and
    // drops the subtask; one the coordinator could not be told of is kept for the next start.
    void handBack(const LeaseId& leaseId, const QString& checkpoint);
    // What the network thread fetched, into the totals (also when the agent ends).
    void recordFetchedBytes();

private:
    void checkLeaseStillOpen(const LeaseId& leaseId);
    void download(const LeaseId& leaseId);
    void prepareTaskFolder(const LeaseId& leaseId);
    void keepLeasesAlive();
    // A step's answer came back from the network thread: its subtask (no longer busy), or null when the
    // subtask is gone or the agent is stopping. While leaving, only `whileLeaving` steps (an upload) go on;
    // the others come back to Departure::leaveSubtask().
    std::shared_ptr<ActiveSubtask> stepReturned(const LeaseId& leaseId, bool whileLeaving = false);
    // A step could not reach the coordinator: stop on refused credentials, otherwise try it again later.
    void stepFailed(const LeaseId& leaseId, const QString& what, const QString& error);
    void retryLater(const LeaseId& leaseId, const QString& what, const QString& error);
    void finish(const LeaseId& leaseId);
    void release(const LeaseId& leaseId, qint64 leaseDelayMs = 0);

    Parts m_parts;
    const Settings m_settings;
    const Hooks m_hooks;
    QTimer m_keepAlive; // progress reports for workers that report nothing themselves (paused, starved)
};

} // namespace gleaner::agent
