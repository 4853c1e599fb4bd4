#include "lifecycle/JobDesk.h"

#include "admission/AdmissionCache.h"
#include "aggregation/WeightsKeeper.h"
#include "config/DataDirectory.h"
#include "jobs/JobImporter.h"
#include "lifecycle/JobRecords.h"
#include "lifecycle/JobTakeUp.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "util/SerialExecutor.h"
#include "validation/ValidationRunner.h"
#include "views/DashboardFeed.h"
#include "views/JobViews.h"

#include <QFileInfo>
#include <QJsonDocument>
#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcJobs)

namespace gleaner::coordinator {

JobDesk::JobDesk(Parts parts, const CoordinatorConfig& config, const Clock& clock,
                 std::function<bool()> doesHousekeeping)
    : m_parts(parts), m_config(config), m_clock(clock), m_doesHousekeeping(std::move(doesHousekeeping))
{
}

JobState* JobDesk::find(qint64 jobId)
{
    auto found = m_parts.jobs.find(jobId);
    return found == m_parts.jobs.end() ? nullptr : &found->second;
}

void JobDesk::submit(const QByteArray& specText, Responder respond)
{
    m_parts.programs.post([this, specText, respond] {
        auto spec = JobSpec::fromJsonText(specText);
        auto tensors = spec ? JobImporter::checkModel(spec->model) : Result<QJsonArray>(QJsonArray{});
        m_parts.state.post([this, specText, respond, tensors = std::move(tensors)] {
            respond(submitChecked(specText, tensors));
        });
    });
}

HttpResponse JobDesk::submit(const QByteArray& specText)
{
    auto spec = JobSpec::fromJsonText(specText);
    return submitChecked(specText,
                         spec ? JobImporter::checkModel(spec->model) : Result<QJsonArray>(QJsonArray{}));
}

HttpResponse JobDesk::submitChecked(const QByteArray& specText, const Result<QJsonArray>& tensors)
{
    auto spec = JobSpec::fromJsonText(specText);
    if (!spec)
        return HttpResponse::error(422, spec.error());
    if (auto files = JobImporter::checkDatasetFiles(spec->dataset); !files)
        return HttpResponse::error(422, files.error());
    if (!spec->initialWeights.isEmpty() && !QFileInfo(spec->initialWeights).isFile())
        return HttpResponse::error(
            422, QStringLiteral("initial_weights: file %1 does not exist on the coordinator")
                     .arg(spec->initialWeights));
    // A TorchScript model was loaded and checked before (checkModel), so a hostile or broken archive is
    // refused with its cause instead of becoming a failed job.
    if (!tensors)
        return HttpResponse::error(422, tensors.error());
    const qint64 now = m_clock.nowMs();
    Result<qint64> inserted = fail(QString());
    // The job's import is this coordinator's before any other sees the job (its row commits with the lock
    // held).
    const Status submitted = m_parts.db.transaction([&]() -> Status {
        inserted = m_parts.db.insertReturningId(
            QStringLiteral("INSERT INTO jobs (name, spec, state, created_ms) VALUES (?, ?, ?, ?)"),
            {spec->name, QString::fromUtf8(QJsonDocument(spec->toJson()).toJson(QJsonDocument::Compact)),
             jobStatusName(JobStatus::Created), now});
        if (!inserted)
            return fail(inserted.error());
        auto claimed = m_parts.db.claimImport(*inserted);
        if (!claimed)
            return fail(claimed.error());
        return *claimed ? Status()
                        : fail(QStringLiteral("job %1's import is claimed already").arg(*inserted));
    });
    if (!submitted) {
        if (inserted)
            m_parts.db.releaseImport(*inserted); // a session lock outlives the transaction that took it
        return HttpResponse::error(500, submitted.error());
    }
    JobState job;
    job.id = *inserted;
    job.spec = *spec;
    job.createdMs = now;
    const qint64 id = job.id;
    m_parts.jobs.emplace(id, std::move(job));
    m_parts.takeUp.startImport(id);
    qCInfo(lcJobs) << "job" << id << "submitted:" << spec->name;
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), id);
    reply.insert(QStringLiteral("state"), jobStatusName(JobStatus::Created));
    if (!tensors->isEmpty())
        reply.insert(QStringLiteral("model_tensors"), *tensors);
    return HttpResponse::json(201, reply);
}

void JobDesk::scheduleValidations(JobState& job)
{
    if (!m_doesHousekeeping()) // among several coordinators, the housekeeper validates
        return;
    for (int e : m_parts.scheduler.validationsDue(job)) {
        // Among several coordinators, an epoch's last results may have been received by others that have not
        // folded them yet: its validation waits for them (the next tick asks again).
        if (m_config.isShared() && !epochFolded(job, e)) {
            m_parts.scheduler.validationFailed(job, e);
            continue;
        }
        m_parts.weights.validate(job.id, e, /*epochEnd=*/true);
    }
}

void JobDesk::afterUpdateQueued(JobState& job, int epoch)
{
    scheduleValidations(job);
    // An intermediate point for the history, each time the job's count of updates (the deployment's) passes
    // another multiple of validate_every_updates.
    if (m_doesHousekeeping() && m_config.validateEveryUpdates > 0 &&
        job.counts.updatesReceived / m_config.validateEveryUpdates >
            job.intermediateValidatedAt / m_config.validateEveryUpdates) {
        job.intermediateValidatedAt = job.counts.updatesReceived;
        m_parts.weights.validate(job.id, epoch, /*epochEnd=*/false);
    }
    m_parts.scheduler.openNextEpochIfReady(job);
}

void JobDesk::validationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error)
{
    qCWarning(lcJobs) << "job" << jobId << "epoch" << epoch << "validation failed:" << error
                      << (epochEnd ? "(retried at the next tick)" : "");
    if (JobState* job = find(jobId); job && epochEnd)
        m_parts.scheduler.validationFailed(*job, epoch);
}

