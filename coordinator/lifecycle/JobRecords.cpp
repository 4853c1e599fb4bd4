#include "lifecycle/JobRecords.h"

#include "scheduling/Scheduler.h"
#include "store/BlobStore.h"
#include "store/Database.h"

#include <QLoggingCategory>

#include <algorithm>

Q_LOGGING_CATEGORY(lcJobs, "gleaner.coordinator.jobs")

namespace gleaner::coordinator {

Result<QSqlQuery> JobRecords::selectAll()
{
    return m_db.exec(QStringLiteral("SELECT id, spec, state, reason, created_ms, epoch, model_sha, "
                                    "initial_sha, test_sha FROM jobs ORDER BY id"));
}

Status JobRecords::persist(const JobState& job)
{
    const bool finished = job.status == JobStatus::Completed || job.status == JobStatus::Failed ||
                          job.status == JobStatus::Cancelled;
    const QVariant accuracy = job.history.empty() ? QVariant() : QVariant(job.history.back().accuracy);
    const QVariant loss = job.history.empty() ? QVariant() : QVariant(job.history.back().loss);
    // An ended job stays ended: among several coordinators, one may pause a job that another has just
    // completed.
    auto updated =
        m_db.exec(QStringLiteral("UPDATE jobs SET state = ?, reason = ?, epoch = ?, accuracy = ?, loss = "
                                 "?, finished_ms = ? WHERE id = ? AND state NOT IN ('completed', "
                                 "'failed', 'cancelled')"),
                  {jobStatusName(job.status), job.reason, job.epoch, accuracy, loss,
                   finished ? QVariant(m_clock.nowMs()) : QVariant(), job.id});
    return updated ? Status() : fail(updated.error());
}

Result<std::optional<JobStatus>> JobRecords::switchStatus(JobState& job, const std::vector<JobStatus>& from,
                                                          JobStatus to, const QString& reason,
                                                          const std::function<Status()>& alongside)
{
    std::optional<JobStatus> refusedBy;
    const Status stored = m_db.transaction([&]() -> Status {
        refusedBy.reset();
        if (auto s = m_scheduler.lockJob(job); !s)
            return s;
        auto row = m_db.exec(QStringLiteral("SELECT state FROM jobs WHERE id = ?"), {job.id});
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
            m_db.exec(QStringLiteral("UPDATE jobs SET state = ?, reason = ?, finished_ms = ? WHERE id = ?"),
                      {jobStatusName(to), reason, ends ? QVariant(m_clock.nowMs()) : QVariant(), job.id});
        return updated ? Status() : fail(updated.error());
    });
    if (!stored)
        return fail(stored.error());
    return refusedBy;
}

JobState JobRecords::fromRow(const QSqlQuery& row) const
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
        qCCritical(lcJobs) << "job" << job.id << job.reason;
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

void JobRecords::loadHistory(JobState& job)
{
    auto history =
        m_db.exec(QStringLiteral("SELECT epoch, epoch_end, version, updates, accuracy, loss, at_ms FROM "
                                 "validations WHERE job_id = ? ORDER BY at_ms, version"),
                  {job.id});
    if (!history) {
        qCWarning(lcJobs) << "cannot read the validations of job" << job.id << ":" << history.error();
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

Result<std::map<qint64, qint64>> JobRecords::validationCounts()
{
    auto rows = m_db.exec(QStringLiteral("SELECT job_id, COUNT(*) FROM validations GROUP BY job_id"));
    if (!rows)
        return fail(rows.error());
    std::map<qint64, qint64> counts;
    while (rows->next())
        counts[rows->value(0).toLongLong()] = rows->value(1).toLongLong();
    return counts;
}

} // namespace gleaner::coordinator
