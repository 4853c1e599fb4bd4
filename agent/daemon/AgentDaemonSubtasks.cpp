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
#include "runner/WeightsPatcher.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSaveFile>

namespace gleaner::agent {

using namespace daemon_detail;

// ---- one subtask's steps ----------------------------------------------------------------------------------

void AgentDaemon::continueSubtask(const LeaseId& leaseId)
{
    auto found = m_active.value(leaseId);
    // A retry timer and "the coordinator answers again" may both ask: the step runs once, and never while the
    // subtask's worker runs.
    if (!found || found->busy || found->worker || m_stopping || !m_fatal.isEmpty())
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
    onNetwork([this, leaseId, report] { return m_client->progress(leaseId, report); },
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

std::shared_ptr<AgentDaemon::Active> AgentDaemon::stepReturned(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    if (!active || m_stopping)
        return {};
    active->busy = false;
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
    coordinatorUnreachable(error);
    const qint64 wait = backoffMs(++active->tries);
    log(QStringLiteral("warning"),
        QStringLiteral("%1 failed: %2; trying again in %3").arg(what, error, seconds(wait)));
    QTimer::singleShot(int(wait), this, [this, leaseId] { continueSubtask(leaseId); });
    updateState();
}

void AgentDaemon::download(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    const QList<ManifestFile> files = active->manifest->files;
    const QList<ManifestPatch> patches = active->manifest->weightsPatches;
    // Files already cached are hashed once more when the task folder is made; after a mismatch there, the
    // cached copy itself is checked here (an altered one is removed and fetched again).
    const bool reverify = active->tries > 0;
    StopSignal* stop = m_stop.get();
    onNetwork(
        [this, files, patches, stop, leaseId, reverify] {
            FetchOutcome outcome;
            for (const ManifestFile& file : files) {
                const CacheRole role = cacheRoleFromName(file.role).value_or(CacheRole::Unknown);
                if (m_cache->contains(file.sha256) && (!reverify || m_cache->verify(file.sha256))) {
                    m_cache->touch(file.sha256);
                    continue;
                }
                // The weights, from an earlier file this agent holds and a patch, when the manifest offers one;
                // whatever goes wrong there, the full file is fetched as before.
                if (file.role == u"weights" && !patches.isEmpty() && !reverify) {
                    auto patched = patchWeights(*m_cache, file, patches,
                                                [&](const QString& sha, const QString& path, qint64 size) {
                                                    return m_client->download(sha, path, size,
                                                                              [stop](const TransferProgress&) {
                                                                                  return !stop->stopped();
                                                                              });
                                                });
                    if (patched) {
                        outcome.bytes += *patched;
                        continue;
                    }
                    outcome.warnings << QStringLiteral("lease %1: the weights could not be patched (%2); fetching "
                                                       "the full file")
                                            .arg(leaseId.toString(), patched.error());
                }
                auto writer = m_cache->beginWrite(file.sha256, file.size, role);
                if (!writer) {
                    outcome.error = writer.error();
                    return outcome;
                }
                const CacheWriter& w = **writer;
                Status got = m_client->download(file.sha256, w.partialPath(), file.size,
                                                [stop](const TransferProgress&) { return !stop->stopped(); });
                if (!got) {
                    // More bytes than the signed size: the coordinator's copy is another file, as when its
                    // hash differs. Final, and nothing of it is kept.
                    if (CoordinatorClient::isOversizedDownload(got.error())) {
                        (*writer)->discard();
                        outcome.contentRefused = true;
                    }
                    outcome.error = got.error();
                    return outcome;
                }
                auto committed = (*writer)->commit();
                if (!committed) {
                    outcome.contentRefused = true;
                    outcome.error =
                        QStringLiteral("the %1 file of lease %2 was refused: %3. The coordinator's copy "
                                       "differs from what its signed manifest promises; nothing was run")
                            .arg(file.role, leaseId.toString(), committed.error());
                    return outcome;
                }
                outcome.bytes += file.size - w.resumeOffset(); // what this download fetched, not a resumed part
                if (committed->eviction.evicted.size() > 0)
                    qCInfo(lcDaemon).noquote()
                        << "cache: evicted" << committed->eviction.evicted.size() << "file(s)";
            }
            outcome.ok = true;
            return outcome;
        },
        [this, leaseId](FetchOutcome outcome) {
            for (const QString& warning : outcome.warnings)
                log(QStringLiteral("warning"), warning);
            if (outcome.bytes > 0) {
                SubtaskTotals add;
                add.downloadedBytes = outcome.bytes;
                if (auto s = m_store->addTotals(add); !s)
                    log(QStringLiteral("error"), s.error());
            }
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (outcome.contentRefused)
                return failSubtask(leaseId, QStringLiteral("download"), outcome.error);
            if (!outcome.ok) {
                if (active->tries + 1 >= kDownloadTriesBeforeFailing && m_reachable)
                    return failSubtask(leaseId, QStringLiteral("download"), outcome.error);
                return stepFailed(leaseId,
                                  QStringLiteral("downloading the files of lease %1").arg(leaseId.toString()),
                                  outcome.error);
            }
            coordinatorReached();
            active->tries = 0;
            if (!setState(leaseId, SubtaskState::Verified))
                return;
            publishSubtask(*active);
            prepareTaskFolder(leaseId);
        });
}

namespace {
constexpr qsizetype kMaxWarningChars = 2000;
} // namespace

namespace {

// What a worker leaves for the job's next subtask on this agent, kept per job in DATA_DIR/<folder>/job-<id>.
struct JobStateFile
{
    const char* produced; // in the task folder, written by the worker at the end of a subtask
    const char* folder;   // under the data folder
    const char* taken;    // in the next task folder, where the worker reads it
};
constexpr JobStateFile kOptimizerState{"optimizer.safetensors", "optimizer", "optimizer-in.safetensors"};
constexpr JobStateFile kResidual{"residual.safetensors", "residual", "residual-in.safetensors"};

// A result as the worker wrote it: safetensors, or an encoded update compressed with zstd (UpdateCodec).
Result<TensorBundle> readResult(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: %2").arg(path, file.errorString()));
    return UpdateCodec::unpack(file.readAll(), qint64(1) << 40);
}

} // namespace

void AgentDaemon::keepJobState(qint64 jobId, const QString& taskDir)
{
    // The worker's optimizer state at the end of the subtask: the job's next subtask on this agent starts from
    // it; and what its upload left out (error feedback): the next upload sends it. The newest wins when several
    // subtasks of one job run at once.
    for (const JobStateFile& state : {kOptimizerState, kResidual}) {
        const QString produced = taskDir + u'/' + QString::fromLatin1(state.produced);
        if (!QFileInfo::exists(produced))
            continue;
        const QString kept = jobStateFile(state.folder, jobId);
        QDir().mkpath(QFileInfo(kept).path());
        QFile::remove(kept);
        if (!QFile::rename(produced, kept))
            log(QStringLiteral("warning"),
                QStringLiteral("cannot keep %1 of job %2 in %3; its next subtask starts without it")
                    .arg(QString::fromLatin1(state.produced))
                    .arg(jobId)
                    .arg(kept));
        // One file per job: those of jobs this agent has not worked on for a week go.
        const QDir folder(QFileInfo(kept).path());
        for (const QFileInfo& old : folder.entryInfoList({QStringLiteral("job-*.safetensors")}, QDir::Files))
            if (old.lastModified().msecsTo(QDateTime::currentDateTimeUtc()) > 7LL * 24 * 3600 * 1000)
                QFile::remove(old.filePath());
    }
}

QString AgentDaemon::jobStateFile(const char* folder, qint64 jobId) const
{
    return m_options.dataDir + QStringLiteral("/%1/job-%2.safetensors").arg(QString::fromLatin1(folder)).arg(jobId);
}

void AgentDaemon::prepareTaskFolder(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    // Only a verified manifest gets a folder, named by the lease id that was signed in it.
    const QString dir = taskFolder(active->manifest->leaseId);
    const QByteArray manifestBytes = active->record.manifest;
    const QList<ManifestFile> files = active->manifest->files;
    const QString optimizerState = jobStateFile(kOptimizerState.folder, active->manifest->jobId);
    const QString residual = jobStateFile(kResidual.folder, active->manifest->jobId);
    // On the network thread, in order after any download of the same files: hashing is disk work that must
    // not hold up the loop.
    onNetwork(
        [this, dir, manifestBytes, files, optimizerState, residual] {
            FetchOutcome outcome;
            if (!QDir().mkpath(dir)) {
                outcome.error = QStringLiteral("cannot create the task folder %1").arg(dir);
                return outcome;
            }
            QSaveFile manifest(dir + QStringLiteral("/manifest.json"));
            if (!manifest.open(QIODevice::WriteOnly) ||
                manifest.write(manifestBytes) != manifestBytes.size() || !manifest.commit()) {
                outcome.error = QStringLiteral("cannot write %1").arg(manifest.fileName());
                return outcome;
            }
            for (const ManifestFile& file : files) {
                if (file.role == u"model")
                    continue; // the manifest carries the model spec
                const QString target = dir + u'/' + fileName(file.role);
                // Every file is hashed right before a worker may read it; what is already in place is checked
                // in place (a resumed task), anything else is linked from the cache and checked there.
                if (!QFileInfo::exists(target)) {
                    const QString cached = m_cache->path(file.sha256);
                    if (cached.isEmpty()) {
                        outcome.error =
                            QStringLiteral("the %1 file %2 left the cache before the task started")
                                .arg(file.role, file.sha256);
                        return outcome;
                    }
                    if (auto s = linkOrCopy(cached, target); !s) {
                        outcome.error = s.error();
                        return outcome;
                    }
                }
                auto digest = Sha256::hashFile(target);
                if (!digest) {
                    outcome.error = digest.error();
                    return outcome;
                }
                const QString hex = Sha256::toHex(*digest);
                if (hex != file.sha256) {
                    QFile::remove(target);
                    outcome.contentRefused = true;
                    outcome.error =
                        QStringLiteral("%1 has SHA-256 %2, but the signed manifest says %3: the file was "
                                       "altered on this machine; nothing was run")
                            .arg(target, hex, file.sha256);
                    return outcome;
                }
            }
            // The job's optimizer state from this agent's previous subtask, for a worker that starts afresh (one
            // that resumes takes its checkpoint's). A copy: the next subtask to finish replaces the original.
            const QString optimizerIn = dir + u'/' + QString::fromLatin1(kOptimizerState.taken);
            if (QFileInfo::exists(optimizerState) && !QFileInfo::exists(dir + QStringLiteral("/checkpoint.safetensors")) &&
                !QFileInfo::exists(optimizerIn))
                (void)QFile::copy(optimizerState, optimizerIn);
            // What earlier uploads left out goes with one upload only: moved, not copied, or two subtasks of
            // the job running at once would both send it.
            const QString residualIn = dir + u'/' + QString::fromLatin1(kResidual.taken);
            if (QFileInfo::exists(residual) && !QFileInfo::exists(residualIn))
                (void)QFile::rename(residual, residualIn);
            outcome.ok = true;
            return outcome;
        },
        [this, leaseId, dir](FetchOutcome outcome) {
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (!outcome.ok) {
                if (outcome.contentRefused) {
                    // Fetch it again: the coordinator's copy may well be intact.
                    log(QStringLiteral("warning"), outcome.error);
                    if (active->tries++ == 0)
                        return download(
                            leaseId); // checks the cached copy, fetches it again if it was altered
                }
                return failSubtask(leaseId, QStringLiteral("verify"), outcome.error);
            }
            if (active->record.taskDir != dir) {
                (void)m_store->setTaskDir(leaseId, dir);
                active->record.taskDir = dir;
            }
            startWorker(leaseId);
        });
}

void AgentDaemon::startWorker(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    // The stored manifest is checked again right before anything runs.
    auto manifest = checkStoredManifest(active->record);
    if (!manifest)
        return failSubtask(leaseId, QStringLiteral("verify"), manifest.error());
    if (active->record.state != SubtaskState::Training && !setState(leaseId, SubtaskState::Training))
        return;
    if (!computeAllowed()) {
        // Nothing starts while the computer is not ours to use (not even the model loading): syncWorkers()
        // starts it when that changes. The lease is kept alive meanwhile, as for a paused worker.
        if (!active->startWhenAllowed) {
            active->startWhenAllowed = true;
            active->pausedSinceMs = nowMs();
            publishSubtask(*active);
        }
        return updateState();
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
    launch.cpuShare = m_options.cpuShare;
    launch.checkpointIntervalSeconds = m_options.checkpointIntervalSeconds;
    launch.device = device;
    launch.memoryCapBytes = m_options.memoryCapBytes;
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
    syncWorkers(); // a worker started while the owner or the policy holds the others waits with them
    publishSubtask(*active);
    updateState();
}

void AgentDaemon::onWorkerEvent(const LeaseId& leaseId, const QJsonObject& event)
{
    if (event.value(QStringLiteral("event")).toString() == u"sandbox") {
        // The same for every worker of this machine: logged when it changes, not per subtask.
        if (const QString line = m_sandbox.observe(event); !line.isEmpty())
            log(m_sandbox.unconfined() ? QStringLiteral("warning") : QStringLiteral("info"), line);
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
            if (event.value(QStringLiteral("resumed")).toBool())
                log(QStringLiteral("info"),
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
            Q_EMIT controlEvent(QJsonObject{{QStringLiteral("event"), QStringLiteral("progress")},
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
        publishSubtask(active);
        updateState();
    } else if (name == u"done") {
        // The totals are read from the result file at upload, so that they survive a restart in between.
    } else if (name == u"error") {
        active.failure = event.value(QStringLiteral("message")).toString();
    } else if (name == u"warning") {
        // A worker's line may be a megabyte long; the log keeps a readable line of it.
        log(QStringLiteral("warning"),
            QStringLiteral("lease %1: %2")
                .arg(leaseId.toString(), event.value(QStringLiteral("message")).toString().left(kMaxWarningChars)));
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
    onNetwork([this, leaseId, report] { return m_client->progress(leaseId, report); },
              [this, leaseId](Result<ProgressReply> reply) {
                  auto active = m_active.value(leaseId);
                  if (!active)
                      return;
                  active->reportInFlight = false;
                  if (!reply) {
                      if (CoordinatorClient::isCredentialRefusal(reply.error()))
                          return refuseCredentials(reply.error());
                      // The worker keeps training: the result may still be accepted late, once.
                      coordinatorUnreachable(reply.error());
                      updateState();
                      return;
                  }
                  coordinatorReached();
                  if (reply->abort || reply->leaseGone) {
                      active->cancelReason =
                          reply->reason.isEmpty()
                              ? QStringLiteral("the coordinator no longer holds lease %1 open")
                                    .arg(leaseId.toString())
                              : reply->reason;
                      log(QStringLiteral("info"), QStringLiteral("lease %1: stopping its worker: %2")
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
        keepJobState(active.manifest->jobId, active.record.taskDir);
    if (m_stopping) {
        if (end.kind == WorkerEnd::Kind::Done)
            (void)setState(leaseId, SubtaskState::Uploading); // uploaded by the next start
        return checkFinished();
    }
    if (!active.cancelReason.isEmpty())
        return dropSubtask(leaseId, active.cancelReason);
    if (!m_fatal.isEmpty() && end.kind == WorkerEnd::Kind::Stopped)
        return updateState(); // stopped for the refused credentials; kept for an operator to restore the
                              // agent
    switch (end.kind) {
    case WorkerEnd::Kind::Done:
        if (!setState(leaseId, SubtaskState::Uploading))
            return;
        publishSubtask(active);
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
            log(QStringLiteral("warning"),
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
    const QString result = taskFolder(leaseId) + QStringLiteral("/result.safetensors");
    if (!QFileInfo::exists(result)) {
        active->busy = false;
        return failSubtask(leaseId, QStringLiteral("upload"),
                           QStringLiteral("%1 is missing; the result was lost").arg(result));
    }
    StopSignal* stop = m_stop.get();
    onNetwork(
        [this, leaseId, result, stop] {
            return m_client->uploadResult(leaseId, result,
                                          [stop](const TransferProgress&) { return !stop->stopped(); });
        },
        [this, leaseId, result](Result<UploadReply> reply) {
            auto active = stepReturned(leaseId);
            if (!active)
                return;
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
                    log(QStringLiteral("error"), s.error());
                active->record.state = SubtaskState::Done;
                log(QStringLiteral("info"),
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
