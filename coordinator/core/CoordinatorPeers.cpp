// The coordinator among others of its deployment on one database: what it learns of the agents, leases and
// files they made, when its own caches do not know them (docs/scale-out.md, "Admission from the database").

#include "core/Coordinator.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {

Status Coordinator::lockLiveJobs()
{
    return m_db->transaction([&]() -> Status {
        for (auto& [jobId, job] : m_jobs)
            if (job.status == JobStatus::Running || job.status == JobStatus::Paused)
                if (auto s = m_scheduler->lockJob(job); !s)
                    return s;
        return {};
    });
}

Lease* Coordinator::findLease(const QString& leaseId)
{
    if (Lease* lease = m_scheduler->find(leaseId))
        return lease;
    if (auto s = lockLiveJobs(); !s)
        qCWarning(lcCoordinator) << "cannot catch up on other coordinators' leases:" << s.error();
    return m_scheduler->find(leaseId);
}

void Coordinator::catchUpOnLeases()
{
    m_state->call([this] {
        if (auto s = lockLiveJobs(); !s)
            qCWarning(lcCoordinator) << "cannot catch up on other coordinators' leases:" << s.error();
    });
}

std::optional<AdmissionCache::AgentEntry> Coordinator::lookUpAgent(const QString& tokenHash)
{
    return m_state->call([&]() -> std::optional<AdmissionCache::AgentEntry> {
        auto row =
            m_db->exec(QStringLiteral("SELECT id, revoked FROM agents WHERE token_hash = ?"), {tokenHash});
        if (!row) {
            qCWarning(lcCoordinator) << "cannot look an agent up:" << row.error();
            return std::nullopt;
        }
        if (!row->next())
            return std::nullopt;
        AdmissionCache::AgentEntry entry{row->value(0).toString(), row->value(1).toInt() != 0};
        m_admission.setAgent(tokenHash, entry);
        return entry;
    });
}

QString Coordinator::closedLeaseMessage(const QString& leaseId, Lease::State state)
{
    switch (state) {
    case Lease::State::Completed:
        return QStringLiteral("the result of lease %1 was already received; this copy is a duplicate")
            .arg(leaseId);
    case Lease::State::Failed:
        return failedLeaseMessage(leaseId);
    case Lease::State::HandedBack:
        return handedBackLeaseMessage(leaseId);
    case Lease::State::Open:
    case Lease::State::Expired:
    case Lease::State::Refused:
        break;
    }
    return QStringLiteral("lease %1 was closed after an invalid result").arg(leaseId);
}

void Coordinator::onLeaseLearnt(const Lease& lease, const JobState& job)
{
    // Another coordinator leased, extended or closed it: this one takes its uploads and downloads alike, and
    // answers a closed one's repeats with the same 409.
    if (lease.state == Lease::State::Open || lease.state == Lease::State::Expired) {
        if (const auto known = m_admission.lease(lease.id); known && !known->closedReason.isEmpty())
            return;
        auto unit = job.workunits.find(lease.workunitId);
        m_admission.setLease(
            lease.id, admissionEntry(job, unit == job.workunits.end() ? nullptr : &unit->second, lease));
        return;
    }
    const QString reason = closedLeaseMessage(lease.id, lease.state);
    if (m_admission.lease(lease.id))
        m_admission.closeLease(lease.id, reason);
    else
        m_admission.setLease(lease.id, {lease.agentId, 0, reason, {}, {}, job.id});
}

} // namespace gleaner::coordinator
