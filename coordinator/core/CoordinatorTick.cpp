// Coordinator: the housekeeping tick, and what it clears: expired leases, retired weights files. Also the
// answer for a lease no longer in memory.
#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "intake/AgentStanding.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QLoggingCategory>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {

HttpResponse Coordinator::leaseNotInMemory(const QString& agentId, const QString& leaseId) const
{
    // Closed leases leave memory; the admission cache still knows why, also across restarts.
    const auto known = m_admission.lease(leaseId);
    if (known && known->agentId == agentId && !known->closedReason.isEmpty())
        return HttpResponse::error(409, known->closedReason);
    if (auto left = m_takeUp->leaseLeftToOthers(
            agentId, leaseId)) // the agent tries again, perhaps at another coordinator
        return *left;
    return HttpResponse::error(
        404, QStringLiteral("lease %1 is not known (or its job has finished)").arg(leaseId));
}

void Coordinator::onLeaseExpired(const Lease& lease, const JobState* job)
{
    m_feed->noteLeaseExpired(lease);
    // Work that an ended job no longer wanted is not the agent's failure.
    if (job && (job->status == JobStatus::Running || job->status == JobStatus::Paused))
        m_enrollment->recordOutcome(lease.agentId, "timed_out");
}

void Coordinator::removeRetiredWeights(const QSet<QString>& alsoNeeded)
{
    // A weights file is published about once a second while updates flow: without this, a busy job would fill
    // the disk with 20 MB files nobody will download again. Blobs are shared by content across jobs (two jobs
    // with the same model and seed publish identical files), so what is needed is collected over all of them.
    QSet<QString> needed = alsoNeeded;
    for (const Lease& lease : m_scheduler->leases())
        if (lease.state == Lease::State::Open || lease.state == Lease::State::Expired)
            needed.insert(lease.weightsSha);
    for (const auto& [id, job] : m_jobs) {
        for (const auto& [unitId, unit] :
             job.workunits) // the next lease of a handed-back workunit trains from it
            if (unit.resume)
                needed.insert(unit.resume->weightsSha);
        needed.insert(job.published.sha256);
        needed.insert(job.snapshotSha);
        needed.insert(job.snapshotRuleSha);
        for (const auto& [seq, base] : job.basesInFlight)
            needed.insert(base);
        needed.insert(job.files.initialWeights.sha256);
    }
    for (auto& [id, job] : m_jobs) {
        auto keep = std::remove_if(job.retired.begin(), job.retired.end(), [&](const PublishedWeights& old) {
            if (needed.contains(old.sha256))
                return false;
            QFile::remove(m_blobs.path(old.sha256));
            // A patch to a file nobody is handed any more is of no use either.
            for (const WeightsPatchRef& patch : old.patches)
                if (!needed.contains(patch.sha256))
                    QFile::remove(m_blobs.path(patch.sha256));
            return true;
        });
        job.retired.erase(keep, job.retired.end());
    }
}

void Coordinator::tick()
{
    m_pacer->answerParked(); // those whose publication did not come in time (a weights thread busy with a
                             // backlog)
    for (auto& [id, job] : m_jobs) // what a job's lock showed since the last tick (Scheduler::lockJob)
        if (job.endedElsewhere) {
            const auto [status, reason] = *job.endedElsewhere; // a copy: finish() clears it
            m_jobDesk->finish(job, status, reason, /*persist=*/false);
        }
    m_scheduler->expire();
    const qint64 now = m_clock.nowMs();
    const bool keeper = m_db->holdsHousekeeping();
    if (keeper != m_housekeeper && m_config.isShared())
        qCInfo(lcCoordinator) << (keeper ? "this coordinator does the deployment's housekeeping now"
                                         : "another coordinator does the deployment's housekeeping now");
    // Taking the housekeeping over: the validations the last housekeeper made since the last look are not
    // made again.
    if (keeper && !m_housekeeper && m_config.isShared())
        m_deployment->followValidations();
    m_housekeeper = keeper;
    m_weights->keepSnapshots(keeper);
    if (m_config.isShared()) {
        m_deployment->keepSharedHouse(now);
    } else {
        removeRetiredWeights();
        m_handBacks->removeUnused();
        if (auto s = m_tallies->flushIfDue(now); !s)
            qCWarning(lcCoordinator) << "cannot store the file bytes sent (tried again in a moment):"
                                     << s.error();
    }
    for (auto& [id, job] : m_jobs) {
        if (job.status != JobStatus::Running && job.status != JobStatus::Paused)
            continue;
        // Among several coordinators, the others' folds move the weights as well: each one publishes what the
        // shared copy holds (a publication that finds no new version writes nothing).
        if ((job.published.version < job.updatesApplied || m_config.isShared()) &&
            now - job.published.atMs >= qint64(m_config.publishIntervalMs))
            m_weights->publish(id);
        m_weights->snapshot(id, false); // the housekeeper's only (WeightsKeeper::keepSnapshots)
        m_jobDesk->scheduleValidations(job); // retries a validation that failed
        m_scheduler->openNextEpochIfReady(job);
    }
    const WeightsKeeper::Backlog backlog = m_weights->backlog();
    m_metrics.foldBacklog(backlog.updates, backlog.bytes);
    m_feed->publishDashboardState();
}

} // namespace gleaner::coordinator
