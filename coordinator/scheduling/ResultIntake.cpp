#include "scheduling/ResultIntake.h"

#include "scheduling/Scheduler.h"

#include <algorithm>

namespace gleaner::coordinator {

ResultIntake::ResultIntake(std::map<qint64, JobState>& jobs, Scheduler& scheduler)
    : m_jobs(jobs), m_scheduler(scheduler)
{
}

ResultIntake::Verdict ResultIntake::judge(const Received& received)
{
    Verdict verdict;
    Lease* lease = m_scheduler.find(received.leaseId);
    if (!lease)
        return verdict;
    verdict.lease = lease;
    const auto refuse = [&](int status, const QString& reason, bool closesLease = false) {
        verdict.kind = Verdict::Kind::Refuse;
        verdict.status = status;
        verdict.reason = reason;
        verdict.closesLease = closesLease;
        return verdict;
    };
    const QString& id = received.leaseId;
    if (lease->agentId != received.agentId)
        return refuse(409, QStringLiteral("lease %1 belongs to another agent").arg(id));
    if (lease->state == Lease::State::Completed || lease->state == Lease::State::Refused)
        return refuse(409, closedLeaseMessage(id, lease->state));
    auto job = m_jobs.find(lease->jobId);
    if (job == m_jobs.end())
        return refuse(409, QStringLiteral("the job no longer exists"));
    JobState& j = job->second;
    if (j.status != JobStatus::Running && j.status != JobStatus::Paused)
        return refuse(409, QStringLiteral("job %1 is %2 and takes no more results").arg(j.id).arg(jobStatusName(j.status)));
    verdict.job = &j;
    if (received.baseVersion != lease->baseVersion)
        return refuse(422,
                      QStringLiteral("the result says it trained from version %1 but lease %2 handed out version %3")
                          .arg(received.baseVersion)
                          .arg(id)
                          .arg(lease->baseVersion),
                      true);
    auto unit = j.workunits.find(lease->workunitId);
    if (unit == j.workunits.end())
        return refuse(409, QStringLiteral("the workunit of lease %1 no longer exists").arg(id));
    // Finite but huge (x1e6, negated weights, 3e38) passes every check of the file itself; what the job's honest
    // updates look like does not let it through.
    if (const double limit = j.updateBound.limit(received.baseNorm); !(received.step <= limit)) {
        verdict.outOfBound = true;
        return refuse(422,
                      QStringLiteral("the result moves the weights by %1 from the version it trained from; job %2 "
                                     "allows at most %3 (%4)")
                          .arg(received.step, 0, 'g', 4)
                          .arg(j.id)
                          .arg(limit, 0, 'g', 4)
                          .arg(j.updateBound.describe(received.baseNorm)),
                      true);
    }
    verdict.unit = &unit->second;
    if (unit->second.first) {
        verdict.kind = Verdict::Kind::Compare;
        return verdict;
    }
    verdict.kind = Verdict::Kind::Fold;
    verdict.context = UpdateContext{unit->second.epoch, received.baseVersion, 0};
    // Counted while this lease is still open: it is one of them.
    verdict.context.concurrency = std::max(1, m_scheduler.agentsTraining(j.id));
    verdict.context.updatesPerEpoch = j.spec.shards;
    verdict.staleness = j.updatesApplied - received.baseVersion;
    return verdict;
}

Status ResultIntake::record(const Verdict& verdict)
{
    if (verdict.kind != Verdict::Kind::Fold && verdict.kind != Verdict::Kind::Compare)
        return fail(QStringLiteral("only a result to fold in or compare is recorded"));
    // judge() decided on this process's picture; under the job's lock it is the whole one. Another
    // coordinator may have closed the lease (a duplicate that reached it) or folded the workunit's first
    // result meanwhile: then this result is not recorded, and the agent's next attempt is judged again.
    const QString leaseId = verdict.lease->id;
    if (auto s = m_scheduler.lockJob(*verdict.job); !s)
        return s;
    if (verdict.job->endedElsewhere)
        return fail(QStringLiteral("job %1 is %2 and takes no more results")
                        .arg(verdict.job->id)
                        .arg(jobStatusName(verdict.job->endedElsewhere->first)));
    const Lease* lease = m_scheduler.find(leaseId);
    if (lease != verdict.lease || lease->state == Lease::State::Completed ||
        lease->state == Lease::State::Refused)
        return fail(QStringLiteral("lease %1 was closed by another coordinator meanwhile").arg(leaseId));
    if (verdict.kind == Verdict::Kind::Fold && verdict.unit->first)
        return fail(
            QStringLiteral("the workunit of lease %1 got its first result at another coordinator meanwhile")
                .arg(leaseId));
    return m_scheduler.recordCompleted(*verdict.job, leaseId);
}

void ResultIntake::accepted(Verdict& verdict, const Received& received, qint64 seq, const QString& file)
{
    const QString leaseId = verdict.lease->id;
    // A result trained on from a handed-back checkpoint counts the samples and seconds of the agent that wrote it
    // too (bounded, not verified): they say nothing of this agent's speed, and a sender could make an honest
    // resumer look slow enough to be handed only tiny subtasks.
    const bool resumed = !verdict.lease->checkpointSha.isEmpty();
    verdict.lease = nullptr;
    m_scheduler.completed(*verdict.job, leaseId);
    if (verdict.kind != Verdict::Kind::Fold)
        return;
    JobState& job = *verdict.job;
    verdict.unit->first = Workunit::FirstResult{seq, received.agentId, received.baseVersion, received.step, file};
    if (!resumed)
        m_scheduler.noteSpeed(received.agentId, received.samples, received.trainSeconds);
    job.updateBound.accept(received.step);
    job.counts.countUpdate(received.uploadBytes);
    job.unpublishedOf[received.agentId] = seq; // until a publication holds it (published())
}

void ResultIntake::published(JobState& job)
{
    std::erase_if(job.unpublishedOf, [&](const auto& entry) { return entry.second <= job.published.throughSeq; });
}

bool ResultIntake::waitsForOwnUpdate(const QString& agentId) const
{
    for (const auto& [id, job] : m_jobs) {
        if (job.status != JobStatus::Running)
            continue;
        const auto it = job.unpublishedOf.find(agentId);
        if (it != job.unpublishedOf.end() && it->second > job.published.throughSeq)
            return true;
    }
    return false;
}

} // namespace gleaner::coordinator
