#include "daemon/Departure.h"

#include "daemon/EventFeed.h"
#include "daemon/ExitPlan.h"
#include "daemon/StopSignal.h"
#include "daemon/SubtaskTable.h"

#include <QFileInfo>

namespace gleaner::agent {

namespace {

constexpr qint64 kLeaveReviewMs = 1000;
constexpr qint64 kShutdownGraceMs = 8'000;
// A leaving agent keeps this much of its grace budget for the end: persisting what stays and letting the
// workers of what was not handed back write their checkpoints.
constexpr qint64 kLeaveMarginMs = 1'500;

QString checkpointIn(const QString& taskDir)
{
    return taskDir + QStringLiteral("/checkpoint.safetensors");
}

} // namespace

Departure::Departure(Lifecycle& lifecycle, SubtaskTable& subtasks, EventFeed& feed, const Clock& clock,
                     StopSignal& stop, Settings settings, Hooks hooks)
    : m_lifecycle(lifecycle), m_subtasks(subtasks), m_feed(feed), m_clock(clock), m_stop(stop),
      m_settings(settings), m_hooks(std::move(hooks))
{
    m_stopTimer.setSingleShot(true);
    QObject::connect(&m_stopTimer, &QTimer::timeout, &m_stopTimer, [this] { stopTimerEnded(); });
    m_leaveReview.setInterval(int(kLeaveReviewMs));
    QObject::connect(&m_leaveReview, &QTimer::timeout, &m_leaveReview, [this] { reviewFinishingWorkers(); });
}

void Departure::stopTimerEnded()
{
    if (m_lifecycle.leaving)
        return graceEnded();
    for (const auto& active : std::as_const(m_subtasks))
        if (active->worker && active->worker->running()) {
            m_feed.log(QStringLiteral("warning"),
                       QStringLiteral("the worker of lease %1 did not stop in time; killed (its last "
                                      "checkpoint is kept)")
                           .arg(active->record.leaseId.toString()));
            active->worker->kill();
        }
    checkFinished();
}

void Departure::noteUpload(qint64 bytes, qint64 ms)
{
    if (ms > 0) // the uplink's pace, for the exit plan's estimates
        m_uploadBytesPerSecond = double(bytes) / (double(ms) / 1000.0);
}

double Departure::secondsLeftToLeave() const
{
    return std::max<double>(0.0, double(m_leaveByMs - m_clock.nowMs()) / 1000.0);
}

void Departure::leave(const QString& why)
{
    if (m_lifecycle.leaving || m_lifecycle.stoppedEmitted)
        return;
    m_lifecycle.leaving = true;
    m_lifecycle.stopping = true;
    m_leaveReason = why;
    m_hooks.holdLeasing();
    m_runtimeTimer.stop();
    m_hooks.abortFetches(); // a download in flight ends; its subtask is handed back bare
    const qint64 budgetMs = std::max<qint64>(kLeaveMarginMs + 500, qint64(m_settings.graceSeconds * 1000.0));
    m_leaveByMs = m_clock.nowMs() + budgetMs - kLeaveMarginMs;
    m_feed.log(QStringLiteral("info"),
               m_subtasks.isEmpty()
                   ? QStringLiteral("leaving (%1)").arg(why)
                   : QStringLiteral("leaving (%1): handing %2 subtask(s) back to the coordinator within %3")
                         .arg(why)
                         .arg(m_subtasks.size())
                         .arg(spokenDuration(budgetMs)));
    m_stopTimer.start(int(budgetMs - kLeaveMarginMs));
    m_leaveReview.start();
    for (const LeaseId& leaseId : m_subtasks.keys())
        leaveSubtask(leaseId);
    m_hooks.stateChanged();
    checkFinished();
}

void Departure::armRuntimeLimit()
{
    if (m_settings.maxRuntimeSeconds <= 0)
        return;
    // Leave while the grace budget still fits in the runtime, so that nothing held is lost at its end.
    const double leaveAfter = std::max(0.0, m_settings.maxRuntimeSeconds - m_settings.graceSeconds);
    m_runtimeTimer.setSingleShot(true);
    QObject::connect(&m_runtimeTimer, &QTimer::timeout, &m_runtimeTimer, [this] {
        leave(QStringLiteral("--max-runtime %1 s is up").arg(m_settings.maxRuntimeSeconds));
    });
    m_runtimeTimer.start(int(std::min(leaveAfter * 1000.0, 2.0e9)));
}

void Departure::graceEnded()
{
    // The grace budget is spent: what was not handed back stays for the next start.
    m_lifecycle.leaving = false;
    m_stop.stop();
    int kept = 0;
    for (const auto& active : std::as_const(m_subtasks))
        if (!active->kept) {
            active->kept = true;
            ++kept;
            if (active->worker && active->worker->running())
                active->worker->send("stop");
        }
    if (kept)
        m_feed.log(
            QStringLiteral("warning"),
            QStringLiteral(
                "the grace period (--grace %1 s) ended before %2 subtask(s) were handed back; they stay "
                "with this agent")
                .arg(m_settings.graceSeconds)
                .arg(kept));
    // For the workers to write their checkpoints, within what is left of the budget; then the plain stop's
    // end.
    m_stopTimer.start(int(std::min<qint64>(kShutdownGraceMs, kLeaveMarginMs)));
    checkFinished();
}

void Departure::leaveSubtask(const LeaseId& leaseId)
{
    if (!m_lifecycle.leaving)
        return;
    auto active = m_subtasks.value(leaseId);
    if (!active || active->kept || active->busy)
        return checkFinished(); // a step in flight comes back here when it ends
    const QString dir = m_hooks.taskFolder(leaseId);
    const qint64 weightsBytes = QFileInfo(dir + QStringLiteral("/weights.safetensors")).size();
    switch (active->record.state) {
    case SubtaskState::Done:
    case SubtaskState::Failed:
    case SubtaskState::Dropped:
        return checkFinished();
    case SubtaskState::Uploading:
        // The result is the subtask's whole value: it goes out first, if anything does.
        if (QFileInfo::exists(dir + QStringLiteral("/result.safetensors")))
            return m_hooks.upload(leaseId);
        return handBack(leaseId, false);
    case SubtaskState::Leased:
    case SubtaskState::Downloading:
    case SubtaskState::Verified:
        return handBack(leaseId, false);
    case SubtaskState::Training:
        break;
    }
    if (active->worker && active->worker->running()) {
        if (active->finishing || active->stopSent)
            return;
        ExitEstimate estimate;
        estimate.secondsLeft = secondsLeftToLeave();
        const bool computing = !active->workerPaused && !active->pauseSent;
        estimate.trainSecondsLeft = computing ? double(active->etaSeconds(m_clock.nowMs())) : -1.0;
        estimate.resultBytes = std::max<qint64>(weightsBytes, 0);
        const qint64 written = QFileInfo(checkpointIn(dir)).size();
        estimate.checkpointBytes = written > 0 ? written : 3 * std::max<qint64>(weightsBytes, 1);
        estimate.uploadBytesPerSecond = m_uploadBytesPerSecond;
        if (ExitPlan::choose(estimate) == ExitStep::Finish) {
            active->finishing = true;
            m_feed.log(
                QStringLiteral("info"),
                QStringLiteral("lease %1: finishing it before leaving (about %2 of training left)")
                    .arg(leaseId.toString(), spokenDuration(qint64(estimate.trainSecondsLeft * 1000))));
            return;
        }
        active->stopSent = true;
        active->worker->send("stop"); // onWorkerEnded() comes back here with the checkpoint written
        return;
    }
    ExitEstimate estimate;
    estimate.secondsLeft = secondsLeftToLeave();
    estimate.checkpointBytes = std::max<qint64>(0, QFileInfo(checkpointIn(dir)).size());
    estimate.uploadBytesPerSecond = m_uploadBytesPerSecond;
    estimate.checkpointWritten = true;
    handBack(leaseId, ExitPlan::choose(estimate) == ExitStep::HandBackWithCheckpoint);
}

void Departure::reviewFinishingWorkers()
{
    if (!m_lifecycle.leaving) {
        m_leaveReview.stop();
        return;
    }
    for (const auto& active : std::as_const(m_subtasks)) {
        if (!active->finishing || !active->worker || !active->worker->running() || active->stopSent)
            continue;
        const QString dir = m_hooks.taskFolder(active->record.leaseId);
        const qint64 weightsBytes =
            std::max<qint64>(1, QFileInfo(dir + QStringLiteral("/weights.safetensors")).size());
        const double left = secondsLeftToLeave();
        const double eta = double(active->etaSeconds(m_clock.nowMs()));
        const double finish =
            eta + ExitPlan::uploadSeconds(weightsBytes, m_uploadBytesPerSecond) + ExitPlan::kRequestSeconds;
        const double fallback = ExitPlan::kStopSeconds +
                                ExitPlan::uploadSeconds(3 * weightsBytes, m_uploadBytesPerSecond) +
                                ExitPlan::kRequestSeconds;
        // A worker the owner or the desktop policy paused meanwhile does not finish in time either.
        const bool computing = !active->workerPaused && !active->pauseSent;
        if (computing && eta >= 0 && ExitPlan::kSafety * (finish + fallback) <= left)
            continue;
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("lease %1: its training would not end in the time left; handing "
                                  "it back instead")
                       .arg(active->record.leaseId.toString()));
        active->finishing = false;
        active->stopSent = true;
        active->worker->send("stop");
    }
}

