#pragma once
// What the daemon's files share: AgentDaemon.cpp (set-up, outcomes), AgentDaemonLeasing.cpp (asking for work and
// taking it on), AgentDaemonSubtasks.cpp (one subtask's steps), AgentDaemonFiles.cpp (its files),
// AgentDaemonControl.cpp (state, status, control requests, shutdown), AgentDaemonLeave.cpp (leaving within the
// grace budget) and AgentDaemonDesktop.cpp (the desktop policy's decisions): the per-subtask record, the hand-off to the network
// thread, and a few helpers. Private to the daemon.

#include "daemon/AgentDaemon.h"

#include "util/SerialExecutor.h"

#include <QFile>
#include <QLoggingCategory>

#include <optional>

#include <unistd.h>

namespace gleaner::agent {

Q_DECLARE_LOGGING_CATEGORY(lcDaemon)

namespace daemon_detail {

// Tries of one step (a download, a progress check) before the coordinator being away is reported in the log
// as a problem; the step is still tried again after that, with the longest backoff.
inline constexpr int kDownloadTriesBeforeFailing = 6;
inline constexpr qint64 kShutdownGraceMs = 8'000;
// A leaving agent keeps this much of its grace budget for the end: persisting what stays and letting the workers of
// what was not handed back write their checkpoints.
inline constexpr qint64 kLeaveMarginMs = 1'500;
inline constexpr qint64 kPublishProgressEveryMs = 500;
// Subtasks failed in a row after which the agent's state is "error" (a wrong pinned key, a broken worker).
inline constexpr int kFailuresBeforeError = 3;
// Log lines kept for the status object, so a tray app that connects later shows what happened before.
inline constexpr qsizetype kRecentLogLines = 50;

inline QString fileName(QStringView role)
{
    return role == u"weights"      ? QStringLiteral("weights.safetensors")
           : role == u"shard"      ? QStringLiteral("shard.safetensors")
           : role == u"checkpoint" ? QStringLiteral("handed-checkpoint.safetensors")
                                   : QStringLiteral("model.pt"); // a TorchScript job's archive
}

// A hard link when the task folder and the cache share a file system (no copy of a large shard); a copy
// otherwise.
inline Status linkOrCopy(const QString& from, const QString& to)
{
    QFile::remove(to);
    if (::link(QFile::encodeName(from).constData(), QFile::encodeName(to).constData()) == 0)
        return {};
    if (QFile::copy(from, to))
        return {};
    return fail(QStringLiteral("cannot place %1 in the task folder as %2").arg(from, to));
}

inline QString seconds(qint64 ms)
{
    return ms >= 120'000 ? QStringLiteral("%1 min").arg((ms + 30'000) / 60'000)
                         : QStringLiteral("%1 s").arg((ms + 999) / 1000);
}

} // namespace daemon_detail

struct AgentDaemon::Active
{
    explicit Active(Subtask subtask) : record(std::move(subtask)) {}

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
    // Leaving: the worker was told to finish (its result is uploaded) or to stop (it is handed back); kept: it could
    // not be handed back and stays for the next start.
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

struct FetchOutcome
{
    bool ok = false;
    bool contentRefused = false; // a file did not match its hash, or the coordinator has none for this lease: final
    QString error;
    QStringList warnings; // logged by the daemon's thread (a patch that did not apply, for one)
};

template <typename Work, typename Then> void AgentDaemon::onNetwork(Work work, Then then)
{
    m_network->post([this, work = std::move(work), then = std::move(then)]() mutable {
        auto result = work();
        QMetaObject::invokeMethod(
            this, [then = std::move(then), result = std::move(result)]() mutable { then(std::move(result)); },
            Qt::QueuedConnection);
    });
}

} // namespace gleaner::agent
