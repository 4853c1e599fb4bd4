// AgentDaemon: one subtask's steps, from a lease to its upload (see AgentDaemon.h for the path and its
// rules).
#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "codec/UpdateCodec.h"
#include "crypto/Sha256.h"
#include "daemon/StopSignal.h"
#include "format/SafeTensors.h"
#include "net/CoordinatorClient.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QJsonDocument>
#include <QSaveFile>

namespace gleaner::agent {

using namespace daemon_detail;

// ---- one subtask's steps ----------------------------------------------------------------------------------

void AgentDaemon::continueSubtask(const LeaseId& leaseId)
{
    auto found = m_active.value(leaseId);
    // A retry timer and "the coordinator answers again" may both ask: the step runs once, and never while the
    // subtask's worker runs.
    if (!found || found->busy || found->worker || m_lifecycle.stopping || !m_lifecycle.fatal.isEmpty())
        return;
    Active& active = *found;
    if (active.needsLeaseCheck)
        return checkLeaseStillOpen(leaseId);
    switch (active.record.state) {
    case SubtaskState::Leased:
        for (const ManifestFile& file : active.manifest->files)
            if (auto s = m_cache->pin(file.sha256, leaseId.toString()); !s)
                return failSubtask(leaseId, QStringLiteral("download"), s.error());
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

void AgentDaemon::checkLeaseStillOpen(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    ProgressReport report;
    m_network
        ->run([this, leaseId, report] { return m_client->progress(leaseId, report); },
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
                      return dropSubtask(leaseId,
                                         reply->reason.isEmpty()
                                             ? QStringLiteral("the coordinator no longer holds lease %1 open")
                                                   .arg(leaseId.toString())
                                             : reply->reason);
                  active->needsLeaseCheck = false;
                  active->tries = 0;
                  active->record.deadlineMs = reply->deadlineMs;
                  (void)m_store->setDeadline(leaseId, reply->deadlineMs);
                  continueSubtask(leaseId);
              });
}

std::shared_ptr<ActiveSubtask> AgentDaemon::stepReturned(const LeaseId& leaseId, bool whileLeaving)
{
    auto active = m_active.value(leaseId);
    if (!active || (m_lifecycle.stopping && !m_lifecycle.leaving))
        return {};
    active->busy = false;
    if (m_lifecycle.leaving && !whileLeaving) {
        QTimer::singleShot(0, this, [this, leaseId] { m_departure->leaveSubtask(leaseId); });
        return {};
    }
    return active;
}

void AgentDaemon::stepFailed(const LeaseId& leaseId, const QString& what, const QString& error)
{
    if (CoordinatorClient::isCredentialRefusal(error))
        return refuseCredentials(error);
    retryLater(leaseId, what, error);
}

void AgentDaemon::retryLater(const LeaseId& leaseId, const QString& what, const QString& error)
{
    auto active = m_active.value(leaseId);
    if (!active)
        return;
    m_reach.unreachable(error);
    const qint64 wait = backoffMs(++active->tries, m_options.maxBackoffMs);
    m_feed.log(QStringLiteral("warning"),
               QStringLiteral("%1 failed: %2; trying again in %3").arg(what, error, spokenDuration(wait)));
    QTimer::singleShot(int(wait), this, [this, leaseId] { continueSubtask(leaseId); });
    m_status->update();
}

namespace {
constexpr qsizetype kMaxWarningChars = 2000;
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

void AgentDaemon::startWorker(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    // The stored manifest is checked again right before anything runs.
    auto manifest = m_leasing->checkStoredManifest(active->record);
    if (!manifest)
        return failSubtask(leaseId, QStringLiteral("verify"), manifest.error());
    if (active->record.state != SubtaskState::Training && !setState(leaseId, SubtaskState::Training))
        return;
    if (!m_gate->computeAllowed()) {
        // Nothing starts while the computer is not ours to use (not even the model loading): syncWorkers()
        // starts it when that changes. The lease is kept alive meanwhile, as for a paused worker.
        if (!active->startWhenAllowed) {
            active->startWhenAllowed = true;
            active->pausedSinceMs = nowMs();
            m_status->publish(*active);
        }
        return m_status->update();
    }
    active->startWhenAllowed = false;
    auto starts = m_store->countWorkerStart(leaseId);
    if (starts)
        active->record.workerStarts = *starts;

    const auto [threads, device] = launchSettings(*active);
    WorkerLaunch launch;
    launch.program = m_options.workerProgram;
    launch.taskDir = active->record.taskDir;
    launch.threads = threads;
    launch.cpuShare = m_gate->limits().cpuShare;
    launch.checkpointIntervalSeconds = m_gate->limits().checkpointIntervalSeconds;
    launch.device = device;
    launch.memoryCapBytes = m_gate->limits().memoryCapBytes;
    launch.kernelMemoryCapBytes = m_gate->kernelMemoryCap();
    launch.allowUnconfinedModels = m_gate->allowUnconfinedModels();
    auto* worker = new WorkerProcess(launch, this);
    active->worker = worker;
    active->firstStep = -1;
    active->workerPaused = false;
    active->pauseSent = false;
    connect(worker, &WorkerProcess::event, this,
            [this, leaseId](const QJsonObject& e) { onWorkerEvent(leaseId, e); });
    connect(worker, &WorkerProcess::ended, this,
            [this, leaseId](const WorkerEnd& end) { onWorkerEnded(leaseId, end); });
    worker->start();
    m_gate->syncWorkers(); // a worker started while the owner or the policy holds the others waits with them
    m_status->publish(*active);
    m_status->update();
}

std::pair<int, QString> AgentDaemon::launchSettings(const Active& active)
{
    const QString path = active.record.taskDir + QStringLiteral("/launch.json");
    QFile file(path);
    if (file.open(QIODevice::ReadOnly)) {
        const QJsonObject kept = QJsonDocument::fromJson(file.readAll()).object();
        const int threads = kept.value(QStringLiteral("threads")).toInt();
        const QString device = kept.value(QStringLiteral("device")).toString();
        if (threads > 0 && !device.isEmpty())
            return {threads, device};
    }
    const std::pair<int, QString> settings{m_gate->limits().threads, m_gate->workerDevice()};
    QSaveFile out(path);
    if (!out.open(QIODevice::WriteOnly) ||
        out.write(QJsonDocument(QJsonObject{{QStringLiteral("threads"), settings.first},
                                            {QStringLiteral("device"), settings.second}})
                      .toJson(QJsonDocument::Compact)) < 0 ||
        !out.commit())
        m_feed.log(
            QStringLiteral("warning"),
            QStringLiteral("cannot write %1: a restart of this subtask may use other settings").arg(path));
    return settings;
}

void AgentDaemon::onWorkerEvent(const LeaseId& leaseId, const QJsonObject& event)
{
    if (event.value(QStringLiteral("event")).toString() == u"sandbox") {
        // The same for every worker of this machine: logged when it changes, not per subtask.
        if (const QString line = m_status->sandbox().observe(event); !line.isEmpty())
            m_feed.log(m_status->sandbox().unconfined() ? QStringLiteral("warning") : QStringLiteral("info"),
                       line);
        return;
    }
    auto found = m_active.value(leaseId);
    if (!found)
        return;
    Active& active = *found;
    const QString name = event.value(QStringLiteral("event")).toString();
    const qint64 now = nowMs();
    if (name == u"started" || name == u"progress") {
        active.lastProgressMs = now;
        active.step = event.value(QStringLiteral("step")).toInteger(active.step);
        active.of = event.value(QStringLiteral("of")).toInteger(active.of);
        if (name == u"started") {
            if (event.value(QStringLiteral("handed_back")).toBool())
                m_feed.log(
                    QStringLiteral("info"),
                    QStringLiteral(
                        "lease %1: worker resumed from the checkpoint lease %4 handed back, at step %2 of %3")
                        .arg(leaseId.toString())
                        .arg(active.step)
                        .arg(active.of)
                        .arg(active.manifest ? active.manifest->resumeFromLease : QString()));
            else if (event.value(QStringLiteral("resumed")).toBool())
                m_feed.log(QStringLiteral("info"),
                           QStringLiteral("lease %1: worker resumed from its checkpoint at step %2 of %3")
                               .arg(leaseId.toString())
                               .arg(active.step)
                               .arg(active.of));
        } else {
            active.loss = event.value(QStringLiteral("loss")).toDouble(active.loss);
            active.samplesPerSecond =
                event.value(QStringLiteral("samples_per_s")).toDouble(active.samplesPerSecond);
        }
        if (active.firstStep < 0) {
            active.firstStep = active.step;
            active.firstStepMs = now;
        }
        if (now - active.lastPublishMs >= kPublishProgressEveryMs || active.step >= active.of) {
            active.lastPublishMs = now;
            m_feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("progress")},
                                       {QStringLiteral("lease_id"), leaseId.toString()},
                                       {QStringLiteral("step"), active.step},
                                       {QStringLiteral("of"), active.of},
                                       {QStringLiteral("loss"), active.loss},
                                       {QStringLiteral("samples_per_s"), active.samplesPerSecond},
                                       {QStringLiteral("eta_seconds"), active.etaSeconds(now)}});
        }
        if (now - active.lastReportMs >= m_options.progressReportMs)
            reportProgress(leaseId);
    } else if (name == u"paused" || name == u"resumed") {
        active.workerPaused = name == u"paused";
        active.pausedSinceMs = now;
        m_status->publish(active);
        m_status->update();
    } else if (name == u"done") {
        // The totals are read from the result file at upload, so that they survive a restart in between.
    } else if (name == u"error") {
        active.failure = event.value(QStringLiteral("message")).toString();
    } else if (name == u"warning") {
        // A worker's line may be a megabyte long; the log keeps a readable line of it.
        m_feed.log(QStringLiteral("warning"),
                   QStringLiteral("lease %1: %2")
                       .arg(leaseId.toString(),
                            event.value(QStringLiteral("message")).toString().left(kMaxWarningChars)));
    }
}