void Departure::handBack(const LeaseId& leaseId, bool withCheckpoint)
{
    auto active = m_subtasks.value(leaseId);
    if (!active)
        return;
    active->busy = true;
    const QString checkpoint = withCheckpoint ? checkpointIn(m_hooks.taskFolder(leaseId)) : QString();
    m_feed.log(
        QStringLiteral("info"),
        withCheckpoint
            ? QStringLiteral("lease %1: handing it back with its checkpoint (%2 bytes)")
                  .arg(leaseId.toString())
                  .arg(QFileInfo(checkpoint).size())
            : QStringLiteral("lease %1: handing it back without a checkpoint").arg(leaseId.toString()));
    m_hooks.handBack(leaseId, checkpoint); // the project's call: the subtask is dropped, or kept
}

void Departure::answered(bool noWork)
{
    if (!noWork) {
        m_noWorkSinceMs = -1;
        return;
    }
    if (!m_settings.untilEmpty)
        return;
    if (!m_subtasks.isEmpty() || !m_hooks.computeAllowed()) {
        m_noWorkSinceMs = -1;
        return;
    }
    const qint64 now = m_clock.nowMs();
    if (m_noWorkSinceMs < 0)
        m_noWorkSinceMs = now;
    if (double(now - m_noWorkSinceMs) / 1000.0 < m_settings.idleExitSeconds)
        return;
    m_feed.log(QStringLiteral("info"),
               QStringLiteral("the coordinator has had no work for this agent for %1; stopping "
                              "(--until-empty)")
                   .arg(spokenDuration(now - m_noWorkSinceMs)));
    m_lifecycle.finishing = true;
    m_hooks.holdLeasing();
    checkFinished();
}

