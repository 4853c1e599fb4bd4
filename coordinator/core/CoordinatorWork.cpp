// Coordinator: the agents' work cycle (lease, progress, result) and the housekeeping tick.
#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "crypto/SignedEnvelope.h"
#include "enrollment/Tokens.h"
#include "intake/AgentStanding.h"
#include "jobs/JobImporter.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QLoggingCategory>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {
namespace {

constexpr int kMaxTasksPerLease = 16;

constexpr int kRetryWhenIdleSeconds = 10;
constexpr int kRetryWhenNoJobsSeconds = 30;
// A job still being imported, or whose first weights are being written, has work in a moment: agents that ask
// now come back soon instead of after the no-job wait, which is longer than a small job takes.
constexpr int kRetryWhenStartingSeconds = 2;
constexpr int kRetryWhenQuarantinedSeconds = 600;
QJsonObject fileEntry(const char* role, const QString& sha, qint64 size)
{
    QJsonObject file;
    file.insert(QStringLiteral("role"), QString::fromLatin1(role));
    file.insert(QStringLiteral("sha256"), sha);
    file.insert(QStringLiteral("size"), size);
    return file;
}

} // namespace

QByteArray Coordinator::signedManifest(const JobState& job, const Workunit& unit, const Lease& lease,
                                       QByteArray* signature)
{
    const ShardRef& shard = job.files.shards.at(unit.shard);
    QJsonArray files;
    files.append(fileEntry("model", job.files.model.sha256, job.files.model.size));
    // The lease's base: the published weights, or for a lease that resumes a handed-back checkpoint the older file
    // that checkpoint trained from.
    const qint64 weightsSize =
        lease.weightsSha == job.published.sha256 ? job.published.size : m_blobs.size(lease.weightsSha);
    files.append(fileEntry("weights", lease.weightsSha, weightsSize));
    files.append(fileEntry("shard", shard.sha256, shard.bytes));

    QJsonObject hyper;
    hyper.insert(QStringLiteral("local_epochs"), job.spec.localEpochs);
    if (lease.steps > 0) // sized to the agent's speed (speed-aware jobs)
        hyper.insert(QStringLiteral("steps"), lease.steps);
    hyper.insert(QStringLiteral("batch_size"), job.spec.batchSize);
    hyper.insert(QStringLiteral("optimizer"), job.spec.optimizer.toJson());
    // Each workunit trains with its own data order, reproducibly.
    hyper.insert(QStringLiteral("seed"), qint64(workunitSeed(job.spec, unit.id)));
    // Absent when off, so the manifests of jobs without it are as they were.
    if (job.spec.augment.enabled())
        hyper.insert(QStringLiteral("augment"), job.spec.augment.toJson());

    QJsonObject subtask;
    subtask.insert(QStringLiteral("workunit_id"), unit.id);
    subtask.insert(QStringLiteral("epoch"), unit.epoch);
    subtask.insert(QStringLiteral("shard"), unit.shard);
    subtask.insert(QStringLiteral("samples"), shard.samples);

    QJsonObject jobInfo;
    jobInfo.insert(QStringLiteral("id"), job.id);
    jobInfo.insert(QStringLiteral("name"), job.spec.name);

    QJsonObject manifest;
    manifest.insert(QStringLiteral("format"), QStringLiteral("gleaner-manifest/1"));
    manifest.insert(QStringLiteral("coordinator"), m_config.url());
    manifest.insert(QStringLiteral("agent_id"), lease.agentId);
    manifest.insert(QStringLiteral("lease_id"), lease.id);
    manifest.insert(QStringLiteral("nonce"), lease.nonce);
    manifest.insert(QStringLiteral("job"), jobInfo);
    manifest.insert(QStringLiteral("subtask"), subtask);
    manifest.insert(QStringLiteral("base_version"), lease.baseVersion);
    manifest.insert(QStringLiteral("files"), files);
    manifest.insert(QStringLiteral("model"), job.spec.model.toJson());
    manifest.insert(QStringLiteral("hyperparameters"), hyper);
    if (job.spec.upload.isUpdate()) // how to send the result; agents that do not know the key send full weights
        manifest.insert(QStringLiteral("upload"), job.spec.upload.toJson());
    // An agent that holds one of these earlier files fetches the patch instead of the weights file.
    if (!job.published.patches.empty() && job.published.sha256 == lease.weightsSha) {
        QJsonArray patches;
        for (const WeightsPatchRef& patch : job.published.patches)
            patches.append(QJsonObject{{QStringLiteral("from_sha256"), patch.fromSha256},
                                       {QStringLiteral("sha256"), patch.sha256},
                                       {QStringLiteral("size"), patch.size}});
        manifest.insert(QStringLiteral("weights_patches"), patches);
    }
    // The workunit was handed back part-way: this lease resumes from that checkpoint (protocol 6.8). Agents that
    // do not know the key train from step 0 on the same base, which is still a valid result.
    if (!lease.checkpointSha.isEmpty() && unit.resume && unit.resume->sha256 == lease.checkpointSha)
        manifest.insert(QStringLiteral("resume"), QJsonObject{{QStringLiteral("sha256"), unit.resume->sha256},
                                                              {QStringLiteral("size"), unit.resume->size},
                                                              {QStringLiteral("step"), unit.resume->step},
                                                              {QStringLiteral("from_lease"), unit.resume->fromLease}});
    manifest.insert(QStringLiteral("issued_ms"), lease.issuedMs);
    manifest.insert(QStringLiteral("deadline_ms"), lease.deadlineMs);

    const SignedEnvelope envelope =
        SignedEnvelope::sign(m_keys->current(), QJsonDocument(manifest).toJson(QJsonDocument::Compact));
    *signature = envelope.signature;
    return envelope.manifest;
}

