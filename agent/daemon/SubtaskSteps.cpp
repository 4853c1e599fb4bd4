#include "daemon/SubtaskSteps.h"

#include "cache/FileCache.h"
#include "codec/UpdateCodec.h"
#include "daemon/AgentStatus.h"
#include "daemon/Backoff.h"
#include "daemon/Departure.h"
#include "daemon/EventFeed.h"
#include "daemon/LeaseDesk.h"
#include "daemon/Lifecycle.h"
#include "daemon/NetworkHop.h"
#include "daemon/Reachability.h"
#include "daemon/StopSignal.h"
#include "daemon/SubtaskTable.h"
#include "daemon/TaskFiles.h"
#include "format/SafeTensors.h"
#include "net/CoordinatorClient.h"

#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QSet>

namespace gleaner::agent {

namespace {
// Tries of one step (a download, a progress check) before the coordinator being away is reported in the log
// as a problem; the step is still tried again after that, with the longest backoff.
constexpr int kDownloadTriesBeforeFailing = 6;
} // namespace

namespace {

// A result as the worker wrote it: safetensors, or an encoded update compressed with zstd (UpdateCodec).
Result<TensorBundle> readResult(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: %2").arg(path, file.errorString()));
    return UpdateCodec::unpack(file.readAll(), qint64(1) << 40);
}

} // namespace

SubtaskSteps::SubtaskSteps(Parts parts, Settings settings, Hooks hooks)
    : m_parts(parts), m_settings(settings), m_hooks(std::move(hooks))
{
    m_keepAlive.setInterval(int(std::max<qint64>(m_settings.progressReportMs / 2, 500)));
    QObject::connect(&m_keepAlive, &QTimer::timeout, &m_keepAlive, [this] { keepLeasesAlive(); });
}

void SubtaskSteps::resumeUnfinished()
{
    auto unfinished = m_parts.store.unfinished();
    if (!unfinished) {
        m_parts.feed.log(QStringLiteral("error"), unfinished.error());
        return;
    }
    QSet<QString> keep;
    for (const Subtask& subtask : *unfinished) {
        m_parts.subtasks.insert(subtask.leaseId, std::make_shared<ActiveSubtask>(subtask));
        keep.insert(subtask.leaseId.toString());
    }
    for (const QString& owner : m_parts.cache.pinOwners())
        if (!keep.contains(owner))
            (void)m_parts.cache.releaseOwner(owner);
    for (const Subtask& subtask : *unfinished) {
        auto manifest = m_parts.leasing.checkStoredManifest(subtask);
        if (!manifest) {
            fail(subtask.leaseId, QStringLiteral("verify"), manifest.error());
            continue;
        }
        auto& active = *m_parts.subtasks.value(subtask.leaseId);
        active.manifest = *manifest;
        for (const ManifestFile& file : manifest->files)
            (void)m_parts.cache.pin(file.sha256, subtask.leaseId.toString());
        // An upload asks the coordinator anyway; the other steps check the lease is still open first.
        active.needsLeaseCheck = subtask.state != SubtaskState::Uploading;
        m_parts.feed.log(QStringLiteral("info"),
                         QStringLiteral("resuming lease %1 (job \"%2\", epoch %3, shard %4) from state %5")
                             .arg(subtask.leaseId.toString(), manifest->jobName)
                             .arg(manifest->epoch)
                             .arg(manifest->shard)
                             .arg(subtaskStateName(subtask.state)));
        continueSubtask(subtask.leaseId);
    }
    m_keepAlive.start();
}

void SubtaskSteps::continueSubtask(const LeaseId& leaseId)
{
    auto found = m_parts.subtasks.value(leaseId);
    // A retry timer and "the coordinator answers again" may both ask: the step runs once, and never while the
    // subtask's worker runs.
    if (!found || found->busy || found->worker || m_parts.lifecycle.stopping ||
        !m_parts.lifecycle.fatal.isEmpty())
        return;
    ActiveSubtask& active = *found;
    if (active.needsLeaseCheck)
        return checkLeaseStillOpen(leaseId);
    switch (active.record.state) {
    case SubtaskState::Leased:
        for (const ManifestFile& file : active.manifest->files)
            if (auto s = m_parts.cache.pin(file.sha256, leaseId.toString()); !s)
                return fail(leaseId, QStringLiteral("download"), s.error());
        if (!setState(leaseId, SubtaskState::Downloading))
            return;
        return download(leaseId);
    case SubtaskState::Downloading:
        return download(leaseId);
    case SubtaskState::Verified:
        return prepareTaskFolder(leaseId);
    case SubtaskState::Training:
        return prepareTaskFolder(
            leaseId); // a worker that was running before a restart: check, then resume it
    case SubtaskState::Uploading:
        return upload(leaseId);
    default:
        return;
    }
}

void SubtaskSteps::checkLeaseStillOpen(const LeaseId& leaseId)
{
    auto active = m_parts.subtasks.value(leaseId);
    active->busy = true;
    ProgressReport report;
    m_parts.network.run(
        [this, leaseId, report] { return m_parts.client.progress(leaseId, report); },
        [this, leaseId](Result<ProgressReply> reply) {
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (!reply) {
                return stepFailed(leaseId, QStringLiteral("checking lease %1").arg(leaseId.toString()),
                                  reply.error());
            }
            coordinatorReached();
            if (reply->leaseGone || reply->abort)
                return drop(leaseId, reply->reason.isEmpty()
                                         ? QStringLiteral("the coordinator no longer holds lease %1 open")
                                               .arg(leaseId.toString())
                                         : reply->reason);
            active->needsLeaseCheck = false;
            active->tries = 0;
            active->record.deadlineMs = reply->deadlineMs;
            (void)m_parts.store.setDeadline(leaseId, reply->deadlineMs);
            continueSubtask(leaseId);
        });
}

std::shared_ptr<ActiveSubtask> SubtaskSteps::stepReturned(const LeaseId& leaseId, bool whileLeaving)
{
    auto active = m_parts.subtasks.value(leaseId);
    if (!active || (m_parts.lifecycle.stopping && !m_parts.lifecycle.leaving))
        return {};
    active->busy = false;
    if (m_parts.lifecycle.leaving && !whileLeaving) {
        QTimer::singleShot(0, &m_parts.loop, [this, leaseId] { m_parts.departure.leaveSubtask(leaseId); });
        return {};
    }
    return active;
}

void SubtaskSteps::stepFailed(const LeaseId& leaseId, const QString& what, const QString& error)
{
    if (CoordinatorClient::isCredentialRefusal(error))
        return m_hooks.credentialsRefused(error);
    retryLater(leaseId, what, error);
}

void SubtaskSteps::retryLater(const LeaseId& leaseId, const QString& what, const QString& error)
{
    auto active = m_parts.subtasks.value(leaseId);
    if (!active)
        return;
    m_parts.reachability.unreachable(error);
    const qint64 wait = backoffMs(++active->tries, m_settings.maxBackoffMs);
    m_parts.feed.log(
        QStringLiteral("warning"),
        QStringLiteral("%1 failed: %2; trying again in %3").arg(what, error, spokenDuration(wait)));
    QTimer::singleShot(int(wait), &m_parts.loop, [this, leaseId] { continueSubtask(leaseId); });
    m_parts.status.update();
}

void SubtaskSteps::download(const LeaseId& leaseId)
{
    auto active = m_parts.subtasks.value(leaseId);
    active->busy = true;
    // Files already cached are hashed once more when the task folder is made; after a mismatch there, the
    // cached copy itself is checked here (an altered one is removed and fetched again).
    const bool reverify = active->tries > 0;
    m_parts.network.run(
        [this, leaseId, manifest = *active->manifest, reverify] {
            return m_parts.files.fetch(leaseId, manifest, reverify);
        },
        [this, leaseId](FetchOutcome outcome) {
            for (const QString& warning : outcome.warnings)
                m_parts.feed.log(QStringLiteral("warning"), warning);
            recordFetchedBytes();
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (outcome.contentRefused)
                return fail(leaseId, QStringLiteral("download"), outcome.error);
            if (!outcome.ok) {
                if (active->tries + 1 >= kDownloadTriesBeforeFailing && m_parts.reachability.reachable())
                    return fail(leaseId, QStringLiteral("download"), outcome.error);
                return stepFailed(leaseId,
                                  QStringLiteral("downloading the files of lease %1").arg(leaseId.toString()),
                                  outcome.error);
            }
            coordinatorReached();
            active->tries = 0;
            if (!setState(leaseId, SubtaskState::Verified))
                return;
            m_parts.status.publish(*active);
            prepareTaskFolder(leaseId);
        });
}

void SubtaskSteps::prepareTaskFolder(const LeaseId& leaseId)
{
    auto active = m_parts.subtasks.value(leaseId);
    active->busy = true;
    // Only a verified manifest gets a folder, named by the lease id that was signed in it.
    const QString dir = m_parts.files.taskFolder(active->manifest->leaseId);
    // On the network thread, in order after any download of the same files: hashing is disk work that must
    // not hold up the loop.
    m_parts.network.run(
        [this, dir, manifestBytes = active->record.manifest, manifest = *active->manifest] {
            return m_parts.files.layOut(dir, manifestBytes, manifest);
        },
        [this, leaseId, dir](FetchOutcome outcome) {
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (!outcome.ok) {
                if (outcome.contentRefused) {
                    // Fetch it again: the coordinator's copy may well be intact.
                    m_parts.feed.log(QStringLiteral("warning"), outcome.error);
                    if (active->tries++ == 0)
                        return download(leaseId); // checks the cached copy, fetches it again if it
                                                  // was altered
                }
                return fail(leaseId, QStringLiteral("verify"), outcome.error);
            }
            if (active->record.taskDir != dir) {
                (void)m_parts.store.setTaskDir(leaseId, dir);
                active->record.taskDir = dir;
            }
            m_hooks.startWorker(leaseId);
        });
}

void SubtaskSteps::recordFetchedBytes()
{
    if (auto s = m_parts.files.recordFetchedBytes(m_parts.store); !s)
        m_parts.feed.log(QStringLiteral("error"), s.error());
}

void SubtaskSteps::reportProgress(const LeaseId& leaseId)
{
    auto active = m_parts.subtasks.value(leaseId);
    if (!active || active->reportInFlight || !active->cancelReason.isEmpty())
        return;
    active->reportInFlight = true;
    active->lastReportMs = m_parts.clock.nowMs();
    ProgressReport report;
    report.step = active->step;
    report.of = active->of;
    report.loss = active->loss;
    report.samplesPerSecond = active->samplesPerSecond;
    m_parts.network.run(
        [this, leaseId, report] { return m_parts.client.progress(leaseId, report); },
        [this, leaseId](Result<ProgressReply> reply) {
            auto active = m_parts.subtasks.value(leaseId);
            if (!active)
                return;
            active->reportInFlight = false;
            if (!reply) {
                if (CoordinatorClient::isCredentialRefusal(reply.error()))
                    return m_hooks.credentialsRefused(reply.error());
                // The worker keeps training: the result may still be accepted late, once.
                m_parts.reachability.unreachable(reply.error());
                m_parts.status.update();
                return;
            }
            coordinatorReached();
            if (reply->abort || reply->leaseGone) {
                active->cancelReason = reply->reason.isEmpty()
                                           ? QStringLiteral("the coordinator no longer holds lease %1 open")
                                                 .arg(leaseId.toString())
                                           : reply->reason;
                m_parts.feed.log(QStringLiteral("info"), QStringLiteral("lease %1: stopping its worker: %2")
                                                             .arg(leaseId.toString(), active->cancelReason));
                if (active->worker && active->worker->running())
                    active->worker->send("cancel");
                else
                    drop(leaseId, active->cancelReason);
                return;
            }
            active->record.deadlineMs = reply->deadlineMs;
            (void)m_parts.store.setDeadline(leaseId, reply->deadlineMs);
        });
}

void SubtaskSteps::keepLeasesAlive()
{
    // Progress reports normally ride on the worker's progress events. A worker that sends none (paused, or
    // starved of CPU by the owner's own work, as SCHED_IDLE intends) still holds its lease for as long as the
    // lease was first given for (the job's deadline_seconds) since it last moved: a short pause costs the job
    // nothing, and work stalled for longer goes to another agent (a result from here is still accepted if it
    // comes first).
    const qint64 now = m_parts.clock.nowMs();
    for (const auto& active : std::as_const(m_parts.subtasks)) {
        if ((!active->worker && !active->startWhenAllowed) || !active->manifest ||
            now - active->lastReportMs < m_settings.progressReportMs)
            continue;
        const qint64 holdMs = active->manifest->deadlineMs - active->manifest->issuedMs;
        const qint64 lastMoved = std::max(active->pausedSinceMs, active->lastProgressMs);
        if (now - lastMoved < holdMs)
            reportProgress(active->record.leaseId);
    }
}

void SubtaskSteps::upload(const LeaseId& leaseId)
{
    auto active = m_parts.subtasks.value(leaseId);
    active->busy = true;
    const QString result = m_parts.files.taskFolder(leaseId) + QStringLiteral("/result.safetensors");
    if (!QFileInfo::exists(result)) {
        active->busy = false;
        return fail(leaseId, QStringLiteral("upload"),
                    QStringLiteral("%1 is missing; the result was lost").arg(result));
    }
    StopSignal* stop = &m_parts.stop;
    m_parts.network.run(
        [this, leaseId, result, stop] {
            QElapsedTimer took;
            took.start();
            auto reply = m_parts.client.uploadResult(
                leaseId, result, [stop](const TransferProgress&) { return !stop->stopped(); });
            return std::make_pair(std::move(reply), took.elapsed());
        },
        [this, leaseId, result](std::pair<Result<UploadReply>, qint64> sent) {
            Result<UploadReply>& reply = sent.first;
            auto active = stepReturned(leaseId, true);
            if (!active)
                return m_parts.departure.checkFinished();
            if (reply)
                m_parts.departure.noteUpload(QFileInfo(result).size(), sent.second);
            if (!reply && m_parts.lifecycle.leaving) {
                m_parts.feed.log(QStringLiteral("warning"),
                                 QStringLiteral("uploading the result of lease %1 failed (%2); it is "
                                                "uploaded at the next start")
                                     .arg(leaseId.toString(), reply.error()));
                active->kept = true;
                return m_parts.departure.checkFinished();
            }
            if (!reply) {
                return stepFailed(leaseId,
                                  QStringLiteral("uploading the result of lease %1").arg(leaseId.toString()),
                                  reply.error());
            }
            coordinatorReached();
            switch (reply->outcome) {
            case UploadOutcome::Accepted: {
                SubtaskTotals add;
                add.subtasksDone = 1;
                add.uploadedBytes = QFileInfo(result).size();
                if (auto bundle = readResult(result)) {
                    add.samples = bundle->metadata().value(QStringLiteral("gleaner.samples")).toLongLong();
                    add.trainSeconds =
                        bundle->metadata().value(QStringLiteral("gleaner.train_seconds")).toDouble();
                }
                const Status s = m_parts.store.transaction([&]() -> Status {
                    if (auto st = m_parts.store.setState(leaseId, SubtaskState::Done); !st)
                        return st;
                    return m_parts.store.addTotals(add);
                });
                if (!s)
                    m_parts.feed.log(QStringLiteral("error"), s.error());
                active->record.state = SubtaskState::Done;
                m_parts.feed.log(QStringLiteral("info"),
                                 QStringLiteral("lease %1: result accepted (update %2, staleness %3)")
                                     .arg(leaseId.toString())
                                     .arg(reply->seq)
                                     .arg(reply->staleness));
                return finish(leaseId);
            }
            case UploadOutcome::Closed:
            case UploadOutcome::Unknown:
                return drop(
                    leaseId,
                    QStringLiteral("the coordinator did not take the result: %1").arg(reply->message));
            case UploadOutcome::Invalid:
            case UploadOutcome::TooLarge:
                return fail(leaseId, QString(),
                            QStringLiteral("the coordinator refused the result: %1").arg(reply->message));
            }
        });
}

void SubtaskSteps::handBack(const LeaseId& leaseId, const QString& checkpoint)
{
    const QString dir = m_parts.files.taskFolder(leaseId);
    StopSignal* stop = &m_parts.stop;
    m_parts.network.run(
        [this, leaseId, checkpoint, stop] {
            return m_parts.client.handBack(leaseId, checkpoint,
                                           [stop](const TransferProgress&) { return !stop->stopped(); });
        },
        [this, leaseId, dir](Result<HandBackReply> reply) {
            auto active = m_parts.subtasks.value(leaseId);
            if (!active)
                return m_parts.departure.checkFinished();
            active->busy = false;
            if (!reply) {
                // Kept as after a plain stop: the next start asks the coordinator whether the lease is still
                // open.
                m_parts.feed.log(
                    QStringLiteral("warning"),
                    QStringLiteral("lease %1 could not be handed back (%2); it stays with this agent")
                        .arg(leaseId.toString(), reply.error()));
                active->kept = true;
                return m_parts.departure.checkFinished();
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
            m_parts.feed.log(QStringLiteral("info"),
                             QStringLiteral("lease %1 handed back: %2").arg(leaseId.toString(), outcome));
            // What the job's earlier uploads left out went into this task folder; it goes with the next
            // upload.
            if (active->manifest)
                m_parts.files.keepHandedBackResidual(active->manifest->jobId, dir);
            drop(leaseId, QStringLiteral("handed back to the coordinator"));
        });
}

void SubtaskSteps::fail(const LeaseId& leaseId, const QString& stage, const QString& reason)
{
    m_parts.feed.log(QStringLiteral("error"),
                     QStringLiteral("lease %1 failed: %2").arg(leaseId.toString(), reason));
    const Status s = m_parts.store.transaction([&]() -> Status {
        if (auto st = m_parts.store.setState(leaseId, SubtaskState::Failed, reason); !st)
            return st;
        SubtaskTotals add;
        add.subtasksFailed = 1;
        return m_parts.store.addTotals(add);
    });
    if (!s)
        m_parts.feed.log(QStringLiteral("error"), s.error());
    if (auto active = m_parts.subtasks.value(leaseId)) {
        active->record.state = SubtaskState::Failed;
        active->record.error = reason;
        m_parts.status.publish(*active, reason);
    }
    // Tell the coordinator, so that the workunit goes to another agent now rather than at the lease's
    // deadline. A refused result closed the lease already (stage empty): nothing to report.
    if (!stage.isEmpty() && !m_parts.lifecycle.stopping)
        m_parts.network.run(
            [this, leaseId, stage, reason] { return m_parts.client.reportFailure(leaseId, stage, reason); },
            [this, leaseId](Result<bool> reported) {
                if (!reported)
                    m_parts.feed.log(QStringLiteral("warning"),
                                     QStringLiteral("could not report the failure of lease %1 to the "
                                                    "coordinator (%2); the lease will expire there")
                                         .arg(leaseId.toString(), reported.error()));
            });
    // A coordinator that keeps handing out work this agent refuses is not asked again at once.
    m_parts.failures.failed(reason);
    release(leaseId, backoffMs(m_parts.failures.count, m_settings.maxBackoffMs));
}

void SubtaskSteps::drop(const LeaseId& leaseId, const QString& reason)
{
    m_parts.feed.log(QStringLiteral("info"),
                     QStringLiteral("lease %1 dropped: %2").arg(leaseId.toString(), reason));
    if (auto s = m_parts.store.setState(leaseId, SubtaskState::Dropped, reason); !s)
        m_parts.feed.log(QStringLiteral("error"), s.error());
    if (auto active = m_parts.subtasks.value(leaseId)) {
        active->record.state = SubtaskState::Dropped;
        m_parts.status.publish(*active, reason);
    }
    release(leaseId);
}

void SubtaskSteps::finish(const LeaseId& leaseId)
{
    m_parts.failures.count = 0;
    if (auto active = m_parts.subtasks.value(leaseId))
        m_parts.status.publish(*active);
    release(leaseId);
}

void SubtaskSteps::release(const LeaseId& leaseId, qint64 leaseDelayMs)
{
    auto active = m_parts.subtasks.take(leaseId);
    if (active && active->worker) {
        active->worker->disconnect(&m_parts.loop);
        active->worker->kill();
        active->worker->deleteLater();
    }
    (void)m_parts.cache.releaseOwner(leaseId.toString());
    m_parts.files.removeTaskFolder(leaseId);
    m_parts.status.update();
    m_parts.departure.checkFinished();
    m_parts.leasing.schedule(leaseDelayMs);
}

bool SubtaskSteps::setState(const LeaseId& leaseId, SubtaskState state, const QString& error)
{
    auto active = m_parts.subtasks.value(leaseId);
    if (auto s = m_parts.store.setState(leaseId, state, error); !s) {
        m_parts.feed.log(QStringLiteral("error"), s.error());
        return false;
    }
    if (active)
        active->record.state = state;
    return true;
}

void SubtaskSteps::coordinatorReached()
{
    if (!m_parts.reachability.reached())
        return;
    // Steps that were waiting for it go on now rather than at their backoff's end.
    for (const auto& active : std::as_const(m_parts.subtasks))
        if (!active->busy && !active->worker)
            QTimer::singleShot(0, &m_parts.loop,
                               [this, lease = active->record.leaseId] { continueSubtask(lease); });
}
} // namespace gleaner::agent
