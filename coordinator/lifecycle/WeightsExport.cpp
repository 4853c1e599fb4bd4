#include "lifecycle/WeightsExport.h"

#include "aggregation/WeightsKeeper.h"
#include "format/SafeTensors.h"
#include "lifecycle/JobDesk.h"
#include "lifecycle/JobTakeUp.h"
#include "ml/Model.h"
#include "store/BlobStore.h"
#include "store/Database.h"

#include <QDir>
#include <QFile>

namespace gleaner::coordinator {

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
    auto snapshot = m_parts.db.exec(QStringLiteral("SELECT sha256 FROM snapshots WHERE job_id = ?"), {jobId});
    if (snapshot && snapshot->next()) {
        serve(snapshot->value(0).toString());
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

} // namespace gleaner::coordinator