HttpResponse Coordinator::lease(const QString& agentId, const QJsonObject& request)
{
    // One transaction for the agent's record, the workunits and the leases: one commit instead of one per
    // row.
    HttpResponse response;
    // Before the lease's transaction, in transactions of their own: each job's lock is taken in the order of
    // the jobs' ids within one transaction, so that two coordinators never wait for each other.
    m_scheduler->expire();
    (void)m_scheduler->takeEmptyClaims();
    for (int attempt = 0;; ++attempt) {
        int granted = 0;
        const Status done = m_db->transaction([&]() -> Status {
            response = leaseInTransaction(agentId, request, granted);
            return {};
        });
        if (!done) {
            qCCritical(lcCoordinator) << "cannot record a lease:" << done.error();
            return HttpResponse::error(
                500, QStringLiteral("the coordinator cannot record the lease; try again later"));
        }
        // A grant in parallel that found nothing pending leaves the next epoch, or a replica, to the job's
        // exclusive lock: asked for once more at once rather than after the agent's retry interval.
        if (granted > 0 || attempt > 0 || !m_scheduler->takeEmptyClaims())
            return response;
    }
}

QJsonObject Coordinator::leaseReply(const QJsonArray& tasks) const
{
    // Every reply names the key in force, so an agent that pinned an older one follows the rotations at once.
    return {{QStringLiteral("tasks"), tasks},
            {QStringLiteral("signing_key"), m_keys->publicKey().fingerprint()}};
}

