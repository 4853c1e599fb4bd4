// Coordinator: jobs (submit, start, status, validation, completion) and restoring state at start.
#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "format/SafeTensors.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "store/SchedulerTables.h"
#include "validation/ValidationRunner.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {
QString Coordinator::jobColumns()
{
    return QStringLiteral("id, spec, state, reason, created_ms, epoch, model_sha, initial_sha, test_sha");
}

JobState* Coordinator::findJob(qint64 jobId)
{
    auto it = m_jobs.find(jobId);
    return it == m_jobs.end() ? nullptr : &it->second;
}

Status Coordinator::persistJob(const JobState& job)
{
    const bool finished = job.status == JobStatus::Completed || job.status == JobStatus::Failed
                          || job.status == JobStatus::Cancelled;
    const QVariant accuracy = job.history.empty() ? QVariant() : QVariant(job.history.back().accuracy);
    const QVariant loss = job.history.empty() ? QVariant() : QVariant(job.history.back().loss);
    // An ended job stays ended: among several coordinators, one may pause a job that another has just
    // completed.
    auto updated =
        m_db->exec(QStringLiteral("UPDATE jobs SET state = ?, reason = ?, epoch = ?, accuracy = ?, loss = "
                                  "?, finished_ms = ? WHERE id = ? AND state NOT IN ('completed', "
                                  "'failed', 'cancelled')"),
                   {jobStatusName(job.status), job.reason, job.epoch, accuracy, loss,
                    finished ? QVariant(m_clock.nowMs()) : QVariant(), job.id});
    return updated ? Status() : fail(updated.error());
}

Result<std::optional<JobStatus>> Coordinator::switchJobStatus(JobState& job,
                                                              const std::vector<JobStatus>& from,
                                                              JobStatus to, const QString& reason,
                                                              const std::function<Status()>& alongside)
{
    std::optional<JobStatus> refusedBy;
    const Status stored = m_db->transaction([&]() -> Status {
        refusedBy.reset();
        if (auto s = m_scheduler->lockJob(job); !s)
            return s;
        auto row = m_db->exec(QStringLiteral("SELECT state FROM jobs WHERE id = ?"), {job.id});
        if (!row)
            return fail(row.error());
        if (!row->next())
            return fail(QStringLiteral("job %1 is not in the database").arg(job.id));
        const auto status = jobStatusFromName(row->value(0).toString()).value_or(JobStatus::Failed);
        if (std::find(from.begin(), from.end(), status) == from.end()) {
            refusedBy = status;
            return {};
        }
        if (alongside)
            if (auto s = alongside(); !s)
                return s;
        const bool ends = to == JobStatus::Completed || to == JobStatus::Failed || to == JobStatus::Cancelled;
        auto updated =
            m_db->exec(QStringLiteral("UPDATE jobs SET state = ?, reason = ?, finished_ms = ? WHERE id = ?"),
                       {jobStatusName(to), reason, ends ? QVariant(m_clock.nowMs()) : QVariant(), job.id});
        return updated ? Status() : fail(updated.error());
    });
    if (!stored)
        return fail(stored.error());
    return refusedBy;
}

JobState Coordinator::jobFromRow(const QSqlQuery& row) const
{
    JobState job;
    job.id = row.value(0).toLongLong();
    auto spec = JobSpec::fromJsonText(row.value(1).toByteArray());
    job.status = jobStatusFromName(row.value(2).toString()).value_or(JobStatus::Failed);
    job.reason = row.value(3).toString();
    if (spec) {
        job.spec = *spec;
    } else {
        // One job this version cannot read must not keep the others from running.
        job.spec.name = QStringLiteral("job %1").arg(job.id);
        job.status = JobStatus::Failed;
        job.reason =
            QStringLiteral("its stored spec is not valid for this coordinator version: %1").arg(spec.error());
        qCCritical(lcCoordinator) << "job" << job.id << job.reason;
    }
    job.createdMs = row.value(4).toLongLong();
    job.epoch = row.value(5).toInt();
    job.files.model.sha256 = row.value(6).toString();
    job.files.initialWeights.sha256 = row.value(7).toString();
    job.files.testSet.sha256 = row.value(8).toString();
    if (job.spec.model.arch == Architecture::TorchScript && !job.spec.model.archiveSha256().isEmpty())
        job.spec.model.archivePath = m_blobs.path(job.spec.model.archiveSha256());
    return job;
}

