#include "peers/Deployment.h"

#include "aggregation/WeightsKeeper.h"
#include "config/DataDirectory.h"
#include "config/SigningKeys.h"
#include "crypto/TlsCertificate.h"
#include "intake/AgentStanding.h"
#include "intake/HandBacks.h"
#include "leasing/LeaseManifest.h"
#include "lifecycle/JobDesk.h"
#include "lifecycle/JobRecords.h"
#include "lifecycle/JobTakeUp.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "store/JobTallies.h"
#include "util/Durability.h"

#include <QFile>
#include <QLoggingCategory>
#include <QSaveFile>

Q_LOGGING_CATEGORY(lcPeers, "gleaner.coordinator.peers")

namespace gleaner::coordinator {

Deployment::Deployment(Parts parts, const DataDirectory& dir, const CoordinatorConfig& config,
                       const Clock& clock, QString storage, Hooks hooks)
    : m_parts(parts), m_dir(dir), m_config(config), m_clock(clock), m_storage(std::move(storage)),
      m_hooks(std::move(hooks))
{
}

Status Deployment::checkIdentity(Database& db, const DataDirectory& dir, const QString& storage,
                                 const QString& deploymentId, const SigningKeys& keys)
{
    // Agents pin one certificate and trust one signing key: every coordinator must present the same ones.
    QFile certificate(dir.certificatePath());
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
    } identity[] = {{"signing_key", keys.publicKey().fingerprint(), "signing key"},
                    {"tls_certificate", *tls, "TLS certificate"}};
    for (const auto& [key, mine, what] : identity) {
        auto kept = db.keepOnce(QString::fromLatin1(key), mine);
        if (!kept)
            return fail(kept.error());
        if (*kept != mine)
            return fail(
                QStringLiteral("%1: this coordinator's %2 (%3) is not the deployment's (%4): %5")
                    .arg(dir.root(), QString::fromLatin1(what), mine.left(16), kept->left(16), remedy));
    }
    // The shared folder must be the one the others write to, not a local folder of the same name: the first
    // coordinator marks it with the deployment's name, and the database remembers that it did.
    const QString markPath = storage + QStringLiteral("/deployment-id");
    QFile mark(markPath);
    if (mark.open(QIODevice::ReadOnly)) {
        const QString there = QString::fromLatin1(mark.read(256)).trimmed();
        if (there != deploymentId)
            return fail(
                QStringLiteral("%1 belongs to another deployment (%2, this database's is %3): name the "
                               "deployment's own shared folder in shared_dir")
                    .arg(storage, there.left(40), deploymentId));
        return {};
    }
    auto marked = db.readMeta(QStringLiteral("shared_dir_marked"));
    if (!marked)
        return fail(marked.error());
    if (marked->has_value())
        return fail(
            QStringLiteral("%1 holds no deployment-id, but the deployment's first coordinator marked its "
                           "shared folder: this is not the folder the other coordinators share (mount the "
                           "shared folder there, or correct shared_dir in %2)")
                .arg(storage, dir.configPath()));
    QSaveFile file(markPath);
    if (!file.open(QIODevice::WriteOnly) || file.write(deploymentId.toLatin1() + '\n') < 0 || !file.commit())
        return fail(
            QStringLiteral("%1: cannot mark the shared folder: %2").arg(markPath, file.errorString()));
    if (auto s = Durability::syncFolder(storage); !s)
        return s;
    if (auto kept = db.keepOnce(QStringLiteral("shared_dir_marked"), deploymentId); !kept)
        return fail(kept.error());
    return {};
}

Status Deployment::lockLiveJobs()
{
    // A lease may be of a job this coordinator has not taken up yet (submitted elsewhere since its last
    // look).
    if (m_config.isShared() && !m_parts.db.inTransaction())
        followJobs();
    return m_parts.db.transaction([&]() -> Status {
        for (auto& [jobId, job] : m_parts.jobs)
            if (job.status == JobStatus::Running || job.status == JobStatus::Paused)
                if (auto s = m_parts.scheduler.lockJob(job); !s)
                    return s;
        return {};
    });
}