HttpResponse Coordinator::leaseInTransaction(const QString& agentId, const QJsonObject& request, int& granted)
{
    const auto cannot = [] {
        return HttpResponse::error(
            500, QStringLiteral("the coordinator cannot record the lease; try again later"));
    };
    // The agent's lock where grants run in parallel (nothing is held before it), then every running job's
    // lock, in the order of the jobs' ids, then the agent's row: the order expiry takes them in too, so that
    // two coordinators never wait for each other. Held, they make the agent's open leases below include those
    // other coordinators gave it, and its request at another coordinator wait for this one (the per-agent cap
    // holds across coordinators).
    auto held = m_scheduler->lockAgent(agentId);
    if (!held)
        return cannot();
    int open = *held;
    // Held back while the folds catch up: saying so takes no job's lock, so the requests of agents that wait
    // cost the coordinator little while it is behind.
    const std::optional<QString> heldBack = m_pacer->heldBack();
    if (!heldBack)
        for (auto& [jobId, job] : m_jobs)
            if (job.status == JobStatus::Running)
                if (auto s = m_scheduler->lockForGrant(job); !s)
                    return cannot();
    if (!heldBack && !m_scheduler->grantsInParallel())
        open = m_scheduler->openLeasesOf(agentId); // the picture, which the jobs' locks brought up to date
    // Seen now; the machine its record holds sizes its cap below.
    const QJsonObject hardware = m_enrollment->touch(agentId);
    if (auto why = m_standing->quarantine(agentId)) {
        // No work, and a reason the agent can log; it asks again rarely, until an admin lifts the quarantine.
        QJsonObject reply = leaseReply(QJsonArray());
        reply.insert(QStringLiteral("retry_after"), kRetryWhenQuarantinedSeconds);
        reply.insert(QStringLiteral("quarantined"),
                     QStringLiteral("this agent is quarantined: %1; the coordinator's admin can lift it "
                                    "(gleaner-coordinator agent release ID)")
                         .arg(*why));
        return HttpResponse::json(200, reply);
    }
    if (heldBack)
        return m_pacer->heldBackReply(*heldBack, leaseReply(QJsonArray()));
    const int asked =
        int(std::clamp(request.value(QStringLiteral("max_tasks")).toInteger(1), qint64(1), qint64(kMaxTasksPerLease)));
    QSet<QString> cached;
    for (const auto& value : request.value(QStringLiteral("cached")).toArray())
        cached.insert(value.toString());

    // However often it asks, an agent holds at most its share of the work (see CoordinatorConfig).
    const int room =
        leaseCapFor(agentId, hardware, request.value(QStringLiteral("capabilities")).toObject()) - open;
    if (room <= 0) {
        QJsonObject reply = leaseReply(QJsonArray());
        reply.insert(QStringLiteral("retry_after"), kRetryWhenIdleSeconds);
        return HttpResponse::json(200, reply);
    }
    const int maxTasks = std::min(asked, room);

    QJsonArray tasks;
    bool anyRunning = false;
    bool anyStarting = false;
    for (auto& [jobId, job] : m_jobs) {
        anyStarting = anyStarting || job.status == JobStatus::Created; // importing its data set
        if (job.status != JobStatus::Running)
            continue;
        anyRunning = true;
        if (job.published.version < 0) {
            anyStarting = true;
            continue; // the first weights file is still being written
        }
        while (tasks.size() < maxTasks) {
            auto next = m_scheduler->leaseNext(job, agentId, cached);
            if (!next)
                return cannot();
            if (!*next)
                break;
            ++granted;
            const Lease& lease = **next;
            Workunit* chosen = &job.workunits.at(lease.workunitId);
            m_admission.setLease(lease.id, admissionEntry(job, chosen, lease));

            QByteArray signature;
            const QByteArray manifest = signedManifest(job, *chosen, lease, &signature);
            QJsonObject task;
            task.insert(QStringLiteral("lease_id"), lease.id);
            task.insert(QStringLiteral("deadline_ms"), lease.deadlineMs);
            task.insert(QStringLiteral("manifest"), QString::fromUtf8(manifest));
            task.insert(QStringLiteral("signature"), QString::fromLatin1(signature));
            tasks.append(task);
            m_feed->noteLeased(job, *chosen, lease);
        }
        if (tasks.size() >= maxTasks)
            break;
    }
    QJsonObject reply = leaseReply(tasks);
    if (tasks.isEmpty())
        reply.insert(QStringLiteral("retry_after"), anyStarting  ? kRetryWhenStartingSeconds
                                                    : anyRunning ? kRetryWhenIdleSeconds
                                                                 : kRetryWhenNoJobsSeconds);
    return HttpResponse::json(200, reply);
}

