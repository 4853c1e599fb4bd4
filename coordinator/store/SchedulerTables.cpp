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

} // namespace

Status SchedulerTables::transaction(const std::function<Status()>& work)
{
    return m_db.transaction(work);
}

Result<qint64> SchedulerTables::addWorkunit(qint64 jobId, int epoch, int shard)
{
    return m_db.insertReturningId(
        QStringLiteral("INSERT INTO workunits (job_id, epoch, shard, state) VALUES (?, ?, ?, 'pending')"),
        {jobId, epoch, shard});
}

Status SchedulerTables::saveWorkunit(const Workunit& unit)
{
    const Workunit::ResumePoint none;
    const Workunit::ResumePoint& resume = unit.resume ? *unit.resume : none;
    return done(m_db.exec(QStringLiteral("UPDATE workunits SET state = ?, issued = ?, resume_lease = ?, resume_sha = ?, "
                                         "resume_size = ?, resume_step = ?, resume_base_version = ?, "
                                         "resume_weights_sha = ?, resume_steps = ? WHERE id = ?"),
                          {workunitStateName(unit.state), unit.issued, resume.fromLease, resume.sha256, resume.size,
                           resume.step, resume.baseVersion, resume.weightsSha, resume.steps, unit.id}));
}

Status SchedulerTables::saveLease(const Lease& lease)
{
    return done(m_db.exec(
        QStringLiteral("INSERT INTO leases (id, workunit_id, agent_id, issued_ms, deadline_ms, state, "
                       "base_version, weights_sha, nonce, steps, checkpoint_sha, resume_step) VALUES (?, ?, ?, ?, ?, ?, "
                       "?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET deadline_ms = excluded.deadline_ms, state = "
                       "excluded.state"),
        {lease.id, lease.workunitId, lease.agentId, lease.issuedMs, lease.deadlineMs, leaseStateName(lease.state),
         lease.baseVersion, lease.weightsSha, lease.nonce, lease.steps, lease.checkpointSha, lease.resumeStep}));
}

Status SchedulerTables::saveEpoch(qint64 jobId, int epoch)
{
    return done(m_db.exec(QStringLiteral("UPDATE jobs SET epoch = ? WHERE id = ?"), {epoch, jobId}));
}

} // namespace gleaner::coordinator
