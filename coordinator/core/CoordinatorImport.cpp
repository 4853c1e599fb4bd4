// Coordinator: importing a submitted job's data set (its blobs, shards and first weights), and who imports it
// among several coordinators (Database::claimImport).
#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "format/SafeTensors.h"
#include "store/Database.h"

#include <QDir>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QScopeGuard>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {

void Coordinator::importWhenUnclaimed(qint64 jobId)
{
    if (m_importing.count(jobId))
        return;
    auto claimed = m_db->claimImport(jobId);
    if (!claimed)
        qCWarning(lcCoordinator) << "cannot claim job" << jobId
                                 << "for its import (tried again later):" << claimed.error();
    else if (*claimed)
        startImport(jobId);
}

void Coordinator::startImport(qint64 jobId)
{
    m_importing.insert(jobId);
    const JobSpec spec = m_jobs.at(jobId).spec;
    const QString scratch = QDir(m_dir.uploadsDir()).filePath(QStringLiteral("import-%1").arg(jobId));
    m_importer->post([this, jobId, spec, scratch] {
        auto imported = JobImporter::import(spec, m_blobs, scratch);
        QDir(scratch).removeRecursively();
        m_state->post([this, jobId, imported = std::move(imported)]() mutable { onImported(jobId, std::move(imported)); });
    });
}

void Coordinator::onImported(qint64 jobId, Result<ImportedJob> imported)
{
    // Given back once the outcome is recorded (the job running, or failed): a housekeeper that claims it
    // later finds the job no longer `created`.
    const auto release = qScopeGuard([&] {
        m_importing.erase(jobId);
        m_db->releaseImport(jobId);
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
        qCInfo(lcCoordinator) << "job" << jobId << "is" << jobStatusName(stored)
                              << "in the database (set by another coordinator): this import is dropped";
        if (m_config.isShared())
            followJobs();
    };
    const auto failImport = [&](const QString& why) {
        auto refusedBy = switchJobStatus(*job, {JobStatus::Created}, JobStatus::Failed, why);
        if (!refusedBy)
            qCCritical(lcCoordinator)
                << "job" << jobId << "cannot store that its import failed (it is imported again at the"
                << "housekeeper's next look among several coordinators, else at the next start):"
                << refusedBy.error() << "- the import:" << why;
        else if (*refusedBy)
            importedElsewhere(**refusedBy);
        else
            finishJob(*job, JobStatus::Failed, why, /*persist=*/false);
    };
    if (!imported) {
        failImport(imported.error());
        return;
    }
    auto weights = SafeTensors::load(m_blobs.path(imported->initialWeights.sha256));
    if (!weights) {
        failImport(weights.error());
        return;
    }
    JobSpec spec = job->spec;
    spec.model = imported->modelSpec;
    // The switch to `running` and what the job runs on, in one transaction, before anything acts on it.
    auto refusedBy = switchJobStatus(*job, {JobStatus::Created}, JobStatus::Running, {}, [&]() -> Status {
        for (const ShardRef& shard : imported->shards)
            if (auto r = m_db->exec(QStringLiteral("INSERT INTO shards (job_id, idx, sha256, bytes, samples) VALUES "
                                                   "(?, ?, ?, ?, ?) ON CONFLICT (job_id, idx) DO UPDATE SET sha256 = "
                                                   "excluded.sha256, bytes = excluded.bytes, samples = excluded.samples"),
                                    {jobId, shard.index, shard.sha256, shard.bytes, shard.samples});
                !r)
                return fail(r.error());
        // The spec is stored as the job runs it: a TorchScript archive named by content from here on.
        auto r = m_db->exec(
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
        qCInfo(lcCoordinator).noquote() << "job" << jobId << "dataset:" << note;
    job->status = JobStatus::Running;
    activateJob(*job, *weights, *weights, 0, {},
                {}); // the initial weights are the schema too; nothing to replay
    qCInfo(lcCoordinator) << "job" << jobId << "imported:" << job->files.shards.size() << "shards; running";
}

} // namespace gleaner::coordinator