void JobDesk::validated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy, double loss)
{
    JobState* job = find(jobId);
    if (!job)
        return;
    if (job->status != JobStatus::Running && job->status != JobStatus::Paused) {
        // A validation still running when the job ended (its target reached at another epoch's end): the
        // job's result is what ended it, so a later point must not replace its reported accuracy.
        job->validating.erase(epoch);
        qCInfo(lcJobs).nospace() << "job " << jobId << " epoch " << epoch << ": accuracy " << accuracy
                                 << " (version " << version << ") came after the job ended; not recorded";
        return;
    }
    const ValidationPoint point{epoch,    epochEnd, version,        job->updatesApplied,
                                accuracy, loss,     m_clock.nowMs()};
    job->history.push_back(point);
    m_parts.feed.noteValidated(jobId, point);
    if (epochEnd)
        m_parts.scheduler.validated(*job, epoch);
    (void)m_parts.db.exec(
        QStringLiteral("INSERT INTO validations (job_id, epoch, epoch_end, version, updates, accuracy, loss, "
                       "at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
        {jobId, epoch, epochEnd ? 1 : 0, version, point.updates, accuracy, loss, point.atMs});
    qCInfo(lcJobs).nospace() << "job " << jobId << " epoch " << epoch << (epochEnd ? "" : " (intermediate)")
                             << ": accuracy " << accuracy << ", loss " << loss << " (version " << version
                             << ")";
    if (accuracy >= job->spec.targetAccuracy) {
        finish(*job, JobStatus::Completed,
               QStringLiteral("reached the target accuracy %1 at epoch %2 (%3)")
                   .arg(job->spec.targetAccuracy)
                   .arg(epoch)
                   .arg(accuracy, 0, 'f', 4));
        return;
    }
    if (job->validatedEpoch >= job->spec.maxEpochs) {
        finish(*job, JobStatus::Completed,
               QStringLiteral("ran its %1 epochs; accuracy %2 is below the target %3")
                   .arg(job->spec.maxEpochs)
                   .arg(accuracy, 0, 'f', 4)
                   .arg(job->spec.targetAccuracy));
        return;
    }
    (void)m_parts.records.persist(*job);
    m_parts.scheduler.openNextEpochIfReady(*job);
}

void JobDesk::finish(JobState& job, JobStatus status, const QString& reason, bool persist)
{
    const bool hadWeights = job.status == JobStatus::Running || job.status == JobStatus::Paused;
    job.endedElsewhere.reset();
    job.status = status;
    job.reason = reason;
    if (persist)
        (void)m_parts.records.persist(job);
    for (const Lease& lease : m_parts.scheduler.leases())
        if (lease.jobId == job.id)
            m_parts.admission.closeLease(lease.id, QStringLiteral("job %1 is %2 and takes no more results")
                                                       .arg(job.id)
                                                       .arg(jobStatusName(status)));
    if (hadWeights) {
        m_parts.weights.unload(job.id);
        m_parts.validation.forget(job.id); // a Fashion-MNIST test split is 8 MB
    }
    m_parts.scheduler.forget(job.id);
    job.unpublishedOf.clear(); // no lease of an ended job waits for its weights
    qCInfo(lcJobs) << "job" << job.id << jobStatusName(status) << ":" << reason;
}

HttpResponse JobDesk::setStatus(qint64 jobId, const QByteArray& action)
{
    JobState* job = find(jobId);
    if (!job)
        return m_parts.takeUp.noSuchJob(jobId);
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
        return HttpResponse::error(404,
                                   QStringLiteral("unknown job action \"%1\"; use pause, resume or cancel")
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
    auto refusedBy = m_parts.records.switchStatus(*job, from, to, reason);
    if (!refusedBy)
        return HttpResponse::error(503, QStringLiteral("cannot store job %1's new state (try again): %2")
                                            .arg(jobId)
                                            .arg(refusedBy.error()));
    if (*refusedBy)
        return refuse(**refusedBy);
    if (to == Cancelled) {
        finish(*job, Cancelled, reason, /*persist=*/false);
    } else {
        job->status = to;
        if (to == Running)
            m_parts.scheduler.openNextEpochIfReady(*job);
    }
    return HttpResponse::json(200, m_parts.views.jobJson(*job));
}

HttpResponse JobDesk::list()
{
    QJsonArray jobs;
    for (const auto& [id, job] : m_parts.jobs) {
        QJsonObject brief = m_parts.views.jobJson(job);
        brief.remove(QStringLiteral("history"));
        jobs.append(brief);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("jobs"), jobs);
    return HttpResponse::json(200, reply);
}

HttpResponse JobDesk::status(qint64 jobId)
{
    const JobState* job = find(jobId);
    if (!job)
        return m_parts.takeUp.noSuchJob(jobId);
    QJsonObject json = m_parts.views.jobJson(*job);
    if (job->counts.updatesNotFolded > 0) {
        // The admin sees which accepted updates are not in the weights, and why.
        QJsonArray notFolded;
        auto rows = m_parts.db.exec(
            QStringLiteral("SELECT seq, lease_id, agent_id, fold_error FROM updates WHERE job_id = ? "
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

bool JobDesk::epochFolded(const JobState& job, int epoch)
{
    auto waiting =
        m_parts.db.exec(QStringLiteral("SELECT COUNT(*) FROM updates WHERE job_id = ? AND epoch <= ? AND "
                                       "applied_version IS NULL AND fold_error = ''"),
                        {job.id, epoch});
    return waiting && waiting->next() && waiting->value(0).toLongLong() == 0;
}

} // namespace gleaner::coordinator
