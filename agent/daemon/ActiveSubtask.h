#pragma once
// One subtask the agent holds, as the event loop sees it: its stored record and checked manifest, its worker,
// and the little run-time state of its steps (tries, progress, what it was last told). Several owners read
// and change it (the subtask steps, leaving, the desktop's pause), always on the event loop's thread.

#include "runner/SubtaskStore.h"
#include "runner/TaskManifest.h"
#include "runner/WorkerProcess.h"

#include <optional>

namespace gleaner::agent {

struct ActiveSubtask
{
    explicit ActiveSubtask(Subtask subtask) : record(std::move(subtask)) {}

    // What the control socket shows: a worker that paused, or one not started because the computer is not
    // ours to use now, is "paused".
    QString shownState() const
    {
        return (workerPaused && worker) || startWhenAllowed ? QStringLiteral("paused")
                                                            : subtaskStateName(record.state);
    }

    Subtask record;
    std::optional<TaskManifest> manifest;
    WorkerProcess* worker = nullptr; // owned; deleted later once it ended
    bool needsLeaseCheck = false;    // resumed after a restart: ask the coordinator first
    bool busy = false;               // a step is on the network thread
    int tries = 0;                   // failed tries of the current step
    qint64 step = 0;
    qint64 of = 0;
    double loss = 0;
    double samplesPerSecond = 0;
    qint64 firstStep = -1; // for the time left: the first step this worker reported, and when
    qint64 firstStepMs = 0;
    qint64 lastReportMs = 0;
    bool reportInFlight = false;
    qint64 lastPublishMs = 0;
    bool workerPaused = false;     // the worker said it paused
    bool pauseSent = false;        // the last command it was sent was `pause`
    bool startWhenAllowed = false; // ready to train, but the owner or the desktop policy holds it back
    qint64 pausedSinceMs = 0;
    qint64 lastProgressMs = 0; // the worker's last started / progress event
    QString
        cancelReason; // the coordinator no longer wants it: the worker is cancelled, then the subtask dropped
    QString failure;  // the last worker failure, for the report
    int workerFailures =
        0; // in this run of the daemon: the first is retried from the checkpoint, the second is final
    // Leaving: the worker was told to finish (its result is uploaded) or to stop (it is handed back); kept:
    // it could not be handed back and stays for the next start.
    bool finishing = false;
    bool stopSent = false;
    bool kept = false;

    qint64 etaSeconds(qint64 now) const
    {
        if (firstStep < 0 || step <= firstStep || of <= step)
            return of > 0 && step >= of ? 0 : -1;
        const double perStep = double(now - firstStepMs) / double(step - firstStep);
        return qint64(perStep * double(of - step) / 1000.0 + 0.5);
    }
};

} // namespace gleaner::agent