void AgentDaemon::reportProgress(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    if (!active || active->reportInFlight || !active->cancelReason.isEmpty())
        return;
    active->reportInFlight = true;
    active->lastReportMs = nowMs();
    ProgressReport report;
    report.step = active->step;
    report.of = active->of;
    report.loss = active->loss;
    report.samplesPerSecond = active->samplesPerSecond;
    m_network
        ->run([this, leaseId, report] { return m_client->progress(leaseId, report); },
              [this, leaseId](Result<ProgressReply> reply) {
                  auto active = m_active.value(leaseId);
                  if (!active)
                      return;
                  active->reportInFlight = false;
                  if (!reply) {
                      if (CoordinatorClient::isCredentialRefusal(reply.error()))
                          return refuseCredentials(reply.error());
                      // The worker keeps training: the result may still be accepted late, once.
                      m_reach.unreachable(reply.error());
                      m_status->update();
                      return;
                  }
                  coordinatorReached();
                  if (reply->abort || reply->leaseGone) {
                      active->cancelReason =
                          reply->reason.isEmpty()
                              ? QStringLiteral("the coordinator no longer holds lease %1 open")
                                    .arg(leaseId.toString())
                              : reply->reason;
                      m_feed.log(QStringLiteral("info"), QStringLiteral("lease %1: stopping its worker: %2")
                                                             .arg(leaseId.toString(), active->cancelReason));
                      if (active->worker && active->worker->running())
                          active->worker->send("cancel");
                      else
                          dropSubtask(leaseId, active->cancelReason);
                      return;
                  }
                  active->record.deadlineMs = reply->deadlineMs;
                  (void)m_store->setDeadline(leaseId, reply->deadlineMs);
              });
}

