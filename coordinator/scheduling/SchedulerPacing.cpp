// Scheduler: the pace of the work. A job's epochs (when the next one opens, which are due for validation) and
// each agent's speed (how large its leases are, for a speed-aware job).
#include "scheduling/Scheduler.h"

#include <QLoggingCategory>

#include <algorithm>
#include <cmath>

Q_DECLARE_LOGGING_CATEGORY(lcScheduler)

namespace gleaner::coordinator {

void Scheduler::noteSpeed(const QString& agentId, qint64 samples, double seconds)
{
    if (samples <= 0 || !(seconds > 0) || !std::isfinite(seconds))
        return;
    const double measured = double(samples) / seconds;
    auto it = m_speeds.find(agentId);
    if (it == m_speeds.end())
        m_speeds.insert(agentId, measured);
    else
        *it = 0.7 * *it + 0.3 * measured; // a busy desktop varies: smooth, but follow a lasting change
}

std::optional<double> Scheduler::speedOf(const QString& agentId) const
{
    auto it = m_speeds.constFind(agentId);
    return it == m_speeds.cend() ? std::nullopt : std::optional<double>(*it);
}

qint64 Scheduler::stepsFor(const JobState& job, int shard, const QString& agentId) const
{
    if (!job.spec.speedAware || shard < 0 || shard >= job.files.shards.size())
        return 0;
    const auto speed = speedOf(agentId);
    if (!speed)
        return 0;
    std::vector<double> known(m_speeds.cbegin(), m_speeds.cend());
    std::nth_element(known.begin(), known.begin() + qsizetype(known.size() / 2), known.end());
    const double median = known[known.size() / 2];
    const double factor = std::clamp(*speed / median, kMinSizeFactor, kMaxSizeFactor);
    const qint64 batches = (job.files.shards.at(shard).samples + job.spec.batchSize - 1) / job.spec.batchSize;
    const qint64 whole = batches * job.spec.localEpochs;
    const qint64 steps = std::max<qint64>(1, std::llround(double(whole) * factor));
    return steps == whole ? 0 : steps;
}

Status Scheduler::createEpoch(JobState& job, int epoch)
{
    std::vector<Workunit> created;
    bool createdElsewhere = false;
    const Status stored = m_store.transaction([&]() -> Status {
        if (auto s = lockJob(job); !s)
            return s;
        createdElsewhere = job.epoch >= epoch; // by another coordinator, whose workunits lockJob brought
        if (createdElsewhere)
            return {};
        for (const ShardRef& shard : job.files.shards) {
            auto id = m_store.addWorkunit(job.id, epoch, shard.index);
            if (!id)
                return fail(id.error());
            Workunit unit;
            unit.id = *id;
            unit.epoch = epoch;
            unit.shard = shard.index;
            created.push_back(unit);
        }
        return m_store.saveEpoch(job.id, epoch);
    });
    if (!stored) {
        qCCritical(lcScheduler) << "job" << job.id << "cannot create epoch" << epoch << ":" << stored.error();
        return stored;
    }
    if (createdElsewhere)
        return {};
    for (Workunit& unit : created)
        job.workunits.emplace(unit.id, std::move(unit));
    job.epoch = epoch;
    return {};
}

void Scheduler::openNextEpochIfReady(JobState& job)
{
    const auto ready = [&] {
        if (job.status != JobStatus::Running || job.endedElsewhere || job.epoch == 0 ||
            job.epoch >= job.spec.maxEpochs)
            return false;
        if (job.pendingIn(job.epoch) > 0)
            return false;
        // Bounded staleness: at most one epoch ahead of the last validated one; without overlap, none.
        return job.validatedEpoch >= (job.spec.overlapEpochs ? job.epoch - 1 : job.epoch);
    };
    if (!ready())
        return; // the common case, decided without the job's lock
    (void)m_store.transaction([&]() -> Status {
        if (auto s = lockJob(job); !s)
            return s;
        return ready() ? createEpoch(job, job.epoch + 1) : Status();
    });
}

std::vector<int> Scheduler::validationsDue(JobState& job)
{
    std::vector<int> due;
    if (job.status != JobStatus::Running && job.status != JobStatus::Paused)
        return due;
    for (int e = 1; e <= job.epoch; ++e) {
        if (job.validatedEpochs.count(e) || job.validating.count(e) || !job.epochComplete(e))
            continue;
        job.validating.insert(e);
        due.push_back(e);
    }
    return due;
}

void Scheduler::validated(JobState& job, int epoch)
{
    job.validating.erase(epoch);
    job.validatedEpochs.insert(epoch);
    // Epochs may finish out of order (overlap): only a complete prefix counts as validated.
    while (job.validatedEpochs.count(job.validatedEpoch + 1))
        ++job.validatedEpoch;
}

void Scheduler::validationFailed(JobState& job, int epoch)
{
    job.validating.erase(epoch);
}

} // namespace gleaner::coordinator