void Coordinator::loadHistory(JobState& job)
{
    auto history =
        m_db->exec(QStringLiteral("SELECT epoch, epoch_end, version, updates, accuracy, loss, at_ms FROM "
                                  "validations WHERE job_id = ? ORDER BY at_ms, version"),
                   {job.id});
    if (!history) {
        qCWarning(lcCoordinator) << "cannot read the validations of job" << job.id << ":" << history.error();
        return;
    }
    job.history.clear();
    while (history->next()) {
        const bool epochEnd = history->value(1).toInt() != 0;
        job.history.push_back({history->value(0).toInt(), epochEnd, history->value(2).toLongLong(),
                               history->value(3).toLongLong(), history->value(4).toDouble(),
                               history->value(5).toDouble(), history->value(6).toLongLong()});
        if (epochEnd)
            job.validatedEpochs.insert(history->value(0).toInt());
    }
    while (job.validatedEpochs.count(job.validatedEpoch + 1))
        ++job.validatedEpoch;
}

bool Coordinator::prepareJob(JobState& job, bool importHere)
{
    const qint64 id = job.id;
    loadHistory(job);
    auto counts = m_db->exec(QStringLiteral("SELECT COUNT(*), COALESCE(SUM(upload_bytes), 0), "
                                            "COUNT(NULLIF(upload_bytes, 0)) FROM updates WHERE job_id = ?"),
                             {id});
    if (counts && counts->next()) {
        job.updatesReceived = counts->value(0).toLongLong();
        job.uploadedBytes = qint64(counts->value(1).toDouble());
        job.uploadsCounted = counts->value(2).toLongLong();
    }

    if (job.status == JobStatus::Created) {
        if (importHere)
            importWhenUnclaimed(id);
        return true;
    }
    if (job.status != JobStatus::Running && job.status != JobStatus::Paused) {
        // A finished job's weights are its last snapshot, written when it ended: `job status` and `job list`
        // show that version after a restart as they did before it.
        auto snapshot = m_db->exec(QStringLiteral("SELECT version FROM snapshots WHERE job_id = ?"), {id});
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
            finishJob(job, JobStatus::Failed, why);
            return true;
        }
        leaveJobToOthers(id, why);
        return false;
    };
    auto shards =
        m_db->exec(QStringLiteral("SELECT idx, sha256, bytes, samples FROM shards WHERE job_id = ? ORDER "
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
    auto stored = m_schedulerTables->loadJob(id);
    if (!stored)
        return cannotTakeUp(QStringLiteral("cannot read the job's work: %1").arg(stored.error()));

    // The server weights: the last snapshot (or the initial weights), then every update received after it.
    QString weightsSha = job.files.initialWeights.sha256;
    QString ruleSha;
    qint64 version = 0;
    qint64 lastSeq = 0;
    auto snapshot = m_db->exec(
        QStringLiteral("SELECT version, last_seq, sha256, rule_sha FROM snapshots WHERE job_id = ?"), {id});
    if (!snapshot)
        return cannotTakeUp(QStringLiteral("cannot read the job's snapshot: %1").arg(snapshot.error()));
    const bool snapshotted = snapshot->next();
    if (snapshotted) {
        version = snapshot->value(0).toLongLong();
        lastSeq = snapshot->value(1).toLongLong();
        weightsSha = snapshot->value(2).toString();
        ruleSha = snapshot->value(3).toString();
    }
    snapshot->finish();
    auto weights = SafeTensors::load(m_blobs.path(weightsSha));
    if (!weights)
        return cannotTakeUp(QStringLiteral("cannot read the job's weights: %1").arg(weights.error()));
    Result<TensorBundle> schema = *weights;
    if (weightsSha != job.files.initialWeights.sha256)
        schema = SafeTensors::load(m_blobs.path(job.files.initialWeights.sha256));
    if (!schema)
        return cannotTakeUp(QStringLiteral("cannot read the initial weights: %1").arg(schema.error()));

    job.files.shards = std::move(shardRefs);
    job.files.model.size = m_blobs.size(job.files.model.sha256);
    if (snapshotted) {
        job.snapshotSha = weightsSha;
        job.snapshotRuleSha = ruleSha;
    }
    m_scheduler->adopt(job, *stored);
    for (const auto& [unitId, unit] : job.workunits)
        if (unit.resume)
            m_checkpoints.insert(unit.resume->sha256, unit.resume->size);
    for (const Lease& lease : stored->leases)
        if (!lease.checkpointSha.isEmpty())
            m_checkpoints.insert(lease.checkpointSha, std::max<qint64>(0, m_blobs.size(lease.checkpointSha)));
    activateJob(job, *weights, std::move(*schema), version, lastSeq, ruleSha);
    return true;
}

void Coordinator::leaveJobToOthers(qint64 jobId, const QString& why)
{
    LeftToOthers& left = m_leftToOthers[jobId];
    const bool again = left.reason == why;
    // From the shared look's period to a minute while it keeps failing: each try reads the job's rows and
    // weights.
    left.waitMs = std::clamp<qint64>(left.waitMs * 2, 2'000, 60'000);
    left.retryAtMs = m_clock.nowMs() + left.waitMs;
    left.reason = why;
    if (!again)
        qCCritical(lcCoordinator).noquote()
            << QStringLiteral(
                   "job %1 is left to the deployment's other coordinators: this one cannot take it up "
                   "(it tries again, every 2 s at first, then up to a minute apart): %2")
                   .arg(jobId)
                   .arg(why);
}

HttpResponse Coordinator::noSuchJob(qint64 jobId) const
{
    if (auto left = m_leftToOthers.find(jobId); left != m_leftToOthers.end())
        return HttpResponse::error(
            503,
            QStringLiteral("job %1 is not served by this coordinator at the moment (%2); the deployment's "
                           "other coordinators serve it, and this one tries again shortly")
                .arg(jobId)
                .arg(left->second.reason));
    return HttpResponse::error(404, QStringLiteral("no job has id %1").arg(jobId));
}

Status Coordinator::loadState()
{
    auto admins = m_db->exec(QStringLiteral("SELECT hash FROM admin_tokens"));
    if (!admins)
        return fail(admins.error());
    while (admins->next())
        m_admission.addAdminTokenHash(admins->value(0).toString());
    auto agents = m_db->exec(QStringLiteral("SELECT id, token_hash, revoked, samples, train_seconds FROM agents"));
    if (!agents)
        return fail(agents.error());
    while (agents->next()) {
        m_admission.setAgent(agents->value(1).toString(), {agents->value(0).toString(), agents->value(2).toInt() != 0});
        // Speed-aware jobs size leases by what agents have shown so far, also across a restart.
        m_scheduler->noteSpeed(agents->value(0).toString(), agents->value(3).toLongLong(), agents->value(4).toDouble());
    }

    auto jobs = m_db->exec(QStringLiteral("SELECT %1 FROM jobs ORDER BY id").arg(jobColumns()));
    if (!jobs)
        return fail(jobs.error());
    while (jobs->next()) {
        JobState job = jobFromRow(*jobs);
        m_jobs.emplace(job.id, std::move(job));
    }
    // A job whose import a stop interrupted is imported again; among several coordinators, by the
    // housekeeper.
    std::vector<qint64> leftToOthers;
    for (auto& [id, job] : m_jobs)
        if (!prepareJob(job, /*importHere=*/!m_config.isShared() || m_housekeeper))
            leftToOthers.push_back(id);
    for (const qint64 id : leftToOthers)
        m_jobs.erase(id);

    // Closed leases keep answering 409 with their reason after a restart, before an upload's body is read:
    // an agent that lost a 202 in the crash learns that its result counted.
    auto closed =
        m_db->exec(QStringLiteral("SELECT l.id, l.agent_id, l.state, w.job_id FROM leases l JOIN "
                                  "workunits w ON w.id = l.workunit_id WHERE l.state IN ('completed', "
                                  "'refused', 'failed', 'handed_back')"));
    while (closed && closed->next()) {
        const QString id = closed->value(0).toString();
        const auto state = leaseStateFromName(closed->value(2).toString()).value_or(Lease::State::Refused);
        m_admission.setLease(id, {closed->value(1).toString(), 0, closedLeaseMessage(id, state), {}, {}, 0});
    }
    for (const Lease& lease : m_scheduler->leases()) {
        const JobState* job = findJob(lease.jobId);
        if (job && job->status != JobStatus::Running && job->status != JobStatus::Paused)
            m_admission.setLease(lease.id, {lease.agentId, 0,
                                            QStringLiteral("job %1 is %2 and takes no more results")
                                                .arg(job->id)
                                                .arg(jobStatusName(job->status)),
                                            {},
                                            {},
                                            job->id});
    }
    return {};
}

std::vector<ReplayedUpdate> Coordinator::updatesToReplay(JobState& job, qint64 afterSeq,
                                                         qint64 snapshotVersion, qint64 receivedBeforeMs)
{
    // Alone, the snapshot holds every update up to its last_seq. Among several coordinators, updates are
    // folded in another order than their numbers: the snapshot holds those folded at its version or before,
    // and a file is kept until one does (onSnapshot). Folding again what Redis holds is a no-op
    // (SharedWeights).
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
    auto rows =
        m_db->exec(QStringLiteral("SELECT u.seq, u.file, u.epoch, u.base_version, u.applied_version IS NOT "
                                  "NULL, l.weights_sha, u.concurrency FROM updates u LEFT JOIN leases l ON "
                                  "l.id = u.lease_id WHERE %1 ORDER BY u.seq")
                       .arg(where),
                   bound);
    while (rows && rows->next()) {
        ReplayedUpdate update;
        update.seq = rows->value(0).toLongLong();
        update.file = m_storage + u'/' + rows->value(1).toString();
        update.context = UpdateContext{rows->value(2).toInt(), rows->value(3).toLongLong(), 0};
        update.appliedBefore = rows->value(4).toBool();
        update.baseSha = rows->value(5).toString();
        update.context.concurrency = std::max(1, rows->value(6).toInt());
        if (job.spec.aggregation.usesPseudoGradients() || job.spec.upload.isUpdate())
            job.basesInFlight.emplace(update.seq, update.baseSha);
        replay.push_back(std::move(update));
    }
    if (!rows)
        qCCritical(lcCoordinator) << "job" << job.id << "cannot read its received updates:" << rows.error();
    return replay;
}

void Coordinator::activateJob(JobState& job, const TensorBundle& weights, TensorBundle schema, qint64 version,
                              qint64 afterSeq, const QString& ruleSha)
{
    job.schema = std::move(schema);
    job.schema.metadata().clear();
    job.maxUploadBytes = UpdateChecker::maxUploadBytes(job.schema);
    for (const Lease& lease : m_scheduler->leases()) {
        if (lease.jobId != job.id)
            continue;
        auto unit = job.workunits.find(lease.workunitId);
        m_admission.setLease(lease.id,
                             admissionEntry(job, unit == job.workunits.end() ? nullptr : &unit->second, lease));
    }

    // The bound on uploads is learnt again from the job's last accepted updates.
    auto steps = m_db->exec(QStringLiteral("SELECT step FROM (SELECT seq, step FROM updates WHERE job_id = ? AND step "
                                           "IS NOT NULL AND fold_error = '' ORDER BY seq DESC LIMIT ?) AS recent "
                                           "ORDER BY seq"),
                            {job.id, UpdateBound::kWindow});
    while (steps && steps->next())
        job.updateBound.accept(steps->value(0).toDouble());
    auto refused = m_db->exec(QStringLiteral("SELECT COUNT(*) FROM updates WHERE job_id = ? AND fold_error != ''"),
                              {job.id});
    if (refused && refused->next())
        job.updatesRefusedAtFold = refused->value(0).toLongLong();

    // Updates refused at their fold stay out; the rest after the snapshot are folded in again, in order. The
    // version moves as the weights thread reports each one applied (onApplied).
    std::vector<ReplayedUpdate> replay = updatesToReplay(job, afterSeq, version);
    TensorBundle ruleState;
    if (!ruleSha.isEmpty()) {
        auto state = SafeTensors::load(m_blobs.path(ruleSha));
        if (state)
            ruleState = std::move(*state);
        else
            qCCritical(lcCoordinator) << "job" << job.id << "cannot read the state of its aggregation rule:"
                                      << state.error();
    }
    job.updatesApplied = version;
    m_weights->load(job.id, weights, version, job.spec.aggregation, std::move(ruleState), std::move(replay),
                    job.spec.download);
    m_validation->setTestSet(job.id, m_blobs.path(job.files.testSet.sha256), job.spec.model);
    // Epochs that completed before a restart but were never validated: validated once the replay is done.
    scheduleValidations(job);
    m_weights->publish(job.id);
    if (job.epoch == 0)
        (void)m_scheduler->createEpoch(job, 1);
}

void Coordinator::submitJob(const QByteArray& specText, Responder respond)
{
    m_programs->post([this, specText, respond] {
        auto spec = JobSpec::fromJsonText(specText);
        auto tensors = spec ? JobImporter::checkModel(spec->model) : Result<QJsonArray>(QJsonArray{});
        m_state->post([this, specText, respond, tensors = std::move(tensors)] { respond(submitChecked(specText, tensors)); });
    });
}

HttpResponse Coordinator::submitJob(const QByteArray& specText)
{
    auto spec = JobSpec::fromJsonText(specText);
    return submitChecked(specText, spec ? JobImporter::checkModel(spec->model) : Result<QJsonArray>(QJsonArray{}));
}

HttpResponse Coordinator::submitChecked(const QByteArray& specText, const Result<QJsonArray>& tensors)
{
    auto spec = JobSpec::fromJsonText(specText);
    if (!spec)
        return HttpResponse::error(422, spec.error());
    if (auto files = JobImporter::checkDatasetFiles(spec->dataset); !files)
        return HttpResponse::error(422, files.error());
    if (!spec->initialWeights.isEmpty() && !QFileInfo(spec->initialWeights).isFile())
        return HttpResponse::error(
            422, QStringLiteral("initial_weights: file %1 does not exist on the coordinator").arg(spec->initialWeights));
    // A TorchScript model was loaded and checked before (checkModel), so a hostile or broken archive is refused
    // with its cause instead of becoming a failed job.
    if (!tensors)
        return HttpResponse::error(422, tensors.error());
    const qint64 now = m_clock.nowMs();
    Result<qint64> inserted = fail(QString());
    // The job's import is this coordinator's before any other sees the job (its row commits with the lock
    // held).
    const Status submitted = m_db->transaction([&]() -> Status {
        inserted = m_db->insertReturningId(
            QStringLiteral("INSERT INTO jobs (name, spec, state, created_ms) VALUES (?, ?, ?, ?)"),
            {spec->name, QString::fromUtf8(QJsonDocument(spec->toJson()).toJson(QJsonDocument::Compact)),
             jobStatusName(JobStatus::Created), now});
        if (!inserted)
            return fail(inserted.error());
        auto claimed = m_db->claimImport(*inserted);
        if (!claimed)
            return fail(claimed.error());
        return *claimed ? Status()
                        : fail(QStringLiteral("job %1's import is claimed already").arg(*inserted));
    });
    if (!submitted) {
        if (inserted)
            m_db->releaseImport(*inserted); // a session lock outlives the transaction that took it
        return HttpResponse::error(500, submitted.error());
    }
    JobState job;
    job.id = *inserted;
    job.spec = *spec;
    job.createdMs = now;
    const qint64 id = job.id;
    m_jobs.emplace(id, std::move(job));
    startImport(id);
    qCInfo(lcCoordinator) << "job" << id << "submitted:" << spec->name;
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), id);
    reply.insert(QStringLiteral("state"), jobStatusName(JobStatus::Created));
    if (!tensors->isEmpty())
        reply.insert(QStringLiteral("model_tensors"), *tensors);
    return HttpResponse::json(201, reply);
}