AdmissionCache::LeaseEntry Coordinator::admissionEntry(const JobState& job, const Workunit* unit,
                                                       const Lease& lease) const
{
    AdmissionCache::LeaseEntry entry;
    entry.agentId = lease.agentId;
    entry.maxUploadBytes = job.maxUploadBytes;
    entry.jobId = job.id;
    if (!unit)
        return entry;
    entry.files = {job.files.model.sha256, lease.weightsSha};
    entry.roles = {"model", "weights"};
    if (job.published.sha256 == lease.weightsSha)
        for (const WeightsPatchRef& patch : job.published.patches) {
            entry.files << patch.sha256;
            entry.roles << "weights-patch";
        }
    if (unit->shard >= 0 && unit->shard < job.files.shards.size()) {
        entry.files << job.files.shards.at(unit->shard).sha256;
        entry.roles << "shard";
    }
    if (!lease.checkpointSha.isEmpty()) {
        entry.files << lease.checkpointSha;
        entry.roles << "checkpoint";
    }
    return entry;
}

QJsonObject Coordinator::checkedCapabilities(const QJsonObject& declared)
{
    // What an agent says of its machine is shown to the admin and caps its leases: only plain values in sane
    // ranges are kept, the rest is dropped (an agent that lies about its cores lowers its own cap, or raises it
    // to max_leases_per_agent at most).
    QJsonObject kept;
    const auto integer = [&](const char* key, qint64 max) {
        const QJsonValue value = declared.value(QLatin1String(key));
        if (value.isDouble() && value.toInteger(-1) >= 1 && value.toInteger(-1) <= max)
            kept.insert(QLatin1String(key), value.toInteger());
    };
    const auto text = [&](const char* key, qsizetype max) {
        const QJsonValue value = declared.value(QLatin1String(key));
        if (value.isString() && !value.toString().trimmed().isEmpty() && value.toString().size() <= max)
            kept.insert(QLatin1String(key), value.toString().trimmed());
    };
    integer("cores", 4096);
    integer("ram_mb", qint64(1) << 32);
    integer("gpus", 64);
    integer("threads", 4096);
    text("gpu", 200);
    text("device", 32);
    text("arch", 32);
    // What the agent is (docs/clusters.md): shown to the admin, one of a few words.
    const QString kind = declared.value(QStringLiteral("kind")).toString();
    if (kind == u"desktop" || kind == u"dedicated" || kind == u"batch" || kind == u"cloud")
        kept.insert(QStringLiteral("kind"), kind);
    if (declared.value(QStringLiteral("dedicated")).isBool())
        kept.insert(QStringLiteral("dedicated"), declared.value(QStringLiteral("dedicated")).toBool());
    return kept;
}

int Coordinator::leaseCapFor(const QString& agentId, const QJsonObject& hardware, const QJsonObject& declared)
{
    // The lease request carries the machine as it is now (a GPU added, memory changed): the record follows.
    QJsonObject merged = hardware;
    const QJsonObject kept = checkedCapabilities(declared);
    for (auto it = kept.begin(); it != kept.end(); ++it)
        merged.insert(it.key(), it.value());
    if (merged != hardware)
        (void)m_db->exec(QStringLiteral("UPDATE agents SET hardware = ? WHERE id = ?"),
                         {QString::fromUtf8(QJsonDocument(merged).toJson(QJsonDocument::Compact)), agentId});
    const int cores = merged.value(QStringLiteral("cores")).toInt();
    return cores > 0 ? std::min(m_config.maxLeasesPerAgent, 2 * cores) : m_config.maxLeasesPerAgent;
}

