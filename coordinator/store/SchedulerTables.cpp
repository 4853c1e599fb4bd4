#include "store/SchedulerTables.h"

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

} // namespace

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
    const auto known = m_known.find(jobId);
    if (known == m_known.end() || count != known->second + 1) {
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
    auto units =
        m_db.exec(QStringLiteral("SELECT id, epoch, shard, state, issued, resume_lease, resume_sha, "
                                 "resume_size, resume_step, resume_base_version, resume_weights_sha, "
                                 "resume_steps FROM workunits WHERE job_id = ? AND changed_version > ?"),
                  {jobId, since});
    if (!units)
        return fail(units.error());
    std::map<qint64, size_t> unitAt; // workunit id -> its place in into.workunits
    while (units->next()) {
        Workunit unit;
        unit.id = units->value(0).toLongLong();
        unit.epoch = units->value(1).toInt();
        unit.shard = units->value(2).toInt();
        // Leased or not follows from the open leases; done is final.
        unit.state = units->value(3).toString() == u"done" ? Workunit::State::Done : Workunit::State::Pending;
        unit.issued = units->value(4).toInt();
        if (!units->value(6).toString().isEmpty() && unit.state != Workunit::State::Done)
            unit.resume = Workunit::ResumePoint{units->value(5).toString(),   units->value(6).toString(),
                                                units->value(7).toLongLong(), units->value(8).toLongLong(),
                                                units->value(9).toLongLong(), units->value(10).toString(),
                                                units->value(11).toLongLong()};
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
                       "resume_weights_sha = ?, resume_steps = ?, changed_version = (SELECT "
                       "sched_version FROM jobs WHERE jobs.id = workunits.job_id) WHERE id = ?"),
        {workunitStateName(unit.state), unit.issued, resume.fromLease, resume.sha256, resume.size,
         resume.step, resume.baseVersion, resume.weightsSha, resume.steps, unit.id}));
}

Status SchedulerTables::saveLease(const Lease& lease)
{
    return done(m_db.exec(
        QStringLiteral(
            "INSERT INTO leases (id, workunit_id, agent_id, issued_ms, deadline_ms, state, "
            "base_version, weights_sha, nonce, steps, checkpoint_sha, resume_step, changed_version) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, %1) ON CONFLICT (id) DO UPDATE SET deadline_ms = "
            "excluded.deadline_ms, state = excluded.state, changed_version = excluded.changed_version")
            .arg(QLatin1String(kJobCountOfLease)),
        {lease.id, lease.workunitId, lease.agentId, lease.issuedMs, lease.deadlineMs,
         leaseStateName(lease.state), lease.baseVersion, lease.weightsSha, lease.nonce, lease.steps,
         lease.checkpointSha, lease.resumeStep, lease.workunitId}));
}

Status SchedulerTables::saveEpoch(qint64 jobId, int epoch)
{
    return done(m_db.exec(QStringLiteral("UPDATE jobs SET epoch = ? WHERE id = ?"), {epoch, jobId}));
}

} // namespace gleaner::coordinator
