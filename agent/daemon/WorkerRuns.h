#pragma once
// The machine's workers: each subtask's gleaner-worker child started with the limits the machine allows now
// (threads, CPU share, memory caps, device; a resumed subtask keeps its first worker's threads and device,
// which its checkpoint is tied to), its events turned into progress, and its end into the subtask's next
// step. A worker that crashes, fails or passes its memory cap is started once more from its checkpoint; a
// second failure gives the subtask back. Per machine; on the event loop's thread.

#include "runner/WorkerProcess.h"
#include "util/Clock.h"
#include "util/LeaseId.h"

#include <QJsonObject>
#include <QObject>

#include <utility>

namespace gleaner::agent {

class AgentStatus;
class Departure;
class EventFeed;
class LeaseDesk;
class MachineGate;
class SubtaskStore;
class SubtaskSteps;
class SubtaskTable;
class TaskFiles;
struct ActiveSubtask;
struct Lifecycle;

class WorkerRuns
{
public:
    // `loop` parents the workers and bounds their connections.
    struct Parts
    {
        QObject& loop;
        const Lifecycle& lifecycle;
        SubtaskTable& subtasks;
        EventFeed& feed;
        const Clock& clock;
        SubtaskStore& store;
        TaskFiles& files;
        const LeaseDesk& leasing;
        MachineGate& gate;
        Departure& departure;
        AgentStatus& status;
        SubtaskSteps& steps;
    };

    WorkerRuns(Parts parts, QString workerProgram, qint64 progressReportMs);

    // The task folder is ready (or the machine allows it now): the stored manifest is checked once more, then
    // the worker starts, unless the computer is not ours to use now (it waits, its lease kept alive).
    void startWorker(const LeaseId& leaseId);

private:
    // The thread count and device a subtask's workers use: those of its first worker (its checkpoint is tied
    // to them), kept in its task folder; for a new subtask, the current ones.
    std::pair<int, QString> launchSettings(const ActiveSubtask& active);
    void onWorkerEvent(const LeaseId& leaseId, const QJsonObject& event);
    void onWorkerEnded(const LeaseId& leaseId, const WorkerEnd& end);

    Parts m_parts;
    const QString m_workerProgram;
    const qint64 m_progressReportMs;
};

} // namespace gleaner::agent
