#include "scheduling/Scheduler.h"

#include <QLoggingCategory>

#include <algorithm>
#include <limits>
#include <set>

Q_LOGGING_CATEGORY(lcScheduler, "gleaner.coordinator.scheduler")

namespace gleaner::coordinator {

Scheduler::Scheduler(std::map<qint64, JobState>& jobs, SchedulerStore& store, const Clock& clock,
                     SchedulerLimits limits, IdSource ids)
    : m_jobs(jobs), m_store(store), m_clock(clock), m_limits(limits), m_ids(std::move(ids))
{
}

JobState* Scheduler::findJob(qint64 jobId)
{
    auto it = m_jobs.find(jobId);
    return it == m_jobs.end() ? nullptr : &it->second;
}

Lease* Scheduler::find(const QString& leaseId)
{
    auto it = m_leases.find(leaseId);
    return it == m_leases.end() ? nullptr : &*it;
}

int Scheduler::openLeasesOf(const QString& agentId) const
{
    return int(std::count_if(m_leases.cbegin(), m_leases.cend(), [&](const Lease& lease) {
        return lease.agentId == agentId && lease.state == Lease::State::Open;
    }));
}

int Scheduler::agentsTraining(qint64 jobId) const
{
    QSet<QString> agents;
    for (const Lease& lease : m_leases)
        if (lease.jobId == jobId && lease.state == Lease::State::Open)
            agents.insert(lease.agentId);
    auto activity = m_activity.find(jobId);
    if (activity != m_activity.end() && !activity->second.recentDurationsMs.empty()) {
        std::vector<qint64> durations = activity->second.recentDurationsMs;
        std::nth_element(durations.begin(), durations.begin() + qsizetype(durations.size() / 2), durations.end());
        const qint64 since = m_clock.nowMs() - 2 * std::max<qint64>(1, durations[durations.size() / 2]);
        for (auto it = activity->second.lastDeliveredMs.cbegin(); it != activity->second.lastDeliveredMs.cend(); ++it)
            if (it.value() >= since)
                agents.insert(it.key());
    }
    return int(agents.size());
}

int Scheduler::agentsAtWork(const JobState& job, const QString& except) const
{
    QSet<QString> agents;
    for (const Lease& lease : m_leases)
        if (lease.jobId == job.id && lease.state == Lease::State::Open)
            agents.insert(lease.agentId);
    for (const auto& [agent, seq] : job.unpublishedOf)
        agents.insert(agent);
    agents.remove(except);
    return int(agents.size());
}

bool Scheduler::hasRoomFor(const JobState& job, const QString& agentId) const
{
    const std::optional<int> cap = job.agentCap();
    return !cap || agentsAtWork(job, agentId) < *cap;
}

void Scheduler::forget(qint64 jobId)
{
    m_activity.erase(jobId);
}

QStringList Scheduler::drop(qint64 jobId)
{
    forget(jobId);
    m_grantUnderLock.erase(jobId);
    QStringList dropped;
    for (auto it = m_leases.begin(); it != m_leases.end();) {
        if (it->jobId != jobId) {
            ++it;
            continue;
        }
        dropped.append(it.key());
        it = m_leases.erase(it);
    }
    return dropped;
}

Status Scheduler::lockJob(JobState& job)
{
    auto changes = m_store.lockJob(job.id);
    if (!changes)
        return fail(changes.error());
    if (changes->stale)
        apply(job, *changes, /*learnt=*/true);
    noteStoredState(job, *changes);
    return {};
}

void Scheduler::noteStoredState(JobState& job, const JobChanges& stored)
{
    // Ended by another coordinator: noted, not acted on here, in the middle of the caller's transaction.
    const auto status = jobStatusFromName(stored.state);
    const auto ended = [](JobStatus s) {
        return s == JobStatus::Completed || s == JobStatus::Failed || s == JobStatus::Cancelled;
    };
    if (status && ended(*status) && !ended(job.status))
        job.endedElsewhere = std::pair{*status, stored.reason};
    if (status) // a store that keeps no state says nothing
        job.pausedElsewhere = *status == JobStatus::Paused;
}

Result<int> Scheduler::lockAgent(const QString& agentId)
{
    if (m_store.grantsInParallel())
        return m_store.lockAgent(agentId, m_clock.nowMs());
    return openLeasesOf(agentId);
}

Status Scheduler::lockForGrant(JobState& job)
{
    if (m_store.heldLock(job.id) != SchedulerStore::Held::None)
        return {};
    if (!m_store.grantsInParallel() || m_grantUnderLock.count(job.id))
        return lockJob(job);
    auto stored = m_store.shareJob(job.id);
    if (!stored)
        return fail(stored.error());
    noteStoredState(job, *stored);
    return {};
}

void Scheduler::adopt(JobState& job, const JobChanges& stored)
{
    apply(job, stored, /*learnt=*/false);
}

void Scheduler::apply(JobState& job, const JobChanges& changes, bool learnt)
{
    job.epoch = std::max(job.epoch, changes.epoch);
    std::set<qint64> touched;
    for (const Workunit& row : changes.workunits) {
        auto [it, added] = job.workunits.try_emplace(row.id, row);
        Workunit& unit = it->second;
        touched.insert(row.id);
        if (added)
            continue;
        if (row.state == Workunit::State::Done)
            unit.state = Workunit::State::Done; // final: whoever completed it
        unit.issued = row.issued;
        unit.resume = unit.state == Workunit::State::Done ? std::nullopt : row.resume;
        if (!unit.first && row.first)
            unit.first = row.first;
    }
    const qint64 now = m_clock.nowMs();
    for (const Lease& row : changes.leases) {
        auto unit = job.workunits.find(row.workunitId);
        const bool mayDeliver = row.state == Lease::State::Open || row.state == Lease::State::Expired;
        if (unit != job.workunits.end()) {
            touched.insert(row.workunitId);
            unit->second.openLeases.removeAll(row.id);
            if (row.state == Lease::State::Open)
                unit->second.openLeases.append(row.id);
        }
        auto known = m_leases.find(row.id);
        // A lease this process holds as stored (its own grant, read back after a grant in parallel) is no
        // news.
        const bool news =
            known == m_leases.end() || known->state != row.state || known->deadlineMs != row.deadlineMs;
        if (!mayDeliver) {
            if (known != m_leases.end())
                m_leases.erase(known);
        } else if (known != m_leases.end()) {
            known->deadlineMs = row.deadlineMs;
            known->state = row.state;
        } else {
            Lease lease = row;
            lease.lastMoveMs = now; // the step is not stored: learning of a lease counts as a move
            m_leases.insert(lease.id, std::move(lease));
        }
        if (row.state == Lease::State::Open)
            m_nextDeadlineMs = std::min(m_nextDeadlineMs, row.deadlineMs);
        if (learnt && news && m_onLearnt)
            m_onLearnt(row, job);
    }
    for (qint64 id : touched) {
        Workunit& unit = job.workunits.at(id);
        if (unit.state != Workunit::State::Done)
            unit.state = unit.openLeases.isEmpty() ? Workunit::State::Pending : Workunit::State::Leased;
    }
}

Workunit* Scheduler::choose(JobState& job, const QString& agentId, const QSet<QString>& cached)
{
    // Oldest epoch first; among its pending workunits, one whose shard the agent already holds.
    Workunit* chosen = nullptr;
    const auto holds = [&](const Workunit& unit) {
        return unit.shard >= 0 && unit.shard < job.files.shards.size() &&
               cached.contains(job.files.shards.at(unit.shard).sha256);
    };
    const auto rank = [&](const Workunit& unit) { return 2 * int(unit.resume.has_value()) + int(holds(unit)); };
    for (auto& [id, unit] : job.workunits) {
        if (unit.state != Workunit::State::Pending)
            continue;
        if (!chosen || unit.epoch < chosen->epoch)
            chosen = &unit;
        else if (unit.epoch == chosen->epoch && rank(unit) > rank(*chosen))
            chosen = &unit;
    }
    if (chosen || job.spec.replication <= 1)
        return chosen;
    // Nothing pending: replicate a straggler to this idle agent.
    for (auto& [id, unit] : job.workunits) {
        if (unit.state != Workunit::State::Leased || unit.openLeases.size() >= job.spec.replication)
            continue;
        const bool mine = std::any_of(unit.openLeases.cbegin(), unit.openLeases.cend(), [&](const QString& l) {
            return m_leases.value(l).agentId == agentId;
        });
        if (!mine)
            return &unit;
    }
    return nullptr;
}

Result<std::optional<Lease>> Scheduler::leaseNext(JobState& job, const QString& agentId,
                                                  const QSet<QString>& cached)
{
    std::optional<Lease> granted;
    const Status stored = m_store.transaction([&]() -> Status {
        if (auto s = lockForGrant(job); !s)
            return s;
        if (job.endedElsewhere || job.pausedElsewhere)
            return {};
        if (!hasRoomFor(job,
                        agentId)) // as many agents as it can use train it: this one is worth more elsewhere
            return {};
        if (m_store.heldLock(job.id) == SchedulerStore::Held::Shared) {
            auto claimed = grantClaimed(job, agentId, cached);
            if (!claimed)
                return fail(claimed.error());
            granted = std::move(*claimed);
            return {};
        }
        openNextEpochIfReady(job);
        Workunit* chosen = choose(job, agentId, cached);
        if (!chosen)
            return {};
        // Pending work again (a new epoch, a lease gone back): the next grants claim it in parallel.
        if (chosen->state == Workunit::State::Pending)
            m_grantUnderLock.erase(job.id);
        auto lease = grant(job, *chosen, agentId);
        if (!lease)
            return fail(lease.error());
        granted = std::move(*lease);
        return {};
    });
    if (!stored)
        return fail(stored.error());
    return granted;
}

Result<std::optional<Lease>> Scheduler::grantClaimed(JobState& job, const QString& agentId,
                                                     const QSet<QString>& cached)
{
    std::vector<int> held;
    for (const ShardRef& shard : job.files.shards)
        if (cached.contains(shard.sha256))
            held.push_back(shard.index);
    auto claimed = m_store.claimWorkunit(job.id, held);
    if (!claimed)
        return fail(claimed.error());
    if (!*claimed) {
        // Nothing pending: the next grant takes the exclusive lock, which may open an epoch or replicate.
        m_grantUnderLock.insert(job.id);
        m_emptyClaims = true;
        return std::optional<Lease>();
    }
    const Workunit& unit = **claimed;
    Lease lease = newLease(job, unit, agentId);
    if (auto s = m_store.saveLease(lease); !s)
        return fail(s.error());
    // What this picture learns: the workunit as claimed (perhaps of an epoch another coordinator opened) and
    // its new lease. Other grants stay unknown here until the job's next exclusive lock.
    JobChanges claim;
    claim.epoch = unit.epoch;
    claim.workunits.push_back(unit);
    claim.leases.push_back(lease);
    apply(job, claim, /*learnt=*/false);
    return std::optional<Lease>(std::move(lease));
}

Lease Scheduler::newLease(const JobState& job, const Workunit& unit, const QString& agentId)
{
    const Workunit* chosen = &unit;
    const qint64 now = m_clock.nowMs();
    Lease lease;
    lease.id = m_ids();
    lease.jobId = job.id;
    lease.workunitId = chosen->id;
    lease.agentId = agentId;
    lease.issuedMs = now;
    lease.deadlineMs = now + qint64(job.spec.deadlineSeconds) * 1000;
    lease.baseVersion = job.published.version;
    lease.weightsSha = job.published.sha256;
    lease.nonce = m_ids();
    lease.lastMoveMs = now;
    lease.steps = stepsFor(job, chosen->shard, agentId);
    if (const auto& resume = chosen->resume) {
        // The checkpoint goes on where it stopped: the same base and size, or it would not be the same training.
        lease.baseVersion = resume->baseVersion;
        lease.weightsSha = resume->weightsSha;
        lease.steps = resume->steps;
        lease.checkpointSha = resume->sha256;
        lease.resumeStep = resume->step;
    }
    return lease;
}

Result<Lease> Scheduler::grant(JobState& job, Workunit& unit, const QString& agentId)
{
    Workunit* chosen = &unit;
    const Lease lease = newLease(job, unit, agentId);
    Workunit leased = *chosen;
    leased.state = Workunit::State::Leased;
    leased.issued += 1;
    if (auto s = m_store.saveWorkunit(leased); !s)
        return fail(s.error());
    if (auto s = m_store.saveLease(lease); !s)
        return fail(s.error());
    chosen->state = leased.state;
    chosen->issued = leased.issued;
    chosen->openLeases.append(lease.id);
    m_leases.insert(lease.id, lease);
    m_nextDeadlineMs = std::min(m_nextDeadlineMs, lease.deadlineMs);
    return lease;
}

Status Scheduler::progressed(Lease& reported, JobState& job, qint64 step)
{
    // Most reports earn no later deadline: decided on this picture, without the job's lock or a commit.
    if (deadlineAfter(reported, job, step) <= reported.deadlineMs)
        return {};
    const QString id = reported.id; // another coordinator may have closed it: looked up again under the lock
    return m_store.transaction([&]() -> Status {
        if (auto s = lockJob(job); !s)
            return s;
        Lease* lease = find(id);
        if (!lease || lease->state != Lease::State::Open)
            return fail(QStringLiteral("lease %1 closed meanwhile").arg(id));
        const qint64 wanted = deadlineAfter(*lease, job, step);
        if (wanted <= lease->deadlineMs)
            return {}; // another coordinator extended it as far already
        lease->deadlineMs = wanted;
        m_nextDeadlineMs = std::min(m_nextDeadlineMs, lease->deadlineMs);
        return m_store.saveLease(*lease);
    });
}

qint64 Scheduler::deadlineAfter(Lease& lease, const JobState& job, qint64 step) const
{
    const qint64 now = m_clock.nowMs();
    if (step > lease.lastStep) {
        lease.lastStep = step;
        lease.lastMoveMs = now;
    }
    const qint64 deadlineMs = qint64(job.spec.deadlineSeconds) * 1000;
    return std::min({now + deadlineMs, lease.lastMoveMs + 2 * deadlineMs,
                     lease.issuedMs + qint64(m_limits.leaseLifetimeDeadlines) * deadlineMs});
}

void Scheduler::expire()
{
    const qint64 now = m_clock.nowMs();
    if (now < m_nextDeadlineMs)
        return; // every lease request would otherwise walk every lease
    std::set<qint64> due;
    for (const Lease& lease : m_leases)
        if (lease.state == Lease::State::Open && lease.deadlineMs <= now)
            due.insert(lease.jobId);
    for (qint64 jobId : due) {
        // Under the job's lock: another coordinator may have extended, completed or expired the lease
        // meanwhile.
        JobState* job = findJob(jobId);
        const Status expired = m_store.transaction([&]() -> Status {
            if (job)
                if (auto s = lockJob(*job); !s)
                    return s;
            expireLeasesOf(job, jobId, now);
            return {};
        });
        if (!expired)
            qCWarning(lcScheduler) << "cannot expire the leases of job" << jobId << ":" << expired.error();
    }
    qint64 next = std::numeric_limits<qint64>::max();
    for (const Lease& lease : m_leases)
        if (lease.state == Lease::State::Open)
            next = std::min(next, lease.deadlineMs);
    m_nextDeadlineMs = next;
}

void Scheduler::expireLeasesOf(JobState* job, qint64 jobId, qint64 now)
{
    for (Lease& lease : m_leases) {
        if (lease.jobId != jobId || lease.state != Lease::State::Open || lease.deadlineMs > now)
            continue;
        lease.state = Lease::State::Expired;
        (void)m_store.saveLease(lease);
        if (m_onExpired)
            m_onExpired(lease, job);
        if (!job)
            continue;
        auto unit = job->workunits.find(lease.workunitId);
        if (unit == job->workunits.end())
            continue;
        unit->second.openLeases.removeAll(lease.id);
        if (unit->second.state == Workunit::State::Leased && unit->second.openLeases.isEmpty()) {
            unit->second.state = Workunit::State::Pending; // re-issued to the next agent that asks
            (void)m_store.saveWorkunit(unit->second);
        }
        qCInfo(lcScheduler) << "lease" << lease.id << "of agent" << lease.agentId << "missed its deadline; workunit"
                            << lease.workunitId << "goes back to the queue";
    }
}

void Scheduler::expireAllOf(const QString& agentId)
{
    const qint64 now = m_clock.nowMs();
    for (Lease& lease : m_leases)
        if (lease.agentId == agentId && lease.state == Lease::State::Open)
            lease.deadlineMs = now;
    m_nextDeadlineMs = now;
    expire();
}

Status Scheduler::recordCompleted(JobState& job, const QString& leaseId)
{
    if (auto s = lockJob(job); !s)
        return s;
    auto lease = m_leases.constFind(leaseId);
    if (lease == m_leases.cend())
        return fail(QStringLiteral("lease %1 is not open").arg(leaseId));
    Lease closed = *lease;
    closed.state = Lease::State::Completed;
    if (auto s = m_store.saveLease(closed); !s)
        return s;
    auto unit = job.workunits.find(closed.workunitId);
    if (unit == job.workunits.end() || unit->second.state == Workunit::State::Done)
        return {};
    Workunit done = unit->second;
    done.state = Workunit::State::Done;
    done.resume.reset();
    return m_store.saveWorkunit(done);
}

void Scheduler::completed(JobState& job, const QString& leaseId)
{
    auto lease = m_leases.find(leaseId);
    if (lease == m_leases.end())
        return;
    Activity& activity = m_activity[job.id];
    const qint64 now = m_clock.nowMs();
    activity.lastDeliveredMs.insert(lease->agentId, now);
    activity.recentDurationsMs.push_back(now - lease->issuedMs);
    if (activity.recentDurationsMs.size() > kDurations)
        activity.recentDurationsMs.erase(activity.recentDurationsMs.begin());
    auto unit = job.workunits.find(lease->workunitId);
    if (unit != job.workunits.end()) {
        unit->second.state = Workunit::State::Done;
        unit->second.openLeases.removeAll(leaseId);
        unit->second.resume.reset();
    }
    // A closed lease lives on in the store only; memory keeps the leases that may still deliver.
    m_leases.erase(lease);
}

bool Scheduler::released(JobState* job, const QString& leaseId, Lease::State closedAs)
{
    bool requeued = false;
    const Status stored = m_store.transaction([&]() -> Status {
        if (job)
            if (auto s = lockJob(*job); !s)
                return s;
        requeued = release(job, leaseId, closedAs);
        return {};
    });
    if (!stored)
        qCWarning(lcScheduler) << "cannot close lease" << leaseId << ":" << stored.error();
    return requeued;
}

bool Scheduler::release(JobState* job, const QString& leaseId, Lease::State closedAs)
{
    auto lease = m_leases.find(leaseId);
    if (lease == m_leases.end())
        return false;
    Lease closed = *lease;
    closed.state = closedAs;
    (void)m_store.saveLease(closed);
    bool requeued = false;
    if (job) {
        auto unit = job->workunits.find(lease->workunitId);
        if (unit != job->workunits.end()) {
            unit->second.openLeases.removeAll(leaseId);
            if (unit->second.state == Workunit::State::Leased && unit->second.openLeases.isEmpty()) {
                unit->second.state = Workunit::State::Pending; // handed to the next agent that asks
                (void)m_store.saveWorkunit(unit->second);
                requeued = true;
            }
        }
    }
    m_leases.erase(lease);
    return requeued;
}

Scheduler::HandBackOutcome Scheduler::handedBack(JobState* job, const QString& leaseId,
                                                 std::optional<Workunit::ResumePoint> resume)
{
    HandBackOutcome outcome;
    const Status stored = m_store.transaction([&]() -> Status {
        if (job)
            if (auto s = lockJob(*job); !s)
                return s;
        outcome = handBack(job, leaseId, std::move(resume));
        return {};
    });
    if (!stored)
        qCWarning(lcScheduler) << "cannot record that lease" << leaseId
                               << "was handed back:" << stored.error();
    return outcome;
}

Scheduler::HandBackOutcome Scheduler::handBack(JobState* job, const QString& leaseId,
                                               std::optional<Workunit::ResumePoint> resume)
{
    HandBackOutcome outcome;
    auto lease = m_leases.find(leaseId);
    if (lease == m_leases.end())
        return outcome;
    Lease closed = *lease;
    closed.state = Lease::State::HandedBack;
    (void)m_store.saveLease(closed);
    Workunit* unit = nullptr;
    if (job) {
        auto found = job->workunits.find(lease->workunitId);
        if (found != job->workunits.end())
            unit = &found->second;
    }
    if (unit) {
        unit->openLeases.removeAll(leaseId);
        if (unit->state == Workunit::State::Leased && unit->openLeases.isEmpty()) {
            unit->state = Workunit::State::Pending; // handed to the next agent that asks, now
            outcome.requeued = true;
            if (resume) {
                unit->resume = std::move(resume);
                outcome.resumeKept = true;
            }
            (void)m_store.saveWorkunit(*unit);
        }
    }
    m_leases.erase(lease);
    // The agent stops being counted as training this job now, not when its deliveries age out.
    if (job)
        if (auto activity = m_activity.find(job->id); activity != m_activity.end())
            activity->second.lastDeliveredMs.remove(closed.agentId);
    return outcome;
}

std::optional<QString> Scheduler::discardResume(JobState* job, qint64 workunitId, const QString& checkpointSha)
{
    if (!job || checkpointSha.isEmpty())
        return std::nullopt;
    std::optional<QString> handedBackBy;
    const Status stored = m_store.transaction([&]() -> Status {
        if (auto s = lockJob(*job); !s)
            return s;
        auto unit = job->workunits.find(workunitId);
        if (unit == job->workunits.end() || !unit->second.resume || unit->second.resume->sha256 != checkpointSha)
            return {};
        handedBackBy = unit->second.resume->fromAgent;
        unit->second.resume.reset();
        return m_store.saveWorkunit(unit->second);
    });
    if (!stored) {
        qCWarning(lcScheduler) << "cannot discard the resume point of workunit" << workunitId << ":"
                               << stored.error();
        return std::nullopt;
    }
    return handedBackBy;
}

} // namespace gleaner::coordinator
