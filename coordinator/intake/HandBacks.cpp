#include "intake/HandBacks.h"

#include "admission/AdmissionCache.h"
#include "config/DataDirectory.h"
#include "enrollment/Enrollment.h"
#include "intake/AgentStanding.h"
#include "ml/Checkpoint.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"

#include <QFile>
#include <QLoggingCategory>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcIntake)

namespace gleaner::coordinator {
namespace {

constexpr int kMaxFailureReasonLength = 2000;
const char* const kFailureStages[] = {"verify", "download", "worker", "upload", "other"};

bool isFailureStage(const QString& stage)
{
    return std::any_of(std::begin(kFailureStages), std::end(kFailureStages),
                       [&](const char* name) { return stage == QLatin1String(name); });
}

} // namespace

HandBacks::HandBacks(Parts parts, const CoordinatorConfig& config, const Clock& clock, LeaseLookup leases)
    : m_parts(parts), m_config(config), m_clock(clock), m_leases(std::move(leases))
{
}

JobState* HandBacks::findJob(qint64 jobId)
{
    auto found = m_parts.jobs.find(jobId);
    return found == m_parts.jobs.end() ? nullptr : &found->second;
}

HttpResponse HandBacks::failed(const QString& agentId, const QString& leaseId, const QJsonObject& report)
{
    const QJsonValue reasonValue = report.value(QStringLiteral("reason"));
    const QString reason = reasonValue.toString().trimmed();
    if (!reasonValue.isString() || reason.isEmpty() || reason.size() > kMaxFailureReasonLength)
        return HttpResponse::error(400, QStringLiteral("reason: expected a string of 1 to %1 characters "
                                                       "saying why the subtask failed")
                                            .arg(kMaxFailureReasonLength));
    const QString stage = report.value(QStringLiteral("stage")).toString();
    if (!report.value(QStringLiteral("stage")).isString() || !isFailureStage(stage))
        return HttpResponse::error(
            400, QStringLiteral("stage: expected one of verify, download, worker, upload, other"));

    Lease* lease = m_leases.find(leaseId);
    if (!lease)
        return m_leases.notInMemory(agentId, leaseId);
    if (lease->agentId != agentId)
        return HttpResponse::error(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
    if (auto decided = resultAlreadyDecided(*lease))
        return *decided;

    JobState* job = findJob(lease->jobId);
    // Work that an ended job no longer wanted is not the agent's failure (as with a missed deadline). Nor is
    // a worker that failed on a checkpoint another agent handed back (training from it diverged, say): the
    // checkpoint is discarded below, so the next agent starts afresh instead of failing the same way.
    const QString resumedFrom = stage == u"worker" ? lease->checkpointSha : QString();
    const bool counts = job && (job->status == JobStatus::Running || job->status == JobStatus::Paused) &&
                        resumedFrom.isEmpty();
    const Status recorded = m_parts.db.transaction([&]() -> Status {
        auto closed = m_parts.db.exec(
            QStringLiteral("UPDATE leases SET state = ?, fail_stage = ?, fail_reason = ? WHERE id = ?"),
            {leaseStateName(Lease::State::Failed), stage, reason, leaseId});
        if (!closed)
            return fail(closed.error());
        auto agent = m_parts.db.exec(
            QStringLiteral("UPDATE agents SET failed = failed + ?, last_seen_ms = ? WHERE id = ?"),
            {counts ? 1 : 0, m_clock.nowMs(), agentId});
        if (!agent)
            return fail(agent.error());
        return {};
    });
    if (!recorded) {
        qCCritical(lcIntake) << "cannot record the failure of lease" << leaseId << ":" << recorded.error();
        return HttpResponse::error(
            500, QStringLiteral("the coordinator cannot record the failure; try again later"));
    }
    // Memory follows the database only once it committed; the workunit goes back to the queue unless it is
    // done or another agent's lease still holds it.
    m_parts.admission.closeLease(leaseId, closedLeaseMessage(leaseId, Lease::State::Failed));
    const qint64 workunitId = lease->workunitId;
    lease = nullptr;
    const bool requeue = m_parts.scheduler.released(job, leaseId, Lease::State::Failed);
    if (!resumedFrom.isEmpty())
        (void)m_parts.scheduler.discardResume(job, workunitId, resumedFrom);
    // QDebug quotes and escapes the reason: one line, whatever the agent sent.
    qCWarning(lcIntake).nospace() << "agent " << agentId << " reported lease " << leaseId
                                  << " failed at stage " << stage << ": " << reason << "; workunit "
                                  << workunitId
                                  << (requeue ? " goes back to the queue"
                                              : " is done or held by another lease");

    QJsonObject reply;
    reply.insert(QStringLiteral("released"), true);
    return HttpResponse::json(200, reply);
}

std::optional<CheckpointExpectations> HandBacks::checkpointExpectationsFor(const QString& leaseId) const
{
    auto lease = m_parts.scheduler.leases().constFind(leaseId);
    if (lease == m_parts.scheduler.leases().cend() || lease->state != Lease::State::Open)
        return std::nullopt;
    auto job = m_parts.jobs.find(lease->jobId);
    if (job == m_parts.jobs.end() || job->second.schema.isEmpty() ||
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
    expected.baseWeightsPath = m_parts.blobs.path(lease->weightsSha);
    expected.shardSha = shard.sha256;
    expected.shardPath = m_parts.blobs.path(shard.sha256);
    expected.requestHash = ml::RunIdentity::requestHash(
        spec.model.toJson(), spec.optimizerAt(lease->baseVersion).toJson(), spec.localEpochs, spec.batchSize,
        workunitSeed(spec, unit->second.id), lease->steps, spec.augment);
    expected.shardSamples = shard.samples;
    expected.batchSize = spec.batchSize;
    expected.maxSteps = lease->steps > 0
                            ? lease->steps
                            : (shard.samples + spec.batchSize - 1) / spec.batchSize * spec.localEpochs;
    return expected;
}

HttpResponse HandBacks::handBack(const QString& agentId, const QString& leaseId,
                                 std::optional<BlobInfo> checkpoint, std::optional<CheckedCheckpoint> checked,
                                 const QString& refusal, bool refusedByCheck)
{
    // A checkpoint blob this call does not keep is deleted at the end, unless something else names it.
    QString dropped = checkpoint ? checkpoint->sha256 : QString();
    const auto cleanUp = [&] {
        if (!dropped.isEmpty() && !m_checkpoints.contains(dropped))
            QFile::remove(m_parts.blobs.path(dropped));
    };
    Lease* lease = m_leases.find(leaseId);
    if (!lease) {
        cleanUp();
        return m_leases.notInMemory(agentId, leaseId);
    }
    if (lease->agentId != agentId) {
        cleanUp();
        return HttpResponse::error(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
    }
    if (lease->state != Lease::State::Open && lease->state != Lease::State::Expired) {
        cleanUp();
        return HttpResponse::error(409, QStringLiteral("lease %1 is closed").arg(leaseId));
    }
    m_parts.enrollment.touch(agentId);
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
            why = QStringLiteral(
                      "its weights moved %1 from the lease's, more than this job allows part-way (%2)")
                      .arg(checked->distance, 0, 'g', 4)
                      .arg(limit / 2, 0, 'g', 4);
        else if (kept + checkpoint->size > qint64(m_config.handbackCapMb) * 1024 * 1024)
            why = QStringLiteral(
                      "the coordinator's room for handed-back checkpoints (handback_cap_mb %1) is full")
                      .arg(m_config.handbackCapMb);
    }
    std::optional<Workunit::ResumePoint> resume;
    if (checkpoint && checked && why.isEmpty())
        resume = Workunit::ResumePoint{
            leaseId,           checkpoint->sha256, checkpoint->size, checked->step, lease->baseVersion,
            lease->weightsSha, lease->steps,       agentId};

    const qint64 workunitId = lease->workunitId;
    const qint64 reachedStep = std::max<qint64>(lease->lastStep, 0);
    Scheduler::HandBackOutcome outcome;
    // The closed lease and the workunit with its resume point, in one commit.
    const Status recorded = m_parts.db.transaction([&]() -> Status {
        outcome = m_parts.scheduler.handedBack(job, leaseId, resume);
        return {};
    });
    lease = nullptr; // gone from the scheduler's memory
    if (!recorded) {
        qCCritical(lcIntake) << "cannot record the hand-back of lease" << leaseId << ":" << recorded.error();
        cleanUp();
        return HttpResponse::error(
            500, QStringLiteral("the coordinator cannot record the hand-back; try again later"));
    }
    m_parts.admission.closeLease(leaseId, closedLeaseMessage(leaseId, Lease::State::HandedBack));
    // An honest agent's worker writes checkpoints that pass; one that does not is counted like a refused
    // result, so that an agent that keeps sending them is quarantined (the lease is handed back all the
    // same).
    if (refusedByCheck && !refusal.isEmpty())
        m_parts.standing.refused(
            agentId, QStringLiteral("the checkpoint it handed back was refused: %1").arg(refusal));
    if (outcome.resumeKept) {
        m_checkpoints.insert(checkpoint->sha256, checkpoint->size);
        dropped.clear();
    } else if (resume && why.isEmpty()) {
        why = QStringLiteral("the workunit is done or held by another lease");
    }
    cleanUp();

    QString what = outcome.requeued ? QStringLiteral("goes back to the queue")
                                    : QStringLiteral("is done or held by another lease");
    if (outcome.resumeKept)
        what += QStringLiteral(", resuming at step %1 from the checkpoint handed back").arg(resume->step);
    else if (outcome.requeued)
        what += QStringLiteral(", from step 0");
    qCInfo(lcIntake).noquote()
        << QStringLiteral("agent %1 handed lease %2 back (last reported step %3); workunit %4 %5%6")
               .arg(agentId, leaseId)
               .arg(reachedStep)
               .arg(workunitId)
               .arg(what)
               .arg(why.isEmpty() ? QString()
                                  : QStringLiteral(" (its checkpoint was not kept: %1)").arg(why));

    QJsonObject reply;
    reply.insert(QStringLiteral("released"), true);
    reply.insert(QStringLiteral("requeued"), outcome.requeued);
    reply.insert(QStringLiteral("checkpoint"), outcome.resumeKept             ? QStringLiteral("kept")
                                               : checkpoint || !why.isEmpty() ? QStringLiteral("refused")
                                                                              : QStringLiteral("none"));
    if (outcome.resumeKept)
        reply.insert(QStringLiteral("step"), resume->step);
    if (!why.isEmpty())
        reply.insert(QStringLiteral("reason"), why);
    return HttpResponse::json(200, reply);
}

void HandBacks::removeUnused(const QSet<QString>& alsoNeeded)
{
    if (m_checkpoints.isEmpty())
        return;
    QSet<QString> needed = alsoNeeded;
    for (const Lease& lease : m_parts.scheduler.leases())
        if (!lease.checkpointSha.isEmpty())
            needed.insert(lease.checkpointSha);
    for (const auto& [id, job] : m_parts.jobs)
        for (const auto& [unitId, unit] : job.workunits)
            if (unit.resume)
                needed.insert(unit.resume->sha256);
    for (auto it = m_checkpoints.begin(); it != m_checkpoints.end();) {
        if (needed.contains(it.key())) {
            ++it;
            continue;
        }
        QFile::remove(m_parts.blobs.path(it.key()));
        it = m_checkpoints.erase(it);
    }
}

} // namespace gleaner::coordinator
