#include "daemon/WorkerRuns.h"

#include "daemon/ActiveSubtask.h"
#include "daemon/AgentStatus.h"
#include "daemon/Departure.h"
#include "daemon/EventFeed.h"
#include "daemon/LeaseDesk.h"
#include "daemon/Lifecycle.h"
#include "daemon/MachineGate.h"
#include "daemon/SubtaskSteps.h"
#include "daemon/SubtaskTable.h"
#include "daemon/TaskFiles.h"

#include <QFile>
#include <QJsonDocument>
#include <QSaveFile>

namespace gleaner::agent {

namespace {
constexpr qsizetype kMaxWarningChars = 2000;
constexpr qint64 kPublishProgressEveryMs = 500;
} // namespace

WorkerRuns::WorkerRuns(Parts parts, QString workerProgram, qint64 progressReportMs)
    : m_parts(parts), m_workerProgram(std::move(workerProgram)), m_progressReportMs(progressReportMs)
{
}

void WorkerRuns::startWorker(const LeaseId& leaseId)
{
    auto active = m_parts.subtasks.value(leaseId);
    // The stored manifest is checked again right before anything runs.
    auto manifest = m_parts.leasing.checkStoredManifest(active->record);
    if (!manifest)
        return m_parts.steps.fail(leaseId, QStringLiteral("verify"), manifest.error());
    if (active->record.state != SubtaskState::Training &&
        !m_parts.steps.setState(leaseId, SubtaskState::Training))
        return;
    if (!m_parts.gate.computeAllowed()) {
        // Nothing starts while the computer is not ours to use (not even the model loading): syncWorkers()
        // starts it when that changes. The lease is kept alive meanwhile, as for a paused worker.
        if (!active->startWhenAllowed) {
            active->startWhenAllowed = true;
            active->pausedSinceMs = m_parts.clock.nowMs();
            m_parts.status.publish(*active);
        }
        return m_parts.status.update();
    }
    active->startWhenAllowed = false;
    auto starts = m_parts.store.countWorkerStart(leaseId);
    if (starts)
        active->record.workerStarts = *starts;

    const auto [threads, device] = launchSettings(*active);
    WorkerLaunch launch;
    launch.program = m_workerProgram;
    launch.taskDir = active->record.taskDir;
    launch.threads = threads;
    launch.cpuShare = m_parts.gate.limits().cpuShare;
    launch.checkpointIntervalSeconds = m_parts.gate.limits().checkpointIntervalSeconds;
    launch.device = device;
    launch.memoryCapBytes = m_parts.gate.limits().memoryCapBytes;
    launch.kernelMemoryCapBytes = m_parts.gate.kernelMemoryCap();
    launch.allowUnconfinedModels = m_parts.gate.allowUnconfinedModels();
    auto* worker = new WorkerProcess(launch, &m_parts.loop);
    active->worker = worker;
    active->firstStep = -1;
    active->workerPaused = false;
    active->pauseSent = false;
    QObject::connect(worker, &WorkerProcess::event, &m_parts.loop,
                     [this, leaseId](const QJsonObject& e) { onWorkerEvent(leaseId, e); });
    QObject::connect(worker, &WorkerProcess::ended, &m_parts.loop,
                     [this, leaseId](const WorkerEnd& end) { onWorkerEnded(leaseId, end); });
    worker->start();
    m_parts.gate
        .syncWorkers(); // a worker started while the owner or the policy holds the others waits with them
    m_parts.status.publish(*active);
    m_parts.status.update();
}

std::pair<int, QString> WorkerRuns::launchSettings(const ActiveSubtask& active)
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
    const std::pair<int, QString> settings{m_parts.gate.limits().threads, m_parts.gate.workerDevice()};
    QSaveFile out(path);
    if (!out.open(QIODevice::WriteOnly) ||
        out.write(QJsonDocument(QJsonObject{{QStringLiteral("threads"), settings.first},
                                            {QStringLiteral("device"), settings.second}})
                      .toJson(QJsonDocument::Compact)) < 0 ||
        !out.commit())
        m_parts.feed.log(
            QStringLiteral("warning"),
            QStringLiteral("cannot write %1: a restart of this subtask may use other settings").arg(path));
    return settings;
}