void AgentDaemon::onWorkerEnded(const LeaseId& leaseId, const WorkerEnd& end)
{
    auto found = m_active.value(leaseId);
    if (!found)
        return;
    Active& active = *found;
    if (active.worker) {
        active.worker->deleteLater();
        active.worker = nullptr;
    }
    if (end.kind == WorkerEnd::Kind::Done && active.manifest)
        for (const QString& warning : m_files->keepJobState(active.manifest->jobId, active.record.taskDir))
            m_feed.log(QStringLiteral("warning"), warning);
    if (m_lifecycle.stopping) {
        if (end.kind == WorkerEnd::Kind::Done) {
            if (!setState(leaseId, SubtaskState::Uploading)) // uploaded by the next start, or now when leaving
                return m_departure->checkFinished();
            if (m_lifecycle.leaving && !active.kept)
                return upload(leaseId);
        } else if (m_lifecycle.leaving && !active.kept) {
            return m_departure->leaveSubtask(leaseId); // stopped with its checkpoint written: handed back
        }
        return m_departure->checkFinished();
    }
    if (!active.cancelReason.isEmpty())
        return dropSubtask(leaseId, active.cancelReason);
    if (!m_lifecycle.fatal.isEmpty() && end.kind == WorkerEnd::Kind::Stopped)
        return m_status->update(); // stopped for the refused credentials; kept for an operator to restore the
                                   // agent
    switch (end.kind) {
    case WorkerEnd::Kind::Done:
        if (!setState(leaseId, SubtaskState::Uploading))
            return;
        m_status->publish(active);
        return upload(leaseId);
    case WorkerEnd::Kind::Cancelled:
        return dropSubtask(leaseId, QStringLiteral("its worker was cancelled"));
    case WorkerEnd::Kind::NotStarted:
        return failSubtask(leaseId, QStringLiteral("worker"), end.reason);
    case WorkerEnd::Kind::Stopped:
    case WorkerEnd::Kind::Failed:
    case WorkerEnd::Kind::Crashed:
    case WorkerEnd::Kind::OverMemory: {
        const QString reason =
            end.kind == WorkerEnd::Kind::Stopped ? QStringLiteral("the worker stopped unasked") : end.reason;
        if (++active.workerFailures < 2) {
            m_feed.log(QStringLiteral("warning"),
                       QStringLiteral("lease %1: %2; starting it once more from its checkpoint")
                           .arg(leaseId.toString(), reason));
            return startWorker(leaseId);
        }
        return failSubtask(leaseId, QStringLiteral("worker"),
                           QStringLiteral("%1 (twice; the subtask is given back)").arg(reason));
    }
    }
}

