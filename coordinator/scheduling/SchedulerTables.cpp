#include "scheduling/SchedulerTables.h"

#include "store/Database.h"

#include <QSqlQuery>

namespace gleaner::coordinator {
namespace {

QString workunitStateName(Workunit::State state)
{
    switch (state) {
    case Workunit::State::Pending: return QStringLiteral("pending");
    case Workunit::State::Leased: return QStringLiteral("leased");
    case Workunit::State::Done: return QStringLiteral("done");
    }
    return QStringLiteral("pending");
}

Status done(const Result<QSqlQuery>& query)
{
    return query ? Status() : fail(query.error());
}

// The change count a row is written under: its job's, which lockJob() raised in this transaction.
const char* const kJobCountOfWorkunit = "(SELECT sched_version FROM jobs WHERE jobs.id = ?)";
const char* const kJobCountOfLease =
    "(SELECT j.sched_version FROM jobs j JOIN workunits w ON w.job_id = j.id WHERE w.id = ?)";
const char* const kNextJobCountOfLease =
    "(SELECT j.sched_version + 1 FROM jobs j JOIN workunits w ON w.job_id = j.id WHERE w.id = ?)";

// The advisory locks of grants in parallel (two-key form, apart from the coordinators' one-key locks): a
// job's
// ("GLJB", the job's id) and an agent's ("GLAG", a hash of its id; two agents that share one wait for each
// other, no more).
constexpr int kJobLockSpace = 0x474c4a42;
constexpr int kAgentLockSpace = 0x474c4147;
QString jobLockKey()
{
    return QStringLiteral("%1, CAST(mod(?, 2147483647) AS integer)").arg(kJobLockSpace);
}

// A workunit row's columns, in the order workunitFromRow reads them.
const char* const kWorkunitColumns =
    "id, epoch, shard, state, issued, resume_lease, resume_sha, resume_size, "
    "resume_step, resume_base_version, resume_weights_sha, resume_steps, resume_agent";

Workunit workunitFromRow(const QSqlQuery& row)
{
    Workunit unit;
    unit.id = row.value(0).toLongLong();
    unit.epoch = row.value(1).toInt();
    unit.shard = row.value(2).toInt();
    // Leased or not follows from the open leases; done is final.
    unit.state = row.value(3).toString() == u"done" ? Workunit::State::Done : Workunit::State::Pending;
    unit.issued = row.value(4).toInt();
    if (!row.value(6).toString().isEmpty() && unit.state != Workunit::State::Done)
        unit.resume = Workunit::ResumePoint{row.value(5).toString(),   row.value(6).toString(),
                                            row.value(7).toLongLong(), row.value(8).toLongLong(),
                                            row.value(9).toLongLong(), row.value(10).toString(),
                                            row.value(11).toLongLong(), row.value(12).toString()};
    return unit;
}

} // namespace

SchedulerTables::SchedulerTables(Database& db)
    : m_db(db), m_parallel(db.engine() == SqlDatabase::Engine::Postgres)
{
}

SchedulerStore::Held SchedulerTables::heldLock(qint64 jobId) const
{
    return m_locked.count(jobId) ? Held::Exclusive : m_shared.count(jobId) ? Held::Shared : Held::None;
}

Status SchedulerTables::transaction(const std::function<Status()>& work)
{
    return m_db.transaction(work);
}

Result<JobChanges> SchedulerTables::lockJob(qint64 jobId)
{
    if (!m_db.inTransaction())
        return fail(QStringLiteral("job %1's lock is taken inside a transaction").arg(jobId));
    if (m_locked.count(jobId))
        return JobChanges{}; // held since earlier in this transaction: nobody changed it meanwhile
    if (m_shared.count(jobId))
        return fail(QStringLiteral("job %1's lock is held shared by this transaction, for a grant; it is not "
                                   "taken exclusively on top (two grants doing so would wait for each other)")
                        .arg(jobId));
    auto bumped = m_db.exec(QStringLiteral("UPDATE jobs SET sched_version = sched_version + 1 WHERE id = ? "
                                           "RETURNING sched_version, epoch, state, "
                                           "reason"),
                            {jobId});
    if (!bumped)
        return fail(bumped.error());
    if (!bumped->next())
        return fail(QStringLiteral("%1: job %2 is not in the database").arg(m_db.name()).arg(jobId));
    const qint64 count = bumped->value(0).toLongLong();
    JobChanges changes;
    changes.epoch = bumped->value(1).toInt();
    changes.state = bumped->value(2).toString();
    changes.reason = bumped->value(3).toString();
    bumped->finish();
    // After the row's lock, as every holder of it takes this one: the grants under way end first, and their
    // rows are read below.
    if (m_parallel)
        if (auto s = done(
                m_db.exec(QStringLiteral("SELECT pg_advisory_xact_lock(%1)").arg(jobLockKey()), {jobId}));
            !s)
            return fail(s.error());
    const auto known = m_known.find(jobId);
    // A grant stamps its rows with the next count without moving it: in parallel, the next count may hide
    // some.
    if (known == m_known.end() || count != known->second + 1 || m_parallel) {
        changes.stale = true;
        if (auto s = readChanged(jobId, known == m_known.end() ? -1 : known->second, changes); !s)
            return fail(s.error());
    }
    m_locked.insert(jobId);
    m_db.whenTransactionEnds([this, jobId, count](bool committed) {
        m_locked.erase(jobId);
        if (committed)
            m_known[jobId] = count;
    });
    return changes;
}

Result<JobChanges> SchedulerTables::shareJob(qint64 jobId)
{
    if (!m_parallel)
        return SchedulerStore::shareJob(jobId);
    if (!m_db.inTransaction())
        return fail(QStringLiteral("job %1's lock is taken inside a transaction").arg(jobId));
    if (m_locked.count(jobId) || m_shared.count(jobId))
        return fail(QStringLiteral("job %1's lock is held by this transaction already").arg(jobId));
    if (auto s = done(
            m_db.exec(QStringLiteral("SELECT pg_advisory_xact_lock_shared(%1)").arg(jobLockKey()), {jobId}));
        !s)
        return fail(s.error());
    // Read under the lock: a new epoch (under lockJob) is either all seen or not begun. A pause or a cancel
    // (a write of the job's state, not under its lock) is seen once committed.
    auto job = m_db.exec(QStringLiteral("SELECT epoch, state, reason FROM jobs WHERE id = ?"), {jobId});
    if (!job)
        return fail(job.error());
    if (!job->next())
        return fail(QStringLiteral("%1: job %2 is not in the database").arg(m_db.name()).arg(jobId));
    JobChanges changes;
    changes.epoch = job->value(0).toInt();
    changes.state = job->value(1).toString();
    changes.reason = job->value(2).toString();
    m_shared.insert(jobId);
    m_db.whenTransactionEnds([this, jobId](bool) { m_shared.erase(jobId); });
    return changes;
}

Result<std::optional<Workunit>> SchedulerTables::claimWorkunit(qint64 jobId,
                                                               const std::vector<int>& preferredShards)
{
    if (!m_shared.count(jobId))
        return fail(QStringLiteral("job %1: a workunit is claimed under the job's shared lock").arg(jobId));
    // The scheduler's choice (Scheduler::choose), each step by an index: of the oldest epoch with pending
    // work, a workunit that resumes a checkpoint, then one of a shard the agent holds, then the first. SKIP
    // LOCKED passes over the rows other grants are claiming; a row another transaction changed meanwhile is
    // checked again against the WHERE once locked.
    const QString oldest = QStringLiteral(
        "job_id = ? AND state = 'pending' AND epoch = (SELECT MIN(epoch) FROM workunits WHERE job_id = ? AND "
        "state = 'pending')");
    QStringList held;
    for (int shard : preferredShards)
        held << QString::number(shard);
    QStringList steps{QStringLiteral("%1 AND resume_sha <> '' ORDER BY shard").arg(oldest)};
    if (!held.isEmpty())
        steps << QStringLiteral("%1 AND shard IN (%2) ORDER BY shard").arg(oldest, held.join(u','));
    steps << QStringLiteral("job_id = ? AND state = 'pending' ORDER BY epoch, shard");
    // One statement: COALESCE runs the next step only when the one before found nothing (and locked nothing).
    QStringList choices;
    for (const QString& step : steps)
        choices
            << QStringLiteral("(SELECT id FROM workunits WHERE %1 LIMIT 1 FOR UPDATE SKIP LOCKED)").arg(step);
    const QString sql =
        QStringLiteral("UPDATE workunits SET state = 'leased', issued = issued + 1, changed_version = "
                       "(SELECT sched_version + 1 FROM jobs WHERE jobs.id = workunits.job_id) WHERE "
                       "id = COALESCE(%1) RETURNING %2")
            .arg(choices.join(QStringLiteral(", ")), QLatin1String(kWorkunitColumns));
    auto claimed = m_db.exec(sql, QVariantList(sql.count(u'?'), jobId));
    if (!claimed)
        return fail(claimed.error());
    if (!claimed->next())
        return std::optional<Workunit>();
    Workunit unit = workunitFromRow(*claimed);
    unit.state = Workunit::State::Leased;
    return std::optional<Workunit>(std::move(unit));
}

Result<int> SchedulerTables::lockAgent(const QString& agentId, qint64 nowMs)
{
    if (!m_parallel)
        return SchedulerStore::lockAgent(agentId, nowMs);
    if (!m_db.inTransaction())
        return fail(QStringLiteral("agent %1's lock is taken inside a transaction").arg(agentId));
    if (auto s = done(m_db.exec(
            QStringLiteral("SELECT pg_advisory_xact_lock(%1, hashtext(?))").arg(kAgentLockSpace), {agentId}));
        !s)
        return fail(s.error());
    // Those that still count: of a live job, and in date. A finished job's leases stay `open` in the database
    // until a coordinator that knows them expires them, and one that stopped never will.
    auto open = m_db.exec(
        QStringLiteral("SELECT COUNT(*) FROM leases l JOIN workunits w ON w.id = l.workunit_id JOIN "
                       "jobs j ON j.id = w.job_id WHERE l.agent_id = ? AND l.state = 'open' AND "
                       "l.deadline_ms > ? AND j.state IN ('running', 'paused')"),
        {agentId, nowMs});
    if (!open)
        return fail(open.error());
    if (!open->next())
        return fail(QStringLiteral("%1: cannot count agent %2's leases").arg(m_db.name(), agentId));
    return open->value(0).toInt();
}

Result<JobChanges> SchedulerTables::loadJob(qint64 jobId)
{
    // The count first: a row written after it is read again by the next lockJob, never missed.
    auto count = m_db.exec(QStringLiteral("SELECT sched_version, epoch FROM jobs WHERE id = ?"), {jobId});
    if (!count)
        return fail(count.error());
    if (!count->next())
        return fail(QStringLiteral("%1: job %2 is not in the database").arg(m_db.name()).arg(jobId));
    JobChanges changes;
    changes.stale = true;
    changes.epoch = count->value(1).toInt();
    if (auto s = readChanged(jobId, -1, changes); !s)
        return fail(s.error());
    m_known[jobId] = count->value(0).toLongLong();
    return changes;
}

Status SchedulerTables::readChanged(qint64 jobId, qint64 since, JobChanges& into)
{
    auto units = m_db.exec(QStringLiteral("SELECT %1 FROM workunits WHERE job_id = ? AND changed_version > ?")
                               .arg(QLatin1String(kWorkunitColumns)),
                           {jobId, since});
    if (!units)
        return fail(units.error());
    std::map<qint64, size_t> unitAt; // workunit id -> its place in into.workunits
    while (units->next()) {
        Workunit unit = workunitFromRow(*units);
        unitAt.emplace(unit.id, into.workunits.size());
        into.workunits.push_back(std::move(unit));
    }
    // Each workunit's first result: later ones are compared with it.
    auto firsts =
        m_db.exec(QStringLiteral("SELECT u.seq, u.agent_id, u.base_version, u.step, u.file, l.workunit_id "
                                 "FROM updates u JOIN leases l ON l.id = u.lease_id JOIN workunits w ON "
                                 "w.id = l.workunit_id WHERE w.job_id = ? AND w.changed_version > ? "
                                 "ORDER BY u.seq"),
                  {jobId, since});
    if (!firsts)
        return fail(firsts.error());
    while (firsts->next()) {
        auto at = unitAt.find(firsts->value(5).toLongLong());
        if (at == unitAt.end() || into.workunits[at->second].first)
            continue;
        into.workunits[at->second].first = Workunit::FirstResult{
            firsts->value(0).toLongLong(), firsts->value(1).toString(), firsts->value(2).toLongLong(),
            firsts->value(3).toDouble(), firsts->value(4).toString()};
    }
    auto leases = m_db.exec(
        QStringLiteral(
            "SELECT l.id, l.workunit_id, l.agent_id, l.issued_ms, l.deadline_ms, l.state, l.base_version, "
            "l.weights_sha, l.nonce, l.steps, l.checkpoint_sha, l.resume_step FROM leases l JOIN "
            "workunits w ON w.id = l.workunit_id WHERE w.job_id = ? AND l.changed_version > ?%1")
            .arg(since < 0 ? QStringLiteral(" AND l.state IN ('open', 'expired')") : QString()),
        {jobId, since});
    if (!leases)
        return fail(leases.error());
    while (leases->next()) {
        Lease lease;
        lease.id = leases->value(0).toString();
        lease.jobId = jobId;
        lease.workunitId = leases->value(1).toLongLong();
        lease.agentId = leases->value(2).toString();
        lease.issuedMs = leases->value(3).toLongLong();
        lease.deadlineMs = leases->value(4).toLongLong();
        lease.state = leaseStateFromName(leases->value(5).toString()).value_or(Lease::State::Refused);
        lease.baseVersion = leases->value(6).toLongLong();
        lease.weightsSha = leases->value(7).toString();
        lease.nonce = leases->value(8).toString();          // a result must carry it back, restart or not
        lease.steps = leases->value(9).toLongLong();        // what its upload may claim
        lease.checkpointSha = leases->value(10).toString(); // its agent may still download it
        lease.resumeStep = leases->value(11).toLongLong();
        lease.lastMoveMs = lease.issuedMs; // the step is not stored; the reader counts its look as a move
        into.leases.push_back(std::move(lease));
    }
    return {};
}

Result<qint64> SchedulerTables::addWorkunit(qint64 jobId, int epoch, int shard)
{
    return m_db.insertReturningId(
        QStringLiteral(
            "INSERT INTO workunits (job_id, epoch, shard, state, changed_version) VALUES (?, ?, ?, "
            "'pending', %1)")
            .arg(QLatin1String(kJobCountOfWorkunit)),
        {jobId, epoch, shard, jobId});
}

Status SchedulerTables::saveWorkunit(const Workunit& unit)
{
    const Workunit::ResumePoint none;
    const Workunit::ResumePoint& resume = unit.resume ? *unit.resume : none;
    return done(m_db.exec(
        QStringLiteral("UPDATE workunits SET state = ?, issued = ?, resume_lease = ?, resume_sha = ?, "
                       "resume_size = ?, resume_step = ?, resume_base_version = ?, "
                       "resume_weights_sha = ?, resume_steps = ?, resume_agent = ?, changed_version = (SELECT "
                       "sched_version FROM jobs WHERE jobs.id = workunits.job_id) WHERE id = ?"),
        {workunitStateName(unit.state), unit.issued, resume.fromLease, resume.sha256, resume.size,
         resume.step, resume.baseVersion, resume.weightsSha, resume.steps, resume.fromAgent, unit.id}));
}

Status SchedulerTables::saveLease(const Lease& lease)
{
    // Under a grant's shared lock, the count lockJob raises next (shareJob); otherwise the job's, which its
    // lock raised.
    const bool granted = m_shared.count(lease.jobId) > 0;
    return done(m_db.exec(
        QStringLiteral(
            "INSERT INTO leases (id, workunit_id, agent_id, issued_ms, deadline_ms, state, "
            "base_version, weights_sha, nonce, steps, checkpoint_sha, resume_step, changed_version) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, %1) ON CONFLICT (id) DO UPDATE SET deadline_ms = "
            "excluded.deadline_ms, state = excluded.state, changed_version = excluded.changed_version")
            .arg(QLatin1String(granted ? kNextJobCountOfLease : kJobCountOfLease)),
        {lease.id, lease.workunitId, lease.agentId, lease.issuedMs, lease.deadlineMs,
         leaseStateName(lease.state), lease.baseVersion, lease.weightsSha, lease.nonce, lease.steps,
         lease.checkpointSha, lease.resumeStep, lease.workunitId}));
}

Status SchedulerTables::saveEpoch(qint64 jobId, int epoch)
{
    return done(m_db.exec(QStringLiteral("UPDATE jobs SET epoch = ? WHERE id = ?"), {epoch, jobId}));
}

} // namespace gleaner::coordinator
