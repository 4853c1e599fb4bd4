#pragma once
// How the agent stops. Leaving (SIGTERM, `finish --now`, the end of --max-runtime; a preempted cloud
// instance, a Slurm job at its time limit): within the grace budget (--grace) each subtask is finished and
// uploaded when that fits, else checkpointed and handed back (protocol 6.8) so that the next agent resumes at
// the same step, else handed back bare so that the next agent at least starts now (ExitPlan decides). What
// could not be handed back in time stays, as after a plain stop (--keep-on-stop): every worker checkpoints
// and exits, killed after a few seconds, and the next start resumes it. Batch mode (--until-empty) finishes
// once the coordinator had no work for long enough. Per machine; on the event loop's thread.

#include "daemon/Lifecycle.h"
#include "runner/SubtaskStore.h"
#include "util/Clock.h"

#include <QString>
#include <QTimer>

#include <functional>

namespace gleaner::agent {

class EventFeed;
class StopSignal;
class SubtaskTable;

class Departure
{
public:
    struct Settings
    {
        bool handBackOnStop = true;
        double graceSeconds = 25;
        bool untilEmpty = false;
        double idleExitSeconds = 120;
        double maxRuntimeSeconds = 0;
    };
    // What leaving asks of the subtasks' project (their steps, files and coordinator), and tells the rest of
    // the agent.
    struct Hooks
    {
        std::function<void(const LeaseId&)> upload;
        std::function<void(const LeaseId&, const QString& reason)> drop;
        // Hands the lease back (with the checkpoint file, or bare when empty): the subtask is then dropped,
        // or kept when the coordinator could not be told; checkFinished() either way.
        std::function<void(const LeaseId&, const QString& checkpoint)> handBack;
        std::function<QString(const LeaseId&)> taskFolder;
        std::function<void()> abortFetches; // downloads in flight end (their subtasks are handed back bare)
        std::function<void()> holdLeasing;
        std::function<bool()> computeAllowed;
        std::function<void()> stateChanged;
        std::function<void(int exitCode)> stopped;
    };

    Departure(Lifecycle& lifecycle, SubtaskTable& subtasks, EventFeed& feed, const Clock& clock,
              StopSignal& stop, Settings settings, Hooks hooks);

    // SIGTERM / SIGINT: leave (handBackOnStop), or stop keeping the subtasks for the next start.
    void shutdown();
    void leave(const QString& why);
    // --max-runtime: leave while the grace budget still fits in it.
    void armRuntimeLimit();
    // The subtask's step ended while leaving (or its worker stopped): it goes on, or is handed back.
    void leaveSubtask(const LeaseId& leaseId);
    // Emits stopped() once nothing is left to wait for.
    void checkFinished();
    // Batch mode: the coordinator answered with work (or held it back), or with none.
    void answered(bool noWork);
    // A result upload took `ms` for `bytes`: the uplink's pace, for the exit plan's estimates.
    void noteUpload(qint64 bytes, qint64 ms);
    // Why the agent leaves, while it does.
    const QString& leaveReason() const { return m_leaveReason; }

private:
    void handBack(const LeaseId& leaseId, bool withCheckpoint);
    void reviewFinishingWorkers(); // stops a finishing worker whose end no longer fits in the time left
    void graceEnded();             // the budget is spent: what is left stays, as after a plain stop
    void stopTimerEnded();
    double secondsLeftToLeave() const;

    Lifecycle& m_lifecycle;
    SubtaskTable& m_subtasks;
    EventFeed& m_feed;
    const Clock& m_clock;
    StopSignal& m_stop;
    const Settings m_settings;
    const Hooks m_hooks;
    QTimer m_stopTimer; // a plain stop's wait for the workers, or the end of the grace budget
    qint64 m_leaveByMs = 0;
    QString m_leaveReason;
    QTimer m_leaveReview;              // while leaving: reviewFinishingWorkers() every second
    double m_uploadBytesPerSecond = 0; // measured on result uploads
    qint64 m_noWorkSinceMs = -1; // batch mode: since when the coordinator has had no work for this agent
    QTimer m_runtimeTimer;       // --max-runtime
};

} // namespace gleaner::agent
