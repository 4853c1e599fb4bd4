// Coordinator: jobs (submit, status, validation, pause, completion). Taking a job up from the database is
// CoordinatorTakeUp.cpp.
#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "validation/ValidationRunner.h"

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

void Coordinator::validationsAfterUpdate(JobState& job, int epoch)
{
    scheduleValidations(job);
    // An intermediate point for the history, each time the job's count of updates (the deployment's) passes
    // another multiple of validate_every_updates.
    if (m_housekeeper && m_config.validateEveryUpdates > 0 &&
        job.counts.updatesReceived / m_config.validateEveryUpdates >
            job.intermediateValidatedAt / m_config.validateEveryUpdates) {
        job.intermediateValidatedAt = job.counts.updatesReceived;
        m_weights->validate(job.id, epoch, /*epochEnd=*/false);
    }
    m_scheduler->openNextEpochIfReady(job);
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
    m_feed->noteValidated(jobId, point);
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
    return HttpResponse::json(200, m_views->jobJson(*job));
}

HttpResponse Coordinator::listJobs()
{
    QJsonArray jobs;
    for (const auto& [id, job] : m_jobs) {
        QJsonObject brief = m_views->jobJson(job);
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
    QJsonObject json = m_views->jobJson(*job);
    if (job->counts.updatesNotFolded > 0) {
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
