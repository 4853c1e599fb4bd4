// Coordinator: an agent that leaves hands its work back (protocol 6.8), with the checkpoint its worker wrote, so
// that the next agent resumes where it stopped instead of waiting for the lease's deadline and starting over.
#include "core/Coordinator.h"
#include "ml/Checkpoint.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"

#include <QFile>
#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {

QString Coordinator::handedBackLeaseMessage(const QString& leaseId)
{
    return QStringLiteral("lease %1 is closed: the agent handed it back").arg(leaseId);
}

std::optional<CheckpointExpectations> Coordinator::checkpointExpectationsFor(const QString& leaseId) const
{
    auto lease = m_scheduler->leases().constFind(leaseId);
    if (lease == m_scheduler->leases().cend() || lease->state != Lease::State::Open)
        return std::nullopt;
    auto job = m_jobs.find(lease->jobId);
    if (job == m_jobs.end() || job->second.schema.isEmpty() ||
        (job->second.status != JobStatus::Running && job->second.status != JobStatus::Paused))
        return std::nullopt;
    auto unit = job->second.workunits.find(lease->workunitId);
    if (unit == job->second.workunits.end() || unit->second.shard < 0 ||
        unit->second.shard >= job->second.files.shards.size())
        return std::nullopt;
    const JobSpec& spec = job->second.spec;
    const ShardRef& shard = job->second.files.shards.at(unit->second.shard);
    CheckpointExpectations expected;
    expected.schema = job->second.schema;
    expected.baseWeightsSha = lease->weightsSha;
    expected.baseWeightsPath = m_blobs.path(lease->weightsSha);
    expected.shardSha = shard.sha256;
    expected.shardPath = m_blobs.path(shard.sha256);
    expected.requestHash = ml::RunIdentity::requestHash(
        spec.model.toJson(), spec.optimizer.toJson(), spec.localEpochs, spec.batchSize,
        workunitSeed(spec, unit->second.id), lease->steps, spec.augment);
    expected.shardSamples = shard.samples;
    expected.batchSize = spec.batchSize;
    expected.maxSteps = lease->steps > 0 ? lease->steps
                                         : (shard.samples + spec.batchSize - 1) / spec.batchSize * spec.localEpochs;
    return expected;
}

