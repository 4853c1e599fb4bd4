#include "lifecycle/JobTakeUp.h"

#include "admission/AdmissionCache.h"
#include "config/DataDirectory.h"
#include "format/SafeTensors.h"
#include "intake/HandBacks.h"
#include "leasing/LeaseManifest.h"
#include "lifecycle/JobRecords.h"
#include "scheduling/Scheduler.h"
#include "scheduling/SchedulerTables.h"
#include "store/Database.h"
#include "store/JobTallies.h"
#include "util/SerialExecutor.h"
#include "validation/ValidationRunner.h"

#include <QDir>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QScopeGuard>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcJobs)

namespace gleaner::coordinator {

JobTakeUp::JobTakeUp(Parts parts, const CoordinatorConfig& config, const Clock& clock, QString scratch,
                     QString storage, Hooks hooks)
    : m_parts(parts), m_config(config), m_clock(clock), m_scratch(std::move(scratch)),
      m_storage(std::move(storage)), m_hooks(std::move(hooks))
{
}

JobState* JobTakeUp::findJob(qint64 jobId)
{
    auto found = m_parts.jobs.find(jobId);
    return found == m_parts.jobs.end() ? nullptr : &found->second;
}

bool JobTakeUp::mayTryAgain(qint64 jobId) const
{
    const auto left = m_left.find(jobId);
    return left == m_left.end() || m_clock.nowMs() >= left->second.retryAtMs;
}

void JobTakeUp::servedAgain(qint64 jobId)
{
    if (m_left.erase(jobId) == 0)
        return;
    m_parts.leftCount = int(m_left.size());
    qCInfo(lcJobs) << "job" << jobId << "is served here again";
}

Status JobTakeUp::loadAll(bool importHere)
{
    auto jobs = m_parts.records.selectAll();
    if (!jobs)
        return fail(jobs.error());
    while (jobs->next()) {
        JobState job = m_parts.records.fromRow(*jobs);
        m_parts.jobs.emplace(job.id, std::move(job));
    }
    // A job whose import a stop interrupted is imported again; among several coordinators, by the
    // housekeeper.
    std::vector<qint64> leftToOthers;
    for (auto& [id, job] : m_parts.jobs)
        if (!prepare(job, importHere))
            leftToOthers.push_back(id);
    for (const qint64 id : leftToOthers)
        m_parts.jobs.erase(id);

    // Closed leases keep answering 409 with their reason after a restart, before an upload's body is read:
    // an agent that lost a 202 in the crash learns that its result counted.
    auto closed =
        m_parts.db.exec(QStringLiteral("SELECT l.id, l.agent_id, l.state, w.job_id FROM leases l JOIN "
                                       "workunits w ON w.id = l.workunit_id WHERE l.state IN ('completed', "
                                       "'refused', 'failed', 'handed_back')"));
    while (closed && closed->next()) {
        const QString id = closed->value(0).toString();
        const auto state = leaseStateFromName(closed->value(2).toString()).value_or(Lease::State::Refused);
        m_parts.admission.setLease(
            id, {closed->value(1).toString(), 0, closedLeaseMessage(id, state), {}, {}, 0});
    }
    for (const Lease& lease : m_parts.scheduler.leases()) {
        const JobState* job = findJob(lease.jobId);
        if (job && job->status != JobStatus::Running && job->status != JobStatus::Paused)
            m_parts.admission.setLease(lease.id, {lease.agentId,
                                                  0,
                                                  QStringLiteral("job %1 is %2 and takes no more results")
                                                      .arg(job->id)
                                                      .arg(jobStatusName(job->status)),
                                                  {},
                                                  {},
                                                  job->id});
    }
    return {};
}

bool JobTakeUp::prepare(JobState& job, bool importHere)
{
    const qint64 id = job.id;
    m_parts.records.loadHistory(job);
    if (auto counts = m_parts.tallies.load(id))
        job.counts = *counts;
    else
        qCWarning(lcJobs) << "job" << id
                          << "cannot read its counts (read again in a moment):" << counts.error();
    job.intermediateValidatedAt = job.counts.updatesReceived;

    if (job.status == JobStatus::Created) {
        if (importHere)
            importWhenUnclaimed(id);
        return true;
    }
    if (job.status != JobStatus::Running && job.status != JobStatus::Paused) {
        // A finished job's weights are its last snapshot, written when it ended: `job status` and `job list`
        // show that version after a restart as they did before it.
        auto snapshot =
            m_parts.db.exec(QStringLiteral("SELECT version FROM snapshots WHERE job_id = ?"), {id});
        if (snapshot && snapshot->next())
            job.updatesApplied = snapshot->value(0).toLongLong();
        return true;
    }

    // Everything that can fail is read before anything acts on the job. Alone, a job whose work or weights
    // cannot be read fails. Among several coordinators they are the deployment's, and what failed is likely
    // this coordinator's (its mount of the shared folder, its connection): the job is left to the others
    // here, and taken up at a later look.
    const auto cannotTakeUp = [&](const QString& why) {
        if (!m_config.isShared()) {
            m_hooks.finish(job, JobStatus::Failed, why, true);
            return true;
        }
        leaveToOthers(id, why);
        return false;
    };
    auto shards = m_parts.db.exec(
        QStringLiteral("SELECT idx, sha256, bytes, samples FROM shards WHERE job_id = ? ORDER "
                       "BY idx"),
        {id});
    if (!shards)
        return cannotTakeUp(QStringLiteral("cannot read the job's shards: %1").arg(shards.error()));
    QList<ShardRef> shardRefs;
    while (shards->next())
        shardRefs.append({shards->value(0).toInt(), shards->value(1).toString(),
                          shards->value(2).toLongLong(), shards->value(3).toLongLong()});
    shards->finish();
    // Workunits, their first results and the leases that may still deliver, as the scheduler's tables
    // hold them.
    auto stored = m_parts.schedulerTables.loadJob(id);
    if (!stored)
        return cannotTakeUp(QStringLiteral("cannot read the job's work: %1").arg(stored.error()));
    // Alone, the job's work is adopted before it fails: its leases are closed with the job's state (409).
    const auto cannotSetGoing = [&](const QString& why) {
        if (!m_config.isShared())
            m_parts.scheduler.adopt(job, *stored);
        return cannotTakeUp(why);
    };

    // The server weights: the last snapshot (or the initial weights), then every update received after it.
    QString weightsSha = job.files.initialWeights.sha256;
    QString ruleSha;
    qint64 version = 0;
    qint64 lastSeq = 0;
    auto snapshot = m_parts.db.exec(
        QStringLiteral("SELECT version, last_seq, sha256, rule_sha FROM snapshots WHERE job_id = ?"), {id});
    if (!snapshot)
        return cannotSetGoing(QStringLiteral("cannot read the job's snapshot: %1").arg(snapshot.error()));
    const bool snapshotted = snapshot->next();
    if (snapshotted) {
        version = snapshot->value(0).toLongLong();
        lastSeq = snapshot->value(1).toLongLong();
        weightsSha = snapshot->value(2).toString();
        ruleSha = snapshot->value(3).toString();
    }
    snapshot->finish();
    auto weights = SafeTensors::load(m_parts.blobs.path(weightsSha));
    if (!weights)
        return cannotSetGoing(QStringLiteral("cannot read the job's weights: %1").arg(weights.error()));
    Result<TensorBundle> schema = *weights;
    if (weightsSha != job.files.initialWeights.sha256)
        schema = SafeTensors::load(m_parts.blobs.path(job.files.initialWeights.sha256));
    if (!schema)
        return cannotSetGoing(QStringLiteral("cannot read the initial weights: %1").arg(schema.error()));
    // Updates refused at their fold stay out; the rest after the snapshot are folded in again, in order.
    auto replay = updatesToReplay(job, lastSeq, version);
    if (!replay)
        return cannotSetGoing(
            QStringLiteral("cannot read the job's received updates: %1").arg(replay.error()));
    TensorBundle ruleState;
    if (!ruleSha.isEmpty()) {
        auto state = SafeTensors::load(m_parts.blobs.path(ruleSha));
        if (state)
            ruleState = std::move(*state);
        else if (m_config.isShared()) // another coordinator may read it
            return cannotSetGoing(
                QStringLiteral("cannot read the state of its aggregation rule: %1").arg(state.error()));
        else // alone, the rule starts afresh from the snapshot's weights
            qCCritical(lcJobs) << "job" << id
                               << "cannot read the state of its aggregation rule:" << state.error();
    }

    job.files.shards = std::move(shardRefs);
    job.files.model.size = m_parts.blobs.size(job.files.model.sha256);
    if (snapshotted) {
        job.snapshotSha = weightsSha;
        job.snapshotRuleSha = ruleSha;
    }
    m_parts.scheduler.adopt(job, *stored);
    for (const auto& [unitId, unit] : job.workunits)
        if (unit.resume)
            m_parts.handBacks.keep(unit.resume->sha256, unit.resume->size);
    for (const Lease& lease : stored->leases)
        if (!lease.checkpointSha.isEmpty())
            m_parts.handBacks.keep(lease.checkpointSha,
                                   std::max<qint64>(0, m_parts.blobs.size(lease.checkpointSha)));
    activate(job, *weights, std::move(*schema), version, std::move(*replay), std::move(ruleState));
    return true;
}

Result<std::vector<ReplayedUpdate>>
JobTakeUp::updatesToReplay(JobState& job, qint64 afterSeq, qint64 snapshotVersion, qint64 receivedBeforeMs)
{
    // Alone, the snapshot holds every update up to its last_seq. Among several coordinators, updates are
    // folded in another order than their numbers: the snapshot holds those folded at its version or before,
    // and a file is kept until one does (FoldReports::snapshotWritten). Folding again what Redis holds is a
    // no-op (SharedWeights).
    QString where = QStringLiteral("u.job_id = ? AND u.seq > ? AND u.fold_error = ''");
    QVariantList bound{job.id, afterSeq};
    if (m_config.isShared()) {
        where = QStringLiteral(
            "u.job_id = ? AND u.fold_error = '' AND u.file != '' AND (u.applied_version IS NULL "
            "OR u.applied_version > ?)");
        bound = {job.id, snapshotVersion};
        if (receivedBeforeMs > 0) {
            where += QStringLiteral(" AND u.applied_version IS NULL AND u.received_ms < ?");
            bound << receivedBeforeMs;
        }
    }
    std::vector<ReplayedUpdate> replay;
    auto rows = m_parts.db.exec(
        QStringLiteral("SELECT u.seq, u.file, u.epoch, u.base_version, u.applied_version IS NOT "
                       "NULL, l.weights_sha, u.concurrency FROM updates u LEFT JOIN leases l ON "
                       "l.id = u.lease_id WHERE %1 ORDER BY u.seq")
            .arg(where),
        bound);
    if (!rows)
        return fail(rows.error());
    while (rows->next()) {
        ReplayedUpdate update;
        update.seq = rows->value(0).toLongLong();
        update.file = m_storage + u'/' + rows->value(1).toString();
        update.context = UpdateContext{rows->value(2).toInt(), rows->value(3).toLongLong(), 0};
        update.appliedBefore = rows->value(4).toBool();
        update.baseSha = rows->value(5).toString();
        update.context.concurrency = std::max(1, rows->value(6).toInt());
        update.context.updatesPerEpoch = job.spec.shards;
        if (job.spec.aggregation.usesPseudoGradients() || job.spec.upload.isUpdate())
            job.basesInFlight.emplace(update.seq, update.baseSha);
        replay.push_back(std::move(update));
    }
    return replay;
}

void JobTakeUp::activate(JobState& job, const TensorBundle& weights, TensorBundle schema, qint64 version,
                         std::vector<ReplayedUpdate> replay, TensorBundle ruleState)
{
    job.schema = std::move(schema);
    job.schema.metadata().clear();
    job.maxUploadBytes = UpdateChecker::maxUploadBytes(job.schema);
    for (const Lease& lease : m_parts.scheduler.leases()) {
        if (lease.jobId != job.id)
            continue;
        auto unit = job.workunits.find(lease.workunitId);
        m_parts.admission.setLease(
            lease.id,
            LeaseManifest::admissionEntry(job, unit == job.workunits.end() ? nullptr : &unit->second, lease));
    }

    // The bound on uploads is learnt again from the job's last accepted updates.
    auto steps = m_parts.db.exec(
        QStringLiteral("SELECT step FROM (SELECT seq, step FROM updates WHERE job_id = ? AND step "
                       "IS NOT NULL AND fold_error = '' ORDER BY seq DESC LIMIT ?) AS recent "
                       "ORDER BY seq"),
        {job.id, UpdateBound::kWindow});
    while (steps && steps->next())
        job.updateBound.accept(steps->value(0).toDouble());

    // The version moves as the weights thread reports each replayed update applied (FoldReports::applied).
    job.updatesApplied = version;
    m_parts.weights.load(job.id, weights, version, job.spec.aggregation, std::move(ruleState),
                         std::move(replay), job.spec.download);
    m_parts.validation.setTestSet(job.id, m_parts.blobs.path(job.files.testSet.sha256), job.spec.model);
    // Epochs that completed before a restart but were never validated: validated once the replay is done.
    m_hooks.scheduleValidations(job);
    m_parts.weights.publish(job.id);
    if (job.epoch == 0)
        (void)m_parts.scheduler.createEpoch(job, 1);
}

void JobTakeUp::importWhenUnclaimed(qint64 jobId)
{
    if (m_importing.count(jobId))
        return;
    auto claimed = m_parts.db.claimImport(jobId);
    if (!claimed)
        qCWarning(lcJobs) << "cannot claim job" << jobId
                          << "for its import (tried again later):" << claimed.error();
    else if (*claimed)
        startImport(jobId);
}

void JobTakeUp::startImport(qint64 jobId)
{
    m_importing.insert(jobId);
    const JobSpec spec = m_parts.jobs.at(jobId).spec;
    const QString scratch = QDir(m_scratch).filePath(QStringLiteral("import-%1").arg(jobId));
    m_parts.importer.post([this, jobId, spec, scratch] {
        auto imported = JobImporter::import(spec, m_parts.blobs, scratch);
        QDir(scratch).removeRecursively();
        m_parts.state.post([this, jobId, imported = std::move(imported)]() mutable {
            onImported(jobId, std::move(imported));
        });
    });
}

void JobTakeUp::onImported(qint64 jobId, Result<ImportedJob> imported)
{
    // Given back once the outcome is recorded (the job running, or failed): a housekeeper that claims it
    // later finds the job no longer `created`.
    const auto release = qScopeGuard([&] {
        m_importing.erase(jobId);
        m_parts.db.releaseImport(jobId);
    });
    JobState* job = findJob(jobId);
    if (!job || job->status != JobStatus::Created)
        return;
    // Whatever this coordinator decides, it decides only while the stored job is still `created`: another
    // coordinator may have imported it meanwhile (this one's import lock went with a lost connection) or
    // cancelled it. followJobs then brings the job as the database has it.
    // The job is taken up as stored at once (this invalidates `job`): the job's lock just brought its leases
    // into a picture that still says `created`, which would refuse their results until the next look.
    const auto importedElsewhere = [&](JobStatus stored) {
        qCInfo(lcJobs) << "job" << jobId << "is" << jobStatusName(stored)
                       << "in the database (set by another coordinator): this import is dropped";
        if (m_config.isShared())
            m_hooks.followJobs();
    };
    const auto failImport = [&](const QString& why) {
        auto refusedBy = m_parts.records.switchStatus(*job, {JobStatus::Created}, JobStatus::Failed, why);
        if (!refusedBy)
            qCCritical(lcJobs)
                << "job" << jobId << "cannot store that its import failed (it is imported again at the"
                << "housekeeper's next look among several coordinators, else at the next start):"
                << refusedBy.error() << "- the import:" << why;
        else if (*refusedBy)
            importedElsewhere(**refusedBy);
        else
            m_hooks.finish(*job, JobStatus::Failed, why, /*persist=*/false);
    };
    if (!imported) {
        failImport(imported.error());
        return;
    }
    auto weights = SafeTensors::load(m_parts.blobs.path(imported->initialWeights.sha256));
    if (!weights) {
        failImport(weights.error());
        return;
    }
    JobSpec spec = job->spec;
    spec.model = imported->modelSpec;
    // The switch to `running` and what the job runs on, in one transaction, before anything acts on it.
    auto refusedBy =
        m_parts.records.switchStatus(*job, {JobStatus::Created}, JobStatus::Running, {}, [&]() -> Status {
            for (const ShardRef& shard : imported->shards)
                if (auto r = m_parts.db.exec(
                        QStringLiteral("INSERT INTO shards (job_id, idx, sha256, bytes, samples) VALUES "
                                       "(?, ?, ?, ?, ?) ON CONFLICT (job_id, idx) DO UPDATE SET sha256 = "
                                       "excluded.sha256, bytes = excluded.bytes, samples = excluded.samples"),
                        {jobId, shard.index, shard.sha256, shard.bytes, shard.samples});
                    !r)
                    return fail(r.error());
            // The spec is stored as the job runs it: a TorchScript archive named by content from here on.
            auto r = m_parts.db.exec(
                QStringLiteral(
                    "UPDATE jobs SET model_sha = ?, initial_sha = ?, test_sha = ?, spec = ? WHERE id = ?"),
                {imported->model.sha256, imported->initialWeights.sha256, imported->testSet.sha256,
                 QString::fromUtf8(QJsonDocument(spec.toJson()).toJson(QJsonDocument::Compact)), jobId});
            return r ? Status() : fail(r.error());
        });
    if (!refusedBy) {
        failImport(QStringLiteral("cannot store the job's shards: %1").arg(refusedBy.error()));
        return;
    }
    if (*refusedBy) {
        importedElsewhere(**refusedBy);
        return;
    }
    job->files = *imported;
    job->spec = spec;
    for (const QString& note : std::as_const(imported->notes))
        qCInfo(lcJobs).noquote() << "job" << jobId << "dataset:" << note;
    job->status = JobStatus::Running;
    activate(*job, *weights, *weights, 0, {},
             {}); // the initial weights are the schema too; nothing to replay
    qCInfo(lcJobs) << "job" << jobId << "imported:" << job->files.shards.size() << "shards; running";
}

void JobTakeUp::leaveToOthers(qint64 jobId, const QString& why)
{
    // Whatever a lock of the job brought into this coordinator's picture (its leases, while it was `created`
    // here) goes with it: nothing here expires or answers for them.
    for (const QString& lease : m_parts.scheduler.drop(jobId))
        m_parts.admission.removeLease(lease);
    Left& left = m_left[jobId];
    m_parts.leftCount = int(m_left.size());
    const bool again = left.reason == why;
    // From the shared look's period to a minute while it keeps failing: each try reads the job's rows and
    // weights.
    left.waitMs = std::clamp<qint64>(left.waitMs * 2, 2'000, 60'000);
    left.retryAtMs = m_clock.nowMs() + left.waitMs;
    left.reason = why;
    if (!again)
        qCCritical(lcJobs).noquote()
            << QStringLiteral(
                   "job %1 is left to the deployment's other coordinators: this one cannot take it up "
                   "(it tries again, every 2 s at first, then up to a minute apart): %2")
                   .arg(jobId)
                   .arg(why);
}

HttpResponse JobTakeUp::noSuchJob(qint64 jobId) const
{
    if (auto left = m_left.find(jobId); left != m_left.end())
        return HttpResponse::error(
            503,
            QStringLiteral("job %1 is not served by this coordinator at the moment (%2); the deployment's "
                           "other coordinators serve it, and this one tries again shortly")
                .arg(jobId)
                .arg(left->second.reason));
    return HttpResponse::error(404, QStringLiteral("no job has id %1").arg(jobId));
}

std::optional<HttpResponse> JobTakeUp::leaseLeftToOthers(const QString& agentId, const QString& leaseId) const
{
    if (m_left.empty())
        return std::nullopt;
    // The agent's lease, or any lease it holds open: a file may be of any of them.
    auto rows = m_parts.db.exec(
        QStringLiteral("SELECT w.job_id FROM leases l JOIN workunits w ON w.id = l.workunit_id "
                       "WHERE l.agent_id = ? AND %1")
            .arg(leaseId.isEmpty() ? QStringLiteral("l.state = 'open'") : QStringLiteral("l.id = ?")),
        leaseId.isEmpty() ? QVariantList{agentId} : QVariantList{agentId, leaseId});
    while (rows && rows->next()) {
        const qint64 jobId = rows->value(0).toLongLong();
        if (m_left.count(jobId))
            return HttpResponse::error(
                503, QStringLiteral("job %1 is not served by this coordinator at the moment; "
                                    "try again shortly (the deployment's other coordinators "
                                    "serve it)")
                         .arg(jobId));
    }
    return std::nullopt;
}

} // namespace gleaner::coordinator