Lease* Deployment::findLease(const QString& leaseId)
{
    if (Lease* lease = m_parts.scheduler.find(leaseId))
        return lease;
    if (auto s = lockLiveJobs(); !s)
        qCWarning(lcPeers) << "cannot catch up on other coordinators' leases:" << s.error();
    return m_parts.scheduler.find(leaseId);
}

void Deployment::catchUpOnLeases()
{
    m_parts.state.call([this] {
        if (auto s = lockLiveJobs(); !s)
            qCWarning(lcPeers) << "cannot catch up on other coordinators' leases:" << s.error();
    });
}

std::optional<AdmissionCache::AgentEntry> Deployment::lookUpAgent(const QString& tokenHash)
{
    return m_parts.state.call([&]() -> std::optional<AdmissionCache::AgentEntry> {
        auto row = m_parts.db.exec(QStringLiteral("SELECT id, revoked FROM agents WHERE token_hash = ?"),
                                   {tokenHash});
        if (!row) {
            qCWarning(lcPeers) << "cannot look an agent up:" << row.error();
            return std::nullopt;
        }
        if (!row->next())
            return std::nullopt;
        AdmissionCache::AgentEntry entry{row->value(0).toString(), row->value(1).toInt() != 0};
        m_parts.admission.setAgent(tokenHash, entry);
        return entry;
    });
}

void Deployment::leaseLearnt(const Lease& lease, const JobState& job)
{
    // Another coordinator leased, extended or closed it: this one takes its uploads and downloads alike, and
    // answers a closed one's repeats with the same 409.
    if (lease.state == Lease::State::Open || lease.state == Lease::State::Expired) {
        if (const auto known = m_parts.admission.lease(lease.id); known && !known->closedReason.isEmpty())
            return;
        auto unit = job.workunits.find(lease.workunitId);
        m_parts.admission.setLease(
            lease.id,
            LeaseManifest::admissionEntry(job, unit == job.workunits.end() ? nullptr : &unit->second, lease));
        return;
    }
    const QString reason = closedLeaseMessage(lease.id, lease.state);
    if (m_parts.admission.lease(lease.id))
        m_parts.admission.closeLease(lease.id, reason);
    else
        m_parts.admission.setLease(lease.id, {lease.agentId, 0, reason, {}, {}, job.id});
}

namespace {
// How often keepSharedHouse runs, and how long a received update may wait unfolded before the housekeeper
// takes it for one whose coordinator stopped (a live one folds within milliseconds, or keeps it while Redis
// is away).
constexpr qint64 kSharedHouseEveryMs = 2000;
constexpr qint64 kOrphanedAfterMs = 30'000;
} // namespace

void Deployment::keepSharedHouse(qint64 nowMs)
{
    if (nowMs - m_lastLookMs < kSharedHouseEveryMs)
        return;
    m_lastLookMs = nowMs;
    // What the others changed: jobs, quarantines and revocations (an agent revoked there is refused here
    // too).
    followJobs();
    followValidations();
    followCounts();
    if (auto s = m_parts.standing.load(); !s)
        qCWarning(lcPeers) << "cannot read the agents' standing:" << s.error();
    auto revoked = m_parts.db.exec(QStringLiteral("SELECT id, token_hash FROM agents WHERE revoked != 0"));
    while (revoked && revoked->next())
        if (auto cached = m_parts.admission.agentByTokenHash(revoked->value(1).toString());
            cached && !cached->revoked)
            m_parts.admission.setAgent(revoked->value(1).toString(), {revoked->value(0).toString(), true});
    const Status removed = m_parts.db.transaction([&]() -> Status {
        // Every live job's lock: the picture of every lease and workunit is the database's, and no
        // coordinator hands out a file until this transaction ends.
        if (auto s = lockLiveJobs(); !s)
            return s;
        // What the picture does not show: the weights that updates not yet in a snapshot trained from (folded
        // against them, wherever they were received) and the snapshots themselves.
        QSet<QString> needed;
        auto bases =
            m_parts.db.exec(QStringLiteral("SELECT l.weights_sha FROM updates u JOIN leases l ON l.id = "
                                           "u.lease_id WHERE u.file != '' UNION SELECT sha256 FROM snapshots "
                                           "UNION SELECT rule_sha FROM snapshots"));
        if (!bases)
            return fail(bases.error());
        while (bases->next())
            needed.insert(bases->value(0).toString());
        m_hooks.removeRetiredWeights(needed);
        m_parts.handBacks.removeUnused(needed);
        return {};
    });
    if (!removed)
        qCWarning(lcPeers) << "cannot remove retired files (tried again in a moment):" << removed.error();
    if (!m_hooks.doesHousekeeping())
        return;
    for (auto& [id, job] : m_parts.jobs) {
        // Submitted at a coordinator that stopped mid-import (its import lock went with its connection).
        if (job.status == JobStatus::Created)
            m_parts.takeUp.importWhenUnclaimed(id);
        if (job.status != JobStatus::Running && job.status != JobStatus::Paused)
            continue;
        auto orphaned = m_parts.takeUp.updatesToReplay(job, 0, 0, nowMs - kOrphanedAfterMs);
        if (!orphaned)
            qCWarning(lcPeers) << "job" << id << "cannot read its received updates (tried again in a moment):"
                               << orphaned.error();
        else if (!orphaned->empty())
            m_parts.weights.replay(id, std::move(*orphaned));
    }
}