void AgentDaemon::upload(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    const QString result = m_files->taskFolder(leaseId) + QStringLiteral("/result.safetensors");
    if (!QFileInfo::exists(result)) {
        active->busy = false;
        return failSubtask(leaseId, QStringLiteral("upload"),
                           QStringLiteral("%1 is missing; the result was lost").arg(result));
    }
    StopSignal* stop = m_stop.get();
    m_network->run(
        [this, leaseId, result, stop] {
            QElapsedTimer took;
            took.start();
            auto reply = m_client->uploadResult(leaseId, result,
                                                [stop](const TransferProgress&) { return !stop->stopped(); });
            return std::make_pair(std::move(reply), took.elapsed());
        },
        [this, leaseId, result](std::pair<Result<UploadReply>, qint64> sent) {
            Result<UploadReply>& reply = sent.first;
            auto active = stepReturned(leaseId, true);
            if (!active)
                return m_departure->checkFinished();
            if (reply)
                m_departure->noteUpload(QFileInfo(result).size(), sent.second);
            if (!reply && m_lifecycle.leaving) {
                m_feed.log(QStringLiteral("warning"),
                           QStringLiteral("uploading the result of lease %1 failed (%2); it is "
                                          "uploaded at the next start")
                               .arg(leaseId.toString(), reply.error()));
                active->kept = true;
                return m_departure->checkFinished();
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
                const Status s = m_store->transaction([&]() -> Status {
                    if (auto st = m_store->setState(leaseId, SubtaskState::Done); !st)
                        return st;
                    return m_store->addTotals(add);
                });
                if (!s)
                    m_feed.log(QStringLiteral("error"), s.error());
                active->record.state = SubtaskState::Done;
                m_feed.log(QStringLiteral("info"),
                           QStringLiteral("lease %1: result accepted (update %2, staleness %3)")
                               .arg(leaseId.toString())
                               .arg(reply->seq)
                               .arg(reply->staleness));
                return finishSubtask(leaseId);
            }
            case UploadOutcome::Closed:
            case UploadOutcome::Unknown:
                return dropSubtask(
                    leaseId,
                    QStringLiteral("the coordinator did not take the result: %1").arg(reply->message));
            case UploadOutcome::Invalid:
            case UploadOutcome::TooLarge:
                return failSubtask(
                    leaseId, QString(),
                    QStringLiteral("the coordinator refused the result: %1").arg(reply->message));
            }
        });
}

} // namespace gleaner::agent
