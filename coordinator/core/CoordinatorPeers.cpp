// The coordinator among others of its deployment on one database: that they are one deployment (one identity,
// one shared folder), and what it learns of the agents, leases and files they made, when its own caches do
// not know them (docs/scale-out.md).

#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "crypto/TlsCertificate.h"
#include "intake/AgentStanding.h"
#include "leasing/LeaseManifest.h"
#include "lifecycle/JobRecords.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "util/Durability.h"

#include <QFile>
#include <QLoggingCategory>
#include <QSaveFile>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {

Status Coordinator::checkDeployment(const QString& deploymentId)
{
    // Agents pin one certificate and trust one signing key: every coordinator must present the same ones.
    QFile certificate(m_dir.certificatePath());
    if (!certificate.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: %2").arg(certificate.fileName(), certificate.errorString()));
    auto tls = TlsCertificate::fingerprint(certificate.readAll());
    if (!tls)
        return fail(tls.error());
    const QString remedy = QStringLiteral("a coordinator that joins a deployment takes its identity with "
                                          "gleaner-coordinator init --join DATA_DIR_OF_ANOTHER_ONE");
    const struct
    {
        const char* key;
        QString mine;
        const char* what;
    } identity[] = {{"signing_key", m_keys->publicKey().fingerprint(), "signing key"},
                    {"tls_certificate", *tls, "TLS certificate"}};
    for (const auto& [key, mine, what] : identity) {
        auto kept = m_db->keepOnce(QString::fromLatin1(key), mine);
        if (!kept)
            return fail(kept.error());
        if (*kept != mine)
            return fail(
                QStringLiteral("%1: this coordinator's %2 (%3) is not the deployment's (%4): %5")
                    .arg(m_dir.root(), QString::fromLatin1(what), mine.left(16), kept->left(16), remedy));
    }
    // The shared folder must be the one the others write to, not a local folder of the same name: the first
    // coordinator marks it with the deployment's name, and the database remembers that it did.
    const QString markPath = m_storage + QStringLiteral("/deployment-id");
    QFile mark(markPath);
    if (mark.open(QIODevice::ReadOnly)) {
        const QString there = QString::fromLatin1(mark.read(256)).trimmed();
        if (there != deploymentId)
            return fail(
                QStringLiteral("%1 belongs to another deployment (%2, this database's is %3): name the "
                               "deployment's own shared folder in shared_dir")
                    .arg(m_storage, there.left(40), deploymentId));
        return {};
    }
    auto marked = m_db->readMeta(QStringLiteral("shared_dir_marked"));
    if (!marked)
        return fail(marked.error());
    if (marked->has_value())
        return fail(
            QStringLiteral("%1 holds no deployment-id, but the deployment's first coordinator marked its "
                           "shared folder: this is not the folder the other coordinators share (mount the "
                           "shared folder there, or correct shared_dir in %2)")
                .arg(m_storage, m_dir.configPath()));
    QSaveFile file(markPath);
    if (!file.open(QIODevice::WriteOnly) || file.write(deploymentId.toLatin1() + '\n') < 0 || !file.commit())
        return fail(
            QStringLiteral("%1: cannot mark the shared folder: %2").arg(markPath, file.errorString()));
    if (auto s = Durability::syncFolder(m_storage); !s)
        return s;
    if (auto kept = m_db->keepOnce(QStringLiteral("shared_dir_marked"), deploymentId); !kept)
        return fail(kept.error());
    return {};
}

Status Coordinator::lockLiveJobs()
{
    // A lease may be of a job this coordinator has not taken up yet (submitted elsewhere since its last
    // look).
    if (m_config.isShared() && !m_db->inTransaction())
        followJobs();
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

void Coordinator::onLeaseLearnt(const Lease& lease, const JobState& job)
{
    // Another coordinator leased, extended or closed it: this one takes its uploads and downloads alike, and
    // answers a closed one's repeats with the same 409.
    if (lease.state == Lease::State::Open || lease.state == Lease::State::Expired) {
        if (const auto known = m_admission.lease(lease.id); known && !known->closedReason.isEmpty())
            return;
        auto unit = job.workunits.find(lease.workunitId);
        m_admission.setLease(
            lease.id,
            LeaseManifest::admissionEntry(job, unit == job.workunits.end() ? nullptr : &unit->second, lease));
        return;
    }
    const QString reason = closedLeaseMessage(lease.id, lease.state);
    if (m_admission.lease(lease.id))
        m_admission.closeLease(lease.id, reason);
    else
        m_admission.setLease(lease.id, {lease.agentId, 0, reason, {}, {}, job.id});
}

namespace {
// How often keepSharedHouse runs, and how long a received update may wait unfolded before the housekeeper
// takes it for one whose coordinator stopped (a live one folds within milliseconds, or keeps it while Redis
// is away).
constexpr qint64 kSharedHouseEveryMs = 2000;
constexpr qint64 kOrphanedAfterMs = 30'000;
} // namespace

void Coordinator::keepSharedHouse(qint64 nowMs)
{
    if (nowMs - m_sharedHouseMs < kSharedHouseEveryMs)
        return;
    m_sharedHouseMs = nowMs;
    // What the others changed: jobs, quarantines and revocations (an agent revoked there is refused here
    // too).
    followJobs();
    followValidations();
    followCounts();
    if (auto s = m_standing->load(); !s)
        qCWarning(lcCoordinator) << "cannot read the agents' standing:" << s.error();
    auto revoked = m_db->exec(QStringLiteral("SELECT id, token_hash FROM agents WHERE revoked != 0"));
    while (revoked && revoked->next())
        if (auto cached = m_admission.agentByTokenHash(revoked->value(1).toString());
            cached && !cached->revoked)
            m_admission.setAgent(revoked->value(1).toString(), {revoked->value(0).toString(), true});
    const Status removed = m_db->transaction([&]() -> Status {
        // Every live job's lock: the picture of every lease and workunit is the database's, and no
        // coordinator hands out a file until this transaction ends.
        if (auto s = lockLiveJobs(); !s)
            return s;
        // What the picture does not show: the weights that updates not yet in a snapshot trained from (folded
        // against them, wherever they were received) and the snapshots themselves.
        QSet<QString> needed;
        auto bases =
            m_db->exec(QStringLiteral("SELECT l.weights_sha FROM updates u JOIN leases l ON l.id = "
                                      "u.lease_id WHERE u.file != '' UNION SELECT sha256 FROM snapshots "
                                      "UNION SELECT rule_sha FROM snapshots"));
        if (!bases)
            return fail(bases.error());
        while (bases->next())
            needed.insert(bases->value(0).toString());
        removeRetiredWeights(needed);
        m_handBacks->removeUnused(needed);
        return {};
    });
    if (!removed)
        qCWarning(lcCoordinator) << "cannot remove retired files (tried again in a moment):"
                                 << removed.error();
    if (!m_housekeeper)
        return;
    for (auto& [id, job] : m_jobs) {
        // Submitted at a coordinator that stopped mid-import (its import lock went with its connection).
        if (job.status == JobStatus::Created)
            m_takeUp->importWhenUnclaimed(id);
        if (job.status != JobStatus::Running && job.status != JobStatus::Paused)
            continue;
        auto orphaned = m_takeUp->updatesToReplay(job, 0, 0, nowMs - kOrphanedAfterMs);
        if (!orphaned)
            qCWarning(lcCoordinator) << "job" << id
                                     << "cannot read its received updates (tried again in a moment):"
                                     << orphaned.error();
        else if (!orphaned->empty())
            m_weights->replay(id, std::move(*orphaned));
    }
}

void Coordinator::followJobs()
{
    auto rows = m_records->selectAll();
    if (!rows) {
        qCWarning(lcCoordinator) << "cannot read the deployment's jobs:" << rows.error();
        return;
    }
    const auto live = [](JobStatus status) {
        return status == JobStatus::Running || status == JobStatus::Paused;
    };
    while (rows->next()) {
        const qint64 id = rows->value(0).toLongLong();
        const auto status = jobStatusFromName(rows->value(2).toString());
        JobState* mine = m_jobDesk->find(id);
        if (!status || (mine && mine->status == *status))
            continue;
        if (!mine || (mine->status == JobStatus::Created && *status != JobStatus::Created)) {
            // Submitted at another coordinator, or imported there since: taken up as a restart would. One
            // this coordinator could not take up is tried again once its wait is over.
            if (!m_takeUp->mayTryAgain(id))
                continue;
            m_jobs.erase(id);
            JobState job = m_records->fromRow(*rows);
            auto [it, added] = m_jobs.emplace(id, std::move(job));
            if (!m_takeUp->prepare(it->second, /*importHere=*/false)) {
                m_jobs.erase(it);
                continue;
            }
            qCInfo(lcCoordinator) << "job" << id << "(" << jobStatusName(it->second.status)
                                  << ") taken up from another coordinator";
            m_takeUp->servedAgain(id);
        } else if (live(mine->status) && !live(*status) && *status != JobStatus::Created) {
            m_jobDesk->finish(*mine, *status, rows->value(3).toString(), /*persist=*/false);
        } else if (live(mine->status) && live(*status)) {
            mine->status = *status;
            if (*status == JobStatus::Running)
                m_scheduler->openNextEpochIfReady(*mine);
            qCInfo(lcCoordinator) << "job" << id << jobStatusName(*status) << "at another coordinator";
        }
    }
}

void Coordinator::noteDownloaded(qint64 jobId, const QByteArray& role, quint64 bytes)
{
    if (JobState* job = m_jobDesk->find(jobId)) {
        job->counts.downloadedByRole[role] += qint64(bytes);
        m_tallies->countDownloaded(jobId, role, qint64(bytes));
    }
}

void Coordinator::followCounts()
{
    // What this coordinator sent first, then every job's counts as all of them took them: a figure another one
    // changed is at most one look (2 s) old here.
    if (auto s = m_tallies->flush(); !s)
        qCWarning(lcCoordinator) << "cannot store the file bytes sent (tried again in a moment):" << s.error();
    auto all = m_tallies->loadAll();
    if (!all) {
        qCWarning(lcCoordinator) << "cannot read the deployment's job counts:" << all.error();
        return;
    }
    for (auto& [id, job] : m_jobs) {
        const auto stored = all->find(id);
        job.counts = stored == all->end() ? JobCounts{} : stored->second;
    }
}

void Coordinator::followValidations()
{
    auto counts = m_records->validationCounts();
    if (!counts) {
        qCWarning(lcCoordinator) << "cannot read the deployment's validations:" << counts.error();
        return;
    }
    for (const auto& [id, count] : *counts)
        if (JobState* job = m_jobDesk->find(id); job && qint64(job->history.size()) != count)
            m_records->loadHistory(*job);
}

} // namespace gleaner::coordinator
