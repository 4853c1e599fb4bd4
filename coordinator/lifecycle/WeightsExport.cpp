#include "lifecycle/WeightsExport.h"

#include "aggregation/AveragedRule.h"
#include "aggregation/WeightsKeeper.h"
#include "format/SafeTensors.h"
#include "lifecycle/JobDesk.h"
#include "lifecycle/JobTakeUp.h"
#include "ml/Model.h"
#include "store/BlobStore.h"
#include "store/Database.h"

#include <QDir>
#include <QFile>
#include <QLoggingCategory>

namespace gleaner::coordinator {
namespace {
Q_LOGGING_CATEGORY(lcExport, "gleaner.coordinator.export")
}

void WeightsExport::serve(qint64 jobId, Responder respond, bool torchscript)
{
    JobState* job = m_parts.jobs.find(jobId);
    if (!job) {
        respond(m_parts.takeUp.noSuchJob(jobId));
        return;
    }
    if (torchscript && job->spec.model.arch != Architecture::TorchScript) {
        respond(HttpResponse::error(
            409, QStringLiteral(
                     "job %1 trains the zoo's %2 model, not a TorchScript program: export its weights as "
                     "safetensors")
                     .arg(jobId)
                     .arg(architectureName(job->spec.model.arch))));
        return;
    }
    // The weights as safetensors, or written into the job's own archive: loading the program and saving it
    // takes the import thread, not the state thread.
    const auto serve = [this, jobId, torchscript, model = job->spec.model, respond](const QString& sha) {
        if (!torchscript) {
            respond(HttpResponse::file(m_parts.blobs.path(sha), sha.toLatin1(), "application/octet-stream"));
            return;
        }
        const QString scratch =
            QDir(m_scratch).filePath(QStringLiteral("export-%1-%2.pt").arg(jobId).arg(sha.left(16)));
        m_parts.programs.post([this, model, sha, scratch, respond] {
            const auto written = [&]() -> Result<BlobInfo> {
                auto weights = SafeTensors::load(m_parts.blobs.path(sha));
                if (!weights)
                    return fail(weights.error());
                auto net = ml::Model::create(model, 0);
                if (!net)
                    return fail(net.error());
                if (auto s = net->setWeights(*weights); !s)
                    return fail(s.error());
                if (auto s = net->saveTorchScript(scratch); !s)
                    return fail(s.error());
                return m_parts.blobs.adoptFile(scratch);
            }();
            QFile::remove(scratch);
            respond(written ? HttpResponse::file(m_parts.blobs.path(written->sha256),
                                                 written->sha256.toLatin1(), "application/octet-stream")
                            : HttpResponse::error(500, written.error()));
        });
    };
    if (job->status == JobStatus::Running || job->status == JobStatus::Paused) {
        m_parts.weights.exportWeights(jobId, [respond, serve](Result<BlobInfo> blob) {
            if (blob)
                serve(blob->sha256);
            else
                respond(HttpResponse::error(500, blob.error()));
        });
        return;
    }
    auto snapshot = m_parts.db.exec(
        QStringLiteral("SELECT sha256, rule_sha, version FROM snapshots WHERE job_id = ?"), {jobId});
    if (snapshot && snapshot->next()) {
        const QString sha = snapshot->value(0).toString();
        const QString ruleSha = snapshot->value(1).toString();
        if (job->spec.aggregation.emaDecay <= 0 || ruleSha.isEmpty()) {
            serve(sha);
            return;
        }
        // A job that keeps an average exports it, as its validations measured it: read from the rule's state
        // beside the last snapshot, on the import thread.
        m_parts.programs.post([this, jobId, sha, ruleSha, version = snapshot->value(2).toLongLong(), serve] {
            auto average = averageOf(sha, ruleSha, version);
            if (!average)
                qCWarning(lcExport) << "job" << jobId
                                    << "exports its last snapshot's server weights, not their"
                                    << "average:" << average.error();
            serve(average ? *average : sha);
        });
        return;
    }
    if (!job->files.initialWeights.sha256.isEmpty()) {
        serve(job->files.initialWeights.sha256);
        return;
    }
    respond(HttpResponse::error(
        409,
        QStringLiteral("job %1 has no weights yet (state %2)").arg(jobId).arg(jobStatusName(job->status))));
}

Result<QString> WeightsExport::averageOf(const QString& weightsSha, const QString& ruleSha, qint64 version)
{
    auto weights = SafeTensors::load(m_parts.blobs.path(weightsSha));
    if (!weights)
        return fail(QStringLiteral("the job's last snapshot: %1").arg(weights.error()));
    auto state = SafeTensors::load(m_parts.blobs.path(ruleSha));
    if (!state)
        return fail(QStringLiteral("the rule's state beside the job's last snapshot: %1").arg(state.error()));
    auto average = AveragedRule::averageIn(*state, *weights);
    if (!average)
        return fail(QStringLiteral("the average in the rule's state: %1").arg(average.error()));
    if (average->isEmpty())
        return weightsSha; // no fold yet: the weights stand for their average
    average->setMetadata(QStringLiteral("gleaner.version"), QString::number(version));
    auto blob = m_parts.blobs.put(SafeTensors::serialize(*average));
    if (!blob)
        return fail(blob.error());
    return blob->sha256;
}

} // namespace gleaner::coordinator