void Deployment::followJobs()
{
    auto rows = m_parts.records.selectAll();
    if (!rows) {
        qCWarning(lcPeers) << "cannot read the deployment's jobs:" << rows.error();
        return;
    }
    const auto live = [](JobStatus status) {
        return status == JobStatus::Running || status == JobStatus::Paused;
    };
    while (rows->next()) {
        const qint64 id = rows->value(0).toLongLong();
        const auto status = jobStatusFromName(rows->value(2).toString());
        JobState* mine = m_parts.jobDesk.find(id);
        if (!status || (mine && mine->status == *status))
            continue;
        if (!mine || (mine->status == JobStatus::Created && *status != JobStatus::Created)) {
            // Submitted at another coordinator, or imported there since: taken up as a restart would. One
            // this coordinator could not take up is tried again once its wait is over.
            if (!m_parts.takeUp.mayTryAgain(id))
                continue;
            m_parts.jobs.erase(id);
            JobState job = m_parts.records.fromRow(*rows);
            auto [it, added] = m_parts.jobs.emplace(id, std::move(job));
            if (!m_parts.takeUp.prepare(it->second, /*importHere=*/false)) {
                m_parts.jobs.erase(it);
                continue;
            }
            qCInfo(lcPeers) << "job" << id << "(" << jobStatusName(it->second.status)
                            << ") taken up from another coordinator";
            m_parts.takeUp.servedAgain(id);
        } else if (live(mine->status) && !live(*status) && *status != JobStatus::Created) {
            m_parts.jobDesk.finish(*mine, *status, rows->value(3).toString(), /*persist=*/false);
        } else if (live(mine->status) && live(*status)) {
            mine->status = *status;
            if (*status == JobStatus::Running)
                m_parts.scheduler.openNextEpochIfReady(*mine);
            qCInfo(lcPeers) << "job" << id << jobStatusName(*status) << "at another coordinator";
        }
    }
}

void Deployment::followCounts()
{
    // What this coordinator sent first, then every job's counts as all of them took them: a figure another
    // one changed is at most one look (2 s) old here.
    if (auto s = m_parts.tallies.flush(); !s)
        qCWarning(lcPeers) << "cannot store the file bytes sent (tried again in a moment):" << s.error();
    auto all = m_parts.tallies.loadAll();
    if (!all) {
        qCWarning(lcPeers) << "cannot read the deployment's job counts:" << all.error();
        return;
    }
    for (auto& [id, job] : m_parts.jobs) {
        const auto stored = all->find(id);
        job.counts = stored == all->end() ? JobCounts{} : stored->second;
    }
}

void Deployment::followValidations()
{
    auto counts = m_parts.records.validationCounts();
    if (!counts) {
        qCWarning(lcPeers) << "cannot read the deployment's validations:" << counts.error();
        return;
    }
    for (const auto& [id, count] : *counts)
        if (JobState* job = m_parts.jobDesk.find(id); job && qint64(job->history.size()) != count)
            m_parts.records.loadHistory(*job);
}

} // namespace gleaner::coordinator