void WorkerRuns::onWorkerEvent(const LeaseId& leaseId, const QJsonObject& event)
{
    if (event.value(QStringLiteral("event")).toString() == u"sandbox") {
        // The same for every worker of this machine: logged when it changes, not per subtask.
        if (const QString line = m_parts.status.sandbox().observe(event); !line.isEmpty())
            m_parts.feed.log(m_parts.status.sandbox().unconfined() ? QStringLiteral("warning")
                                                                   : QStringLiteral("info"),
                             line);
        return;
    }
    auto found = m_parts.subtasks.value(leaseId);
    if (!found)
        return;
    ActiveSubtask& active = *found;
    const QString name = event.value(QStringLiteral("event")).toString();
    const qint64 now = m_parts.clock.nowMs();
    if (name == u"started" || name == u"progress") {
        active.lastProgressMs = now;
        active.step = event.value(QStringLiteral("step")).toInteger(active.step);
        active.of = event.value(QStringLiteral("of")).toInteger(active.of);
        if (name == u"started") {
            if (event.value(QStringLiteral("handed_back")).toBool())
                m_parts.feed.log(
                    QStringLiteral("info"),
                    QStringLiteral(
                        "lease %1: worker resumed from the checkpoint lease %4 handed back, at step %2 of %3")
                        .arg(leaseId.toString())
                        .arg(active.step)
                        .arg(active.of)
                        .arg(active.manifest ? active.manifest->resumeFromLease : QString()));
            else if (event.value(QStringLiteral("resumed")).toBool())
                m_parts.feed.log(
                    QStringLiteral("info"),
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
            m_parts.feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("progress")},
                                             {QStringLiteral("lease_id"), leaseId.toString()},
                                             {QStringLiteral("step"), active.step},
                                             {QStringLiteral("of"), active.of},
                                             {QStringLiteral("loss"), active.loss},
                                             {QStringLiteral("samples_per_s"), active.samplesPerSecond},
                                             {QStringLiteral("eta_seconds"), active.etaSeconds(now)}});
        }
        if (now - active.lastReportMs >= m_progressReportMs)
            m_parts.steps.reportProgress(leaseId);
    } else if (name == u"paused" || name == u"resumed") {
        active.workerPaused = name == u"paused";
        active.pausedSinceMs = now;
        m_parts.status.publish(active);
        m_parts.status.update();
    } else if (name == u"done") {
        // The totals are read from the result file at upload, so that they survive a restart in between.
    } else if (name == u"error") {
        active.failure = event.value(QStringLiteral("message")).toString();
    } else if (name == u"warning") {
        // A worker's line may be a megabyte long; the log keeps a readable line of it.
        m_parts.feed.log(QStringLiteral("warning"),
                         QStringLiteral("lease %1: %2")
                             .arg(leaseId.toString(),
                                  event.value(QStringLiteral("message")).toString().left(kMaxWarningChars)));
    }
}

void WorkerRuns::onWorkerEnded(const LeaseId& leaseId, const WorkerEnd& end)
{
    auto found = m_parts.subtasks.value(leaseId);
    if (!found)
        return;
    ActiveSubtask& active = *found;
    if (active.worker) {
        active.worker->deleteLater();
        active.worker = nullptr;
    }
    if (end.kind == WorkerEnd::Kind::Done && active.manifest)
        for (const QString& warning :
             m_parts.files.keepJobState(active.manifest->jobId, active.record.taskDir))
            m_parts.feed.log(QStringLiteral("warning"), warning);
    if (m_parts.lifecycle.stopping) {
        if (end.kind == WorkerEnd::Kind::Done) {
            // Uploaded by the next start, or now when leaving.
            if (!m_parts.steps.setState(leaseId, SubtaskState::Uploading))
                return m_parts.departure.checkFinished();
            if (m_parts.lifecycle.leaving && !active.kept)
                return m_parts.steps.upload(leaseId);
        } else if (m_parts.lifecycle.leaving && !active.kept) {
            return m_parts.departure.leaveSubtask(
                leaseId); // stopped with its checkpoint written: handed back
        }
        return m_parts.departure.checkFinished();
    }
    if (!active.cancelReason.isEmpty())
        return m_parts.steps.drop(leaseId, active.cancelReason);
    if (!m_parts.lifecycle.fatal.isEmpty() && end.kind == WorkerEnd::Kind::Stopped)
        return m_parts.status
            .update(); // stopped for the refused credentials: kept for an operator to restore
    switch (end.kind) {
    case WorkerEnd::Kind::Done:
        if (!m_parts.steps.setState(leaseId, SubtaskState::Uploading))
            return;
        m_parts.status.publish(active);
        return m_parts.steps.upload(leaseId);
    case WorkerEnd::Kind::Cancelled:
        return m_parts.steps.drop(leaseId, QStringLiteral("its worker was cancelled"));
    case WorkerEnd::Kind::NotStarted:
        return m_parts.steps.fail(leaseId, QStringLiteral("worker"), end.reason);
    case WorkerEnd::Kind::Stopped:
    case WorkerEnd::Kind::Failed:
    case WorkerEnd::Kind::Crashed:
    case WorkerEnd::Kind::OverMemory: {
        const QString reason =
            end.kind == WorkerEnd::Kind::Stopped ? QStringLiteral("the worker stopped unasked") : end.reason;
        if (++active.workerFailures < 2) {
            m_parts.feed.log(QStringLiteral("warning"),
                             QStringLiteral("lease %1: %2; starting it once more from its checkpoint")
                                 .arg(leaseId.toString(), reason));
            return startWorker(leaseId);
        }
        return m_parts.steps.fail(leaseId, QStringLiteral("worker"),
                                  QStringLiteral("%1 (twice; the subtask is given back)").arg(reason));
    }
    }
}
} // namespace gleaner::agent
