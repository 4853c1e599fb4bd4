// WeightsKeeper: the weights of jobs kept in Redis (config "redis"), which several coordinators fold into
// (SharedWeights): joining a job's copy there, the folds that wait for Redis, and following the others'
// folds.
#include "aggregation/WeightsKeeper.h"

#include "aggregation/AveragedRule.h"
#include "metrics/CoordinatorMetrics.h"

#include "store/RedisConnection.h"

#include <QLoggingCategory>

#include <algorithm>
#include <chrono>

Q_DECLARE_LOGGING_CATEGORY(lcWeights)

namespace gleaner::coordinator {

void WeightsKeeper::shareThrough(std::unique_ptr<RedisConnection> redis, const QString& prefix)
{
    m_thread.call([&] {
        m_redis = std::move(redis);
        m_shared = std::make_unique<SharedWeights>(*m_redis, prefix);
    });
}

void WeightsKeeper::reportUnreachable(qint64 jobId, JobWeights& job, const QString& why)
{
    if (!job.unreachable)
        qCCritical(lcWeights) << "job" << jobId << "cannot fold into the weights in Redis:" << why << "-"
                              << job.pending.size() << "update(s) wait and are folded when Redis answers";
    job.unreachable = true;
}

bool WeightsKeeper::joinShared(qint64 jobId, JobWeights& job)
{
    // Twice at most: a put refused because another coordinator put the job meanwhile reads what it put.
    for (int look = 1; look <= 2; ++look) {
        auto there = m_shared->read(jobId);
        if (!there) {
            reportUnreachable(jobId, job, there.error());
            return false;
        }
        if (there->has_value() && (*there)->version >= job.version) {
            // Redis holds the job as recent as the snapshot or more (folds since it, by this or another
            // coordinator).
            if ((*there)->version != job.version)
                qCInfo(lcWeights) << "job" << jobId << "continues from its weights in Redis at version"
                                  << (*there)->version << "(its snapshot is at" << job.version << ")";
            adopt(job, **there);
            job.joined = true;
            return true;
        }
        // Redis lost the job (a restart without persistence) or never had it: the snapshot is the copy of
        // record. Put only over an older version: two coordinators that take a job up at once (its import,
        // a restart) must not write over a fold that one of them made in between.
        SharedFoldState state;
        state.weights = job.weights;
        state.ruleState = ruleState(job);
        state.steps = job.steps.window();
        state.version = job.version;
        auto put = m_shared->put(jobId, state, SharedWeights::Put::IfOlder);
        if (!put) {
            reportUnreachable(jobId, job, put.error());
            return false;
        }
        if (*put) {
            if (there->has_value())
                qCWarning(lcWeights) << "job" << jobId << "had older weights in Redis (version"
                                     << (*there)->version << ") than its snapshot (" << job.version
                                     << "): Redis now holds the snapshot's";
            job.joined = true;
            return true;
        }
    }
    reportUnreachable(jobId, job, QStringLiteral("its weights in Redis kept changing while it joined them"));
    return false;
}

void WeightsKeeper::adopt(JobWeights& job, const SharedFoldState& state)
{
    if (!job.ruleFromShared)
        job.rule = AggregationRule::create(job.spec);
    job.ruleFromShared = true;
    job.sharedRuleState = state.ruleState;
    job.weights = state.weights;
    job.version = state.version;
    job.steps = UpdateBound::fromWindow(state.steps);
}

TensorBundle WeightsKeeper::ruleState(const JobWeights& job)
{
    return job.ruleFromShared ? job.sharedRuleState : job.rule->saveState();
}

TensorBundle WeightsKeeper::modelWeights(qint64 jobId, const JobWeights& job)
{
    if (!job.ruleFromShared) {
        const TensorBundle* average = job.rule ? job.rule->averaged() : nullptr;
        return average ? *average : job.weights;
    }
    // Redis's state holds the average when the job keeps one (AveragedRule wrote it); none: the server copy.
    auto average = AveragedRule::averageIn(job.sharedRuleState, job.weights);
    if (!average) {
        qCWarning(lcWeights) << "job" << jobId
                             << "cannot read the average in Redis's rule state, so the server"
                             << "weights stand in for it:" << average.error();
        return job.weights;
    }
    return average->isEmpty() ? job.weights : *average;
}

bool WeightsKeeper::foldPending(qint64 jobId, JobWeights& job)
{
    const bool folded = foldPendingNow(jobId, job);
    qsizetype waiting = 0;
    for (const auto& [id, each] : m_jobs)
        waiting += each.pending.size();
    m_metrics.updatesWaitingForRedis(waiting);
    return folded;
}

bool WeightsKeeper::foldPendingNow(qint64 jobId, JobWeights& job)
{
    if (!job.joined && !joinShared(jobId, job))
        return false;
    while (!job.pending.empty()) {
        const PendingUpdate& item = job.pending.front();
        UpdateContext context = item.context;
        Result<TensorBundle> base = TensorBundle();
        if (job.rule->needsBase()) {
            base = baseWeights(job, item.baseSha);
            if (!base) {
                refused(jobId, job, item.seq, QStringLiteral("lost by the coordinator: %1").arg(base.error()),
                        /*agentsFault=*/false);
                job.pending.pop_front();
                continue;
            }
            context.base = &*base;
        }
        const qint64 redoneBefore = m_shared->conflicts();
        auto folded = m_shared->foldUpdate(jobId, item.seq, job.spec, item.update, context, item.checked);
        m_metrics.sharedFoldsRedone(quint64(m_shared->conflicts() - redoneBefore));
        if (!folded) {
            // Joined again before the next try: Redis may have lost the job meanwhile (a restart without
            // persistence), and then this process's copy, the most recent it knows, is put back.
            job.joined = false;
            reportUnreachable(jobId, job, folded.error());
            return false;
        }
        if (job.unreachable)
            qCInfo(lcWeights) << "job" << jobId << "folds into Redis again";
        job.unreachable = false;
        const qint64 seq = item.seq;
        if (item.received && folded->refused.isEmpty())
            m_metrics.updateAssimilated(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - *item.received).count());
        job.pending.pop_front();
        if (!folded->refused.isEmpty()) {
            refused(jobId, job, seq, folded->refused);
            continue;
        }
        // What this process holds of the job is now what its fold committed (onto any other's). A fold found
        // already done read nothing: the next sync brings the copy up to date.
        const SharedFoldState* state = m_shared->held(jobId);
        if (state && !folded->alreadyFolded)
            adopt(job, *state);
        job.lastSeq = std::max(job.lastSeq, seq);
        const qint64 version = folded->version;
        m_listener.applied(jobId, seq, version);
        // The rule's state is Redis's: its measurement is read from there.
        if (state && !folded->alreadyFolded) {
            NoiseScale noise;
            if (auto loaded = noise.load(state->ruleState, NoiseScale::stateName()); loaded)
                reportWidth(jobId, job, &noise, version);
            else
                qCWarning(lcWeights) << "job" << jobId << "cannot read the noise scale in Redis's rule state:"
                                     << loaded.error();
        }
    }
    return true;
}

void WeightsKeeper::syncShared(qint64 jobId, JobWeights& job)
{
    if (!m_shared || !foldPending(jobId, job))
        return;
    auto state = m_shared->read(jobId);
    if (!state) {
        reportUnreachable(jobId, job, state.error());
        return;
    }
    if (state->has_value() && (*state)->version != job.version)
        adopt(job, **state);
}

} // namespace gleaner::coordinator
