// AgentDaemon: leaving. A preempted cloud instance, a Slurm job at its time limit, an owner who shuts the machine
// down: the agent has a grace budget (--grace) and spends it so that no work waits for a lease's deadline. Each
// subtask is finished and uploaded when that fits, else checkpointed and handed back (protocol 6.8) so that the
// next agent resumes at the same step, else handed back bare so that the next agent at least starts now. See
// AgentDaemon.h and docs/clusters.md.
#include "daemon/AgentDaemonInternal.h"
#include "daemon/ExitPlan.h"
#include "daemon/StopSignal.h"
#include "net/CoordinatorClient.h"

#include <QDir>
#include <QFileInfo>

namespace gleaner::agent {

using namespace daemon_detail;

namespace {

constexpr qint64 kLeaveReviewMs = 1000;

QString checkpointIn(const QString& taskDir)
{
    return taskDir + QStringLiteral("/checkpoint.safetensors");
}

} // namespace

double AgentDaemon::secondsLeftToLeave() const
{
    return std::max<double>(0.0, double(m_leaveByMs - nowMs()) / 1000.0);
}

void AgentDaemon::leave(const QString& why)
{
    if (m_leaving || m_stoppedEmitted)
        return;
    m_leaving = true;
    m_stopping = true;
    m_leaveReason = why;
    m_leasing->hold();
    m_runtimeTimer.stop();
    m_files->abortFetches(); // a download in flight ends; its subtask is handed back bare
    const qint64 budgetMs = std::max<qint64>(kLeaveMarginMs + 500, qint64(m_options.graceSeconds * 1000.0));
    m_leaveByMs = nowMs() + budgetMs - kLeaveMarginMs;
    m_feed.log(QStringLiteral("info"),
               m_active.isEmpty()
                   ? QStringLiteral("leaving (%1)").arg(why)
                   : QStringLiteral("leaving (%1): handing %2 subtask(s) back to the coordinator within %3")
                         .arg(why)
                         .arg(m_active.size())
                         .arg(seconds(budgetMs)));
    m_shutdownTimer.start(int(budgetMs - kLeaveMarginMs));
    m_leaveReview.setInterval(int(kLeaveReviewMs));
    connect(&m_leaveReview, &QTimer::timeout, this, &AgentDaemon::reviewFinishingWorkers, Qt::UniqueConnection);
    m_leaveReview.start();
    for (const LeaseId& leaseId : m_active.keys())
        leaveSubtask(leaseId);
    updateState();
    checkFinished();
}

void AgentDaemon::armRuntimeLimit()
{
    if (m_options.maxRuntimeSeconds <= 0)
        return;
    // Leave while the grace budget still fits in the runtime, so that nothing held is lost at its end.
    const double leaveAfter = std::max(0.0, m_options.maxRuntimeSeconds - m_options.graceSeconds);
    m_runtimeTimer.setSingleShot(true);
    connect(&m_runtimeTimer, &QTimer::timeout, this,
            [this] { leave(QStringLiteral("--max-runtime %1 s is up").arg(m_options.maxRuntimeSeconds)); });
    m_runtimeTimer.start(int(std::min(leaveAfter * 1000.0, 2.0e9)));
}

void AgentDaemon::graceEnded()
{
    // The grace budget is spent: what was not handed back stays for the next start.
    m_leaving = false;
    m_stop->stop();
    int kept = 0;
    for (const auto& active : std::as_const(m_active))
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
                .arg(m_options.graceSeconds)
                .arg(kept));
    // For the workers to write their checkpoints, within what is left of the budget; then the plain stop's end.
    m_shutdownTimer.start(int(std::min<qint64>(kShutdownGraceMs, kLeaveMarginMs)));
    checkFinished();
}