HttpResponse Coordinator::handBack(const QString& agentId, const QString& leaseId, std::optional<BlobInfo> checkpoint,
                                   std::optional<CheckedCheckpoint> checked, const QString& refusal, bool refusedByCheck)
{
    // A checkpoint blob this call does not keep is deleted at the end, unless something else names it.
    QString dropped = checkpoint ? checkpoint->sha256 : QString();
    const auto cleanUp = [&] {
        if (!dropped.isEmpty() && !m_checkpoints.contains(dropped))
            QFile::remove(m_blobs.path(dropped));
    };
    Lease* lease = findLease(leaseId);
    if (!lease) {
        cleanUp();
        return leaseNotInMemory(agentId, leaseId);
    }
    if (lease->agentId != agentId) {
        cleanUp();
        return HttpResponse::error(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
    }
    if (lease->state != Lease::State::Open && lease->state != Lease::State::Expired) {
        cleanUp();
        return HttpResponse::error(409, QStringLiteral("lease %1 is closed").arg(leaseId));
    }
    m_enrollment->touch(agentId);
    JobState* job = findJob(lease->jobId);
    const bool working = job && (job->status == JobStatus::Running || job->status == JobStatus::Paused);

    // Whether the checkpoint is kept: the lease must still be the workunit's (an expired one may be another
    // agent's by now), the weights within the job's bound, and the disk within the coordinator's cap.
    QString why = refusal;
    if (checkpoint && checked && why.isEmpty()) {
        qint64 kept = 0;
        for (qint64 size : std::as_const(m_checkpoints))
            kept += size;
        const double limit = job ? job->updateBound.limit(checked->baseNorm) : 0.0;
        if (!working)
            why = QStringLiteral("the job takes no more work");
        else if (lease->state != Lease::State::Open)
            why = QStringLiteral("the lease had expired: its workunit may be another agent's by now");
        else if (checked->step <= 0)
            why = QStringLiteral("the checkpoint holds no training yet");
        // Half the bound: the rest of the subtask's training must still fit in it (an honest checkpoint is a
        // part of one step, a fifth of the bound at most once the bound is learnt).
        else if (checked->distance > limit / 2)
            why = QStringLiteral("its weights moved %1 from the lease's, more than this job allows part-way (%2)")
                      .arg(checked->distance, 0, 'g', 4)
                      .arg(limit / 2, 0, 'g', 4);
        else if (kept + checkpoint->size > qint64(m_config.handbackCapMb) * 1024 * 1024)
            why = QStringLiteral("the coordinator's room for handed-back checkpoints (handback_cap_mb %1) is full")
                      .arg(m_config.handbackCapMb);
    }
    std::optional<Workunit::ResumePoint> resume;
    if (checkpoint && checked && why.isEmpty())
        resume = Workunit::ResumePoint{leaseId,           checkpoint->sha256, checkpoint->size, checked->step,
                                       lease->baseVersion, lease->weightsSha, lease->steps,    agentId};

    const qint64 workunitId = lease->workunitId;
    const qint64 reachedStep = std::max<qint64>(lease->lastStep, 0);
    Scheduler::HandBackOutcome outcome;
    // The closed lease and the workunit with its resume point, in one commit.
    const Status recorded = m_db->transaction([&]() -> Status {
        outcome = m_scheduler->handedBack(job, leaseId, resume);
        return {};
    });
    lease = nullptr; // gone from the scheduler's memory
    if (!recorded) {
        qCCritical(lcCoordinator) << "cannot record the hand-back of lease" << leaseId << ":" << recorded.error();
        cleanUp();
        return HttpResponse::error(500, QStringLiteral("the coordinator cannot record the hand-back; try again later"));
    }
    m_admission.closeLease(leaseId, handedBackLeaseMessage(leaseId));
    // An honest agent's worker writes checkpoints that pass; one that does not is counted like a refused result, so
    // that an agent that keeps sending them is quarantined (the lease is handed back all the same).
    if (refusedByCheck && !refusal.isEmpty())
        countRefusal(agentId, QStringLiteral("the checkpoint it handed back was refused: %1").arg(refusal));
    if (outcome.resumeKept) {
        m_checkpoints.insert(checkpoint->sha256, checkpoint->size);
        dropped.clear();
    } else if (resume && why.isEmpty()) {
        why = QStringLiteral("the workunit is done or held by another lease");
    }
    cleanUp();

    QString what = outcome.requeued ? QStringLiteral("goes back to the queue") : QStringLiteral("is done or held by another lease");
    if (outcome.resumeKept)
        what += QStringLiteral(", resuming at step %1 from the checkpoint handed back").arg(resume->step);
    else if (outcome.requeued)
        what += QStringLiteral(", from step 0");
    qCInfo(lcCoordinator).noquote() << QStringLiteral("agent %1 handed lease %2 back (last reported step %3); workunit %4 %5%6")
                                           .arg(agentId, leaseId)
                                           .arg(reachedStep)
                                           .arg(workunitId)
                                           .arg(what)
                                           .arg(why.isEmpty() ? QString()
                                                              : QStringLiteral(" (its checkpoint was not kept: %1)").arg(why));

    QJsonObject reply;
    reply.insert(QStringLiteral("released"), true);
    reply.insert(QStringLiteral("requeued"), outcome.requeued);
    reply.insert(QStringLiteral("checkpoint"), outcome.resumeKept   ? QStringLiteral("kept")
                                               : checkpoint || !why.isEmpty() ? QStringLiteral("refused")
                                                                  : QStringLiteral("none"));
    if (outcome.resumeKept)
        reply.insert(QStringLiteral("step"), resume->step);
    if (!why.isEmpty())
        reply.insert(QStringLiteral("reason"), why);
    return HttpResponse::json(200, reply);
}

void Coordinator::removeUnusedCheckpoints(const QSet<QString>& alsoNeeded)
{
    if (m_checkpoints.isEmpty())
        return;
    QSet<QString> needed = alsoNeeded;
    for (const Lease& lease : m_scheduler->leases())
        if (!lease.checkpointSha.isEmpty())
            needed.insert(lease.checkpointSha);
    for (const auto& [id, job] : m_jobs)
        for (const auto& [unitId, unit] : job.workunits)
            if (unit.resume)
                needed.insert(unit.resume->sha256);
    for (auto it = m_checkpoints.begin(); it != m_checkpoints.end();) {
        if (needed.contains(it.key())) {
            ++it;
            continue;
        }
        QFile::remove(m_blobs.path(it.key()));
        it = m_checkpoints.erase(it);
    }
}

} // namespace gleaner::coordinator