void Departure::shutdown()
{
    if (m_lifecycle.stopping && !m_lifecycle.finishing)
        return;
    // Work held goes back to the coordinator now rather than waiting for its deadline (and for this machine
    // to come back), unless the operator asked to keep it for the next start (--keep-on-stop).
    if (m_settings.handBackOnStop && m_lifecycle.fatal.isEmpty() && !m_subtasks.isEmpty() &&
        !m_lifecycle.leaving) {
        leave(QStringLiteral("asked to stop"));
        return;
    }
    if (m_lifecycle.stopping)
        return;
    m_lifecycle.stopping = true;
    m_hooks.holdLeasing();
    m_stop.stop(); // ends waits and transfers on the network thread; their steps are tried again at the next
                   // start
    int running = 0;
    for (const auto& active : std::as_const(m_subtasks))
        if (active->worker && active->worker->running()) {
            active->worker->send("stop");
            ++running;
        }
    m_feed.log(QStringLiteral("info"),
               running ? QStringLiteral("stopping: %1 worker(s) write a checkpoint").arg(running)
                       : QStringLiteral("stopping"));
    m_hooks.stateChanged();
    m_stopTimer.start(int(kShutdownGraceMs));
    checkFinished();
}

void Departure::checkFinished()
{
    if (m_lifecycle.stoppedEmitted)
        return;
    if (m_lifecycle.stopping) {
        for (const auto& active : std::as_const(m_subtasks)) {
            if (active->worker && active->worker->running())
                return;
            if (m_lifecycle.leaving && !active->kept) // still finishing, uploading or being handed back
                return;
        }
        m_leaveReview.stop();
        m_lifecycle.stoppedEmitted = true;
        m_stopTimer.stop();
        m_hooks.stopped(0);
        return;
    }
    if (m_lifecycle.finishing && m_subtasks.isEmpty()) {
        m_lifecycle.stoppedEmitted = true;
        m_feed.log(QStringLiteral("info"), QStringLiteral("finished the current subtasks; stopping"));
        m_lifecycle.stopping = true;
        m_hooks.stateChanged();
        m_hooks.stopped(0);
    }
}

} // namespace gleaner::agent