void Coordinator::scheduleValidations(JobState& job)
{
    if (!m_housekeeper) // among several coordinators, the housekeeper validates
        return;
    for (int e : m_scheduler->validationsDue(job)) {
        // Among several coordinators, an epoch's last results may have been received by others that have not
        // folded them yet: its validation waits for them (the next tick asks again).
        if (m_config.isShared() && !epochFolded(job, e)) {
            m_scheduler->validationFailed(job, e);
            continue;
        }
        m_weights->validate(job.id, e, /*epochEnd=*/true);
    }
}

void Coordinator::onValidationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error)
{
    qCWarning(lcCoordinator) << "job" << jobId << "epoch" << epoch << "validation failed:" << error
                             << (epochEnd ? "(retried at the next tick)" : "");
    if (JobState* job = findJob(jobId); job && epochEnd)
        m_scheduler->validationFailed(*job, epoch);
}

void Coordinator::onValidated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy, double loss)
{
    JobState* job = findJob(jobId);
    if (!job)
        return;
    if (job->status != JobStatus::Running && job->status != JobStatus::Paused) {
        // A validation still running when the job ended (its target reached at another epoch's end): the job's
        // result is what ended it, so a later point must not replace its reported accuracy.
        job->validating.erase(epoch);
        qCInfo(lcCoordinator).nospace() << "job " << jobId << " epoch " << epoch << ": accuracy " << accuracy
                                        << " (version " << version << ") came after the job ended; not recorded";
        return;
    }
    const ValidationPoint point{epoch, epochEnd, version, job->updatesApplied, accuracy, loss, m_clock.nowMs()};
    job->history.push_back(point);
    noteValidated(jobId, point);
    if (epochEnd)
        m_scheduler->validated(*job, epoch);
    (void)m_db->exec(QStringLiteral("INSERT INTO validations (job_id, epoch, epoch_end, version, updates, accuracy, loss, "
                                    "at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                     {jobId, epoch, epochEnd ? 1 : 0, version, point.updates, accuracy, loss, point.atMs});
    qCInfo(lcCoordinator).nospace() << "job " << jobId << " epoch " << epoch << (epochEnd ? "" : " (intermediate)")
                                    << ": accuracy " << accuracy << ", loss " << loss << " (version " << version << ")";
    if (accuracy >= job->spec.targetAccuracy) {
        finishJob(*job, JobStatus::Completed,
                  QStringLiteral("reached the target accuracy %1 at epoch %2 (%3)")
                      .arg(job->spec.targetAccuracy)
                      .arg(epoch)
                      .arg(accuracy, 0, 'f', 4));
        return;
    }
    if (job->validatedEpoch >= job->spec.maxEpochs) {
        finishJob(*job, JobStatus::Completed,
                  QStringLiteral("ran its %1 epochs; accuracy %2 is below the target %3")
                      .arg(job->spec.maxEpochs)
                      .arg(accuracy, 0, 'f', 4)
                      .arg(job->spec.targetAccuracy));
        return;
    }
    (void)persistJob(*job);
    m_scheduler->openNextEpochIfReady(*job);
}

void Coordinator::finishJob(JobState& job, JobStatus status, const QString& reason, bool persist)
{
    const bool hadWeights = job.status == JobStatus::Running || job.status == JobStatus::Paused;
    job.endedElsewhere.reset();
    job.status = status;
    job.reason = reason;
    if (persist)
        (void)persistJob(job);
    for (const Lease& lease : m_scheduler->leases())
        if (lease.jobId == job.id)
            m_admission.closeLease(lease.id, QStringLiteral("job %1 is %2 and takes no more results")
                                               .arg(job.id)
                                               .arg(jobStatusName(status)));
    if (hadWeights) {
        m_weights->unload(job.id);
        m_validation->forget(job.id); // a Fashion-MNIST test split is 8 MB
    }
    m_scheduler->forget(job.id);
    job.unpublishedOf.clear(); // no lease of an ended job waits for its weights
    qCInfo(lcCoordinator) << "job" << job.id << jobStatusName(status) << ":" << reason;
}

HttpResponse Coordinator::setJobStatus(qint64 jobId, const QByteArray& action)
{
    JobState* job = findJob(jobId);
    if (!job)
        return noSuchJob(jobId);
    using enum JobStatus;
    std::vector<JobStatus> from;
    JobStatus to;
    QString reason;
    if (action == "pause") {
        from = {Running};
        to = Paused;
    } else if (action == "resume") {
        from = {Paused};
        to = Running;
    } else if (action == "cancel") {
        from = {Created, Running, Paused};
        to = Cancelled;
        reason = QStringLiteral("cancelled by an admin");
    } else {
        return HttpResponse::error(404, QStringLiteral("unknown job action \"%1\"; use pause, resume or cancel")
                                            .arg(QString::fromLatin1(action)));
    }
    const auto refuse = [&](JobStatus is) {
        const QString verb =
            action == "cancel" ? QStringLiteral("cancelled") : QString::fromLatin1(action) + u'd';
        return HttpResponse::error(
            409, QStringLiteral("job %1 is %2; it cannot be %3").arg(jobId).arg(jobStatusName(is), verb));
    };
    // An ended job stays ended: refused here, without taking the lock of a job the scheduler let go.
    if (job->status == Completed || job->status == Failed || job->status == Cancelled)
        return refuse(job->status);
    // Otherwise decided on the stored state, not this coordinator's picture of it: among several
    // coordinators, another may have paused or ended the job a moment ago.
    auto refusedBy = switchJobStatus(*job, from, to, reason);
    if (!refusedBy)
        return HttpResponse::error(503, QStringLiteral("cannot store job %1's new state (try again): %2")
                                            .arg(jobId)
                                            .arg(refusedBy.error()));
    if (*refusedBy)
        return refuse(**refusedBy);
    if (to == Cancelled) {
        finishJob(*job, Cancelled, reason, /*persist=*/false);
    } else {
        job->status = to;
        if (to == Running)
            m_scheduler->openNextEpochIfReady(*job);
    }
    return HttpResponse::json(200, jobJson(*job));
}

HttpResponse Coordinator::listJobs()
{
    QJsonArray jobs;
    for (const auto& [id, job] : m_jobs) {
        QJsonObject brief = jobJson(job);
        brief.remove(QStringLiteral("history"));
        jobs.append(brief);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("jobs"), jobs);
    return HttpResponse::json(200, reply);
}

HttpResponse Coordinator::jobStatus(qint64 jobId)
{
    const JobState* job = findJob(jobId);
    if (!job)
        return noSuchJob(jobId);
    QJsonObject json = jobJson(*job);
    if (job->updatesRefusedAtFold > 0) {
        // The admin sees which accepted updates are not in the weights, and why.
        QJsonArray notFolded;
        auto rows = m_db->exec(QStringLiteral("SELECT seq, lease_id, agent_id, fold_error FROM updates WHERE job_id = ? "
                                              "AND fold_error != '' ORDER BY seq DESC LIMIT 20"),
                               {jobId});
        while (rows && rows->next())
            notFolded.append(QJsonObject{{QStringLiteral("seq"), rows->value(0).toLongLong()},
                                         {QStringLiteral("lease"), rows->value(1).toString()},
                                         {QStringLiteral("agent"), rows->value(2).toString()},
                                         {QStringLiteral("reason"), rows->value(3).toString()}});
        json.insert(QStringLiteral("not_folded"), notFolded);
    }
    return HttpResponse::json(200, json);
}

} // namespace gleaner::coordinator