void AgentDaemon::leaveSubtask(const LeaseId& leaseId)
{
    if (!m_leaving)
        return;
    auto active = m_active.value(leaseId);
    if (!active || active->kept || active->busy)
        return checkFinished(); // a step in flight comes back here when it ends
    const QString dir = m_files->taskFolder(leaseId);
    const qint64 weightsBytes = QFileInfo(dir + QStringLiteral("/weights.safetensors")).size();
    switch (active->record.state) {
    case SubtaskState::Done:
    case SubtaskState::Failed:
    case SubtaskState::Dropped:
        return checkFinished();
    case SubtaskState::Uploading:
        // The result is the subtask's whole value: it goes out first, if anything does.
        if (QFileInfo::exists(dir + QStringLiteral("/result.safetensors")))
            return upload(leaseId);
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
        estimate.trainSecondsLeft = computing ? double(active->etaSeconds(nowMs())) : -1.0;
        estimate.resultBytes = std::max<qint64>(weightsBytes, 0);
        const qint64 written = QFileInfo(checkpointIn(dir)).size();
        estimate.checkpointBytes = written > 0 ? written : 3 * std::max<qint64>(weightsBytes, 1);
        estimate.uploadBytesPerSecond = m_uploadBytesPerSecond;
        if (ExitPlan::choose(estimate) == ExitStep::Finish) {
            active->finishing = true;
            m_feed.log(QStringLiteral("info"),
                       QStringLiteral("lease %1: finishing it before leaving (about %2 of training left)")
                           .arg(leaseId.toString(), seconds(qint64(estimate.trainSecondsLeft * 1000))));
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

void AgentDaemon::reviewFinishingWorkers()
{
    if (!m_leaving) {
        m_leaveReview.stop();
        return;
    }
    for (const auto& active : std::as_const(m_active)) {
        if (!active->finishing || !active->worker || !active->worker->running() || active->stopSent)
            continue;
        const QString dir = m_files->taskFolder(active->record.leaseId);
        const qint64 weightsBytes = std::max<qint64>(1, QFileInfo(dir + QStringLiteral("/weights.safetensors")).size());
        const double left = secondsLeftToLeave();
        const double eta = double(active->etaSeconds(nowMs()));
        const double finish = eta + ExitPlan::uploadSeconds(weightsBytes, m_uploadBytesPerSecond) + ExitPlan::kRequestSeconds;
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

void AgentDaemon::handBack(const LeaseId& leaseId, bool withCheckpoint)
{
    auto active = m_active.value(leaseId);
    if (!active)
        return;
    active->busy = true;
    const QString dir = m_files->taskFolder(leaseId);
    const QString checkpoint = withCheckpoint ? checkpointIn(dir) : QString();
    m_feed.log(
        QStringLiteral("info"),
        withCheckpoint
            ? QStringLiteral("lease %1: handing it back with its checkpoint (%2 bytes)")
                  .arg(leaseId.toString())
                  .arg(QFileInfo(checkpoint).size())
            : QStringLiteral("lease %1: handing it back without a checkpoint").arg(leaseId.toString()));
    StopSignal* stop = m_stop.get();
    m_network->run(
        [this, leaseId, checkpoint, stop] {
            return m_client->handBack(leaseId, checkpoint, [stop](const TransferProgress&) { return !stop->stopped(); });
        },
        [this, leaseId, dir](Result<HandBackReply> reply) {
            auto active = m_active.value(leaseId);
            if (!active)
                return checkFinished();
            active->busy = false;
            if (!reply) {
                // Kept as after a plain stop: the next start asks the coordinator whether the lease is still open.
                m_feed.log(QStringLiteral("warning"),
                           QStringLiteral("lease %1 could not be handed back (%2); it stays with this agent")
                               .arg(leaseId.toString(), reply.error()));
                active->kept = true;
                return checkFinished();
            }
            QString outcome;
            if (!reply->released)
                outcome = QStringLiteral("the coordinator had nothing to take back (%1)").arg(reply->reason);
            else if (reply->checkpoint == u"kept")
                outcome = QStringLiteral("the next agent resumes it at step %1").arg(reply->step);
            else if (reply->checkpoint == u"refused")
                outcome = QStringLiteral("its checkpoint was not kept (%1); the next agent starts it afresh")
                              .arg(reply->reason);
            else
                outcome = QStringLiteral("the next agent starts it afresh");
            m_feed.log(QStringLiteral("info"),
                       QStringLiteral("lease %1 handed back: %2").arg(leaseId.toString(), outcome));
            // What the job's earlier uploads left out went into this task folder; it goes with the next upload.
            if (active->manifest)
                m_files->keepHandedBackResidual(active->manifest->jobId, dir);
            dropSubtask(leaseId, QStringLiteral("handed back to the coordinator"));
        });
}

void AgentDaemon::noteNoWork()
{
    if (!m_options.untilEmpty)
        return;
    if (!m_active.isEmpty() || !computeAllowed()) {
        m_noWorkSinceMs = -1;
        return;
    }
    const qint64 now = nowMs();
    if (m_noWorkSinceMs < 0)
        m_noWorkSinceMs = now;
    if (double(now - m_noWorkSinceMs) / 1000.0 < m_options.idleExitSeconds)
        return;
    m_feed.log(QStringLiteral("info"),
               QStringLiteral("the coordinator has had no work for this agent for %1; stopping "
                              "(--until-empty)")
                   .arg(seconds(now - m_noWorkSinceMs)));
    m_finishing = true;
    m_leasing->hold();
    checkFinished();
}

} // namespace gleaner::agent