HttpResponse Coordinator::leaseNotInMemory(const QString& agentId, const QString& leaseId) const
{
    // Closed leases leave memory; the admission cache still knows why, also across restarts.
    const auto known = m_admission.lease(leaseId);
    if (known && known->agentId == agentId && !known->closedReason.isEmpty())
        return HttpResponse::error(409, known->closedReason);
    if (auto left =
            leaseLeftToOthers(agentId, leaseId)) // the agent tries again, perhaps at another coordinator
        return *left;
    return HttpResponse::error(
        404, QStringLiteral("lease %1 is not known (or its job has finished)").arg(leaseId));
}

HttpResponse Coordinator::progress(const QString& agentId, const QString& leaseId, const QJsonObject& report)
{
    Lease* lease = findLease(leaseId);
    if (!lease)
        return leaseNotInMemory(agentId, leaseId);
    if (lease->agentId != agentId)
        return HttpResponse::error(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
    m_enrollment->touch(agentId);
    QJsonObject reply;
    JobState* job = findJob(lease->jobId);
    if (lease->state == Lease::State::Completed)
        return HttpResponse::error(
            409, QStringLiteral("lease %1 is closed: its result was already received").arg(leaseId));
    if (lease->state == Lease::State::Refused)
        return HttpResponse::error(
            409, QStringLiteral("lease %1 is closed: its result was refused as invalid").arg(leaseId));
    const auto abort = [&](const QString& reason) {
        reply.insert(QStringLiteral("abort"), true);
        reply.insert(QStringLiteral("reason"), reason);
        return HttpResponse::json(200, reply);
    };
    // A paused job keeps the work already handed out: only an ended job makes training pointless.
    if (!job || (job->status != JobStatus::Running && job->status != JobStatus::Paused))
        return abort(job ? QStringLiteral("job %1 is %2").arg(job->id).arg(jobStatusName(job->status))
                         : QStringLiteral("the job no longer exists"));
    const auto doneUnit = job->workunits.find(lease->workunitId);
    if (lease->state == Lease::State::Expired && doneUnit != job->workunits.end() &&
        doneUnit->second.state == Workunit::State::Done)
        return abort(QStringLiteral("the lease expired and its workunit was completed by another agent"));
    // An expired lease is not revived: its workunit may already be another agent's. A late result still counts
    // once (see result()).
    if (lease->state == Lease::State::Expired) {
        reply.insert(QStringLiteral("abort"), false);
        reply.insert(QStringLiteral("expired"), true);
        reply.insert(QStringLiteral("deadline_ms"), lease->deadlineMs);
        return HttpResponse::json(200, reply);
    }
    // Progress extends a lease, reports alone do not: a lease whose step stopped moving (an owner's pause, or an
    // agent sitting on work) is kept one more deadline after it last moved, then expires. And no lease lives
    // longer than lease_lifetime_deadlines deadlines in all, however it reports.
    const QJsonValue stepValue = report.value(QStringLiteral("step"));
    const qint64 step = stepValue.isDouble() ? stepValue.toInteger(-1) : -1;
    if (auto s = m_scheduler->progressed(*lease, *job, step); !s)
        qCCritical(lcCoordinator) << "cannot record the deadline of lease" << leaseId << ":" << s.error();
    lease = m_scheduler->find(leaseId); // another coordinator may have closed it meanwhile
    if (!lease)
        return leaseNotInMemory(agentId, leaseId);
    reply.insert(QStringLiteral("abort"), false);
    reply.insert(QStringLiteral("deadline_ms"), lease->deadlineMs);
    return HttpResponse::json(200, reply);
}

void Coordinator::onLeaseExpired(const Lease& lease, const JobState* job)
{
    m_feed->noteLeaseExpired(lease);
    // Work that an ended job no longer wanted is not the agent's failure.
    if (job && (job->status == JobStatus::Running || job->status == JobStatus::Paused))
        m_enrollment->recordOutcome(lease.agentId, "timed_out");
}

void Coordinator::removeRetiredWeights(const QSet<QString>& alsoNeeded)
{
    // A weights file is published about once a second while updates flow: without this, a busy job would fill
    // the disk with 20 MB files nobody will download again. Blobs are shared by content across jobs (two jobs
    // with the same model and seed publish identical files), so what is needed is collected over all of them.
    QSet<QString> needed = alsoNeeded;
    for (const Lease& lease : m_scheduler->leases())
        if (lease.state == Lease::State::Open || lease.state == Lease::State::Expired)
            needed.insert(lease.weightsSha);
    for (const auto& [id, job] : m_jobs) {
        for (const auto& [unitId, unit] : job.workunits) // the next lease of a handed-back workunit trains from it
            if (unit.resume)
                needed.insert(unit.resume->weightsSha);
        needed.insert(job.published.sha256);
        needed.insert(job.snapshotSha);
        needed.insert(job.snapshotRuleSha);
        for (const auto& [seq, base] : job.basesInFlight)
            needed.insert(base);
        needed.insert(job.files.initialWeights.sha256);
    }
    for (auto& [id, job] : m_jobs) {
        auto keep = std::remove_if(job.retired.begin(), job.retired.end(), [&](const PublishedWeights& old) {
            if (needed.contains(old.sha256))
                return false;
            QFile::remove(m_blobs.path(old.sha256));
            // A patch to a file nobody is handed any more is of no use either.
            for (const WeightsPatchRef& patch : old.patches)
                if (!needed.contains(patch.sha256))
                    QFile::remove(m_blobs.path(patch.sha256));
            return true;
        });
        job.retired.erase(keep, job.retired.end());
    }
}

void Coordinator::tick()
{
    m_pacer->answerParked(); // those whose publication did not come in time (a weights thread busy with a
                             // backlog)
    for (auto& [id, job] : m_jobs) // what a job's lock showed since the last tick (Scheduler::lockJob)
        if (job.endedElsewhere) {
            const auto [status, reason] = *job.endedElsewhere; // a copy: finishJob clears it
            finishJob(job, status, reason, /*persist=*/false);
        }
    m_scheduler->expire();
    const qint64 now = m_clock.nowMs();
    const bool keeper = m_db->holdsHousekeeping();
    if (keeper != m_housekeeper && m_config.isShared())
        qCInfo(lcCoordinator) << (keeper ? "this coordinator does the deployment's housekeeping now"
                                         : "another coordinator does the deployment's housekeeping now");
    // Taking the housekeeping over: the validations the last housekeeper made since the last look are not
    // made again.
    if (keeper && !m_housekeeper && m_config.isShared())
        followValidations();
    m_housekeeper = keeper;
    m_weights->keepSnapshots(keeper);
    if (m_config.isShared()) {
        keepSharedHouse(now);
    } else {
        removeRetiredWeights();
        m_handBacks->removeUnused();
        if (auto s = m_tallies->flushIfDue(now); !s)
            qCWarning(lcCoordinator) << "cannot store the file bytes sent (tried again in a moment):" << s.error();
    }
    for (auto& [id, job] : m_jobs) {
        if (job.status != JobStatus::Running && job.status != JobStatus::Paused)
            continue;
        // Among several coordinators, the others' folds move the weights as well: each one publishes what the
        // shared copy holds (a publication that finds no new version writes nothing).
        if ((job.published.version < job.updatesApplied || m_config.isShared()) &&
            now - job.published.atMs >= qint64(m_config.publishIntervalMs))
            m_weights->publish(id);
        m_weights->snapshot(id, false); // the housekeeper's only (WeightsKeeper::keepSnapshots)
        scheduleValidations(job);       // retries a validation that failed
        m_scheduler->openNextEpochIfReady(job);
    }
    const WeightsKeeper::Backlog backlog = m_weights->backlog();
    m_metrics.foldBacklog(backlog.updates, backlog.bytes);
    m_feed->publishDashboardState();
}

} // namespace gleaner::coordinator
