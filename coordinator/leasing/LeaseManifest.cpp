#include "leasing/LeaseManifest.h"

#include "config/SigningKeys.h"
#include "crypto/SignedEnvelope.h"
#include "store/BlobStore.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace gleaner::coordinator::LeaseManifest {
namespace {

QJsonObject fileEntry(const char* role, const QString& sha, qint64 size)
{
    QJsonObject file;
    file.insert(QStringLiteral("role"), QString::fromLatin1(role));
    file.insert(QStringLiteral("sha256"), sha);
    file.insert(QStringLiteral("size"), size);
    return file;
}

} // namespace

QByteArray sign(const JobState& job, const Workunit& unit, const Lease& lease, const SigningKeys& keys,
                const BlobStore& blobs, const QString& coordinatorUrl, QByteArray* signature)
{
    const ShardRef& shard = job.files.shards.at(unit.shard);
    QJsonArray files;
    files.append(fileEntry("model", job.files.model.sha256, job.files.model.size));
    // The lease's base: the published weights, or for a lease that resumes a handed-back checkpoint the older
    // file that checkpoint trained from.
    const qint64 weightsSize =
        lease.weightsSha == job.published.sha256 ? job.published.size : blobs.size(lease.weightsSha);
    files.append(fileEntry("weights", lease.weightsSha, weightsSize));
    files.append(fileEntry("shard", shard.sha256, shard.bytes));

    QJsonObject hyper;
    hyper.insert(QStringLiteral("local_epochs"), job.spec.localEpochs);
    if (lease.steps > 0) // sized to the agent's speed (speed-aware jobs)
        hyper.insert(QStringLiteral("steps"), lease.steps);
    hyper.insert(QStringLiteral("batch_size"), job.spec.batchSize);
    // The rate of the job's schedule at the weights the lease starts from (a resumed checkpoint keeps its
    // own).
    hyper.insert(QStringLiteral("optimizer"), job.spec.optimizerAt(lease.baseVersion).toJson());
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
    manifest.insert(QStringLiteral("coordinator"), coordinatorUrl);
    manifest.insert(QStringLiteral("agent_id"), lease.agentId);
    manifest.insert(QStringLiteral("lease_id"), lease.id);
    manifest.insert(QStringLiteral("nonce"), lease.nonce);
    manifest.insert(QStringLiteral("job"), jobInfo);
    manifest.insert(QStringLiteral("subtask"), subtask);
    manifest.insert(QStringLiteral("base_version"), lease.baseVersion);
    manifest.insert(QStringLiteral("files"), files);
    manifest.insert(QStringLiteral("model"), job.spec.model.toJson());
    manifest.insert(QStringLiteral("hyperparameters"), hyper);
    if (job.spec.upload
            .isUpdate()) // how to send the result; agents that do not know the key send full weights
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
    // The workunit was handed back part-way: this lease resumes from that checkpoint (protocol 6.8). Agents
    // that do not know the key train from step 0 on the same base, which is still a valid result.
    if (!lease.checkpointSha.isEmpty() && unit.resume && unit.resume->sha256 == lease.checkpointSha)
        manifest.insert(QStringLiteral("resume"),
                        QJsonObject{{QStringLiteral("sha256"), unit.resume->sha256},
                                    {QStringLiteral("size"), unit.resume->size},
                                    {QStringLiteral("step"), unit.resume->step},
                                    {QStringLiteral("from_lease"), unit.resume->fromLease}});
    manifest.insert(QStringLiteral("issued_ms"), lease.issuedMs);
    manifest.insert(QStringLiteral("deadline_ms"), lease.deadlineMs);

    const SignedEnvelope envelope =
        SignedEnvelope::sign(keys.current(), QJsonDocument(manifest).toJson(QJsonDocument::Compact));
    *signature = envelope.signature;
    return envelope.manifest;
}

AdmissionCache::LeaseEntry admissionEntry(const JobState& job, const Workunit* unit, const Lease& lease)
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

} // namespace gleaner::coordinator::LeaseManifest
