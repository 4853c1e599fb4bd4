#include "runner/TaskManifest.h"

#include "crypto/SignedEnvelope.h"
#include "spec/JsonFields.h"

#include <QJsonArray>
#include <QRegularExpression>
#include <QUrl>

namespace gleaner::agent {
namespace {

constexpr qint64 kMaxInt53 = (qint64(1) << 53);

// "https://Host:443/" and "https://host:443" name the same coordinator, and so do the loopback names
// (a coordinator calls itself by the first name in its certificate, "localhost" by default, while a local
// agent may have enrolled through "127.0.0.1").
QString normalisedUrl(const QString& text)
{
    QUrl url(text);
    QString host = url.host().toLower();
    if (host == u"localhost" || host == u"127.0.0.1" || host == u"::1")
        host = QStringLiteral("loopback");
    url.setHost(host);
    if (url.port() == 443 && url.scheme() == u"https")
        url.setPort(-1); // https://host:443 is https://host
    return url.adjusted(QUrl::RemovePath | QUrl::StripTrailingSlash | QUrl::RemoveUserInfo).toString();
}

} // namespace

const ManifestFile* TaskManifest::file(QStringView role) const
{
    for (const ManifestFile& f : files)
        if (f.role == role)
            return &f;
    return nullptr;
}

Result<TaskManifest> checkManifest(const VerifyKey& pinnedKey, const QByteArray& manifest,
                                   const QByteArray& signature, const ManifestExpectation& expected)
{
    const QString lease = expected.leaseId.toString();
    auto object = SignedEnvelope::verify(pinnedKey, SignedEnvelope{manifest, signature});
    if (!object)
        return fail(QStringLiteral(
                        "the manifest of lease %1 was refused: %2. Nothing of it was run; if this repeats, "
                        "the coordinator's signing key changed or something between it and this machine "
                        "alters its answers")
                        .arg(lease, object.error()));

    JsonFields fields(*object, QStringLiteral("manifest"));
    TaskManifest task{expected.leaseId};
    QString format, agentId, coordinator, signedLease;
    fields.readString(u"format", format, Need::Required);
    fields.readString(u"agent_id", agentId, Need::Required);
    fields.readString(u"lease_id", signedLease, Need::Required);
    fields.readString(u"coordinator", coordinator, Need::Required);
    fields.readString(u"nonce", task.nonce, Need::Required, 32);
    fields.readInt64(u"base_version", task.baseVersion, IntRange{0, kMaxInt53}, Need::Required);
    fields.readInt64(u"issued_ms", task.issuedMs, IntRange{0, kMaxInt53}, Need::Required);
    fields.readInt64(u"deadline_ms", task.deadlineMs, IntRange{0, kMaxInt53}, Need::Required);
    QJsonObject job, subtask;
    fields.readObject(u"job", job, Need::Required);
    fields.readObject(u"subtask", subtask, Need::Required);
    if (!fields.ok())
        return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: %2")
                        .arg(lease, fields.failure().message));
    if (format != u"gleaner-manifest/1")
        return fail(
            QStringLiteral("the manifest of lease %1 has format \"%2\"; this agent reads gleaner-manifest/1: "
                           "update the agent")
                .arg(lease, format));

    JsonFields jobFields(job, QStringLiteral("manifest.job"));
    jobFields.readInt64(u"id", task.jobId, IntRange{1, kMaxInt53}, Need::Required);
    jobFields.readString(u"name", task.jobName, Need::Required);
    JsonFields subtaskFields(subtask, QStringLiteral("manifest.subtask"));
    subtaskFields.readInt64(u"workunit_id", task.workunitId, IntRange{1, kMaxInt53}, Need::Required);
    subtaskFields.readInt(u"epoch", task.epoch, IntRange{1, 1'000'000}, Need::Required);
    subtaskFields.readInt(u"shard", task.shard, IntRange{0, 1'000'000'000}, Need::Required);
    subtaskFields.readInt64(u"samples", task.samples, IntRange{1, kMaxInt53}, Need::Required);
    for (const JsonFields* f : {&jobFields, &subtaskFields})
        if (!f->ok())
            return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: %2")
                            .arg(lease, f->failure().message));

    const QJsonValue filesValue = object->value(QStringLiteral("files"));
    const QJsonArray files = filesValue.toArray();
    static const char16_t* const kRoles[] = {u"model", u"weights", u"shard"};
    if (!filesValue.isArray() || files.size() != 3)
        return fail(
            QStringLiteral(
                "the manifest of lease %1 is signed but malformed: manifest.files: expected the three "
                "files model, weights, shard")
                .arg(lease));
    for (qsizetype i = 0; i < files.size(); ++i) {
        JsonFields file(files[i].toObject(), QStringLiteral("manifest.files[%1]").arg(i));
        ManifestFile entry;
        file.readString(u"role", entry.role, Need::Required);
        file.readString(u"sha256", entry.sha256, Need::Required, 64);
        file.readInt64(u"size", entry.size, IntRange{0, kMaxInt53}, Need::Required);
        if (!file.ok())
            return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: %2")
                            .arg(lease, file.failure().message));
        if (entry.role != QStringView(kRoles[i]))
            return fail(QStringLiteral(
                            "the manifest of lease %1 is signed but malformed: manifest.files[%2] has role "
                            "\"%3\", expected \"%4\"")
                            .arg(lease)
                            .arg(i)
                            .arg(entry.role, QString::fromUtf16(kRoles[i])));
        static const QRegularExpression hex(QStringLiteral("^[0-9a-f]{64}$"));
        if (!hex.match(entry.sha256).hasMatch())
            return fail(QStringLiteral(
                            "the manifest of lease %1 is signed but malformed: manifest.files[%2].sha256 is "
                            "not 64 lowercase hex digits")
                            .arg(lease)
                            .arg(i));
        task.files.append(entry);
    }

    // Optional: patches from earlier weights files (a job whose publications change few values).
    const QJsonValue patchesValue = object->value(QStringLiteral("weights_patches"));
    if (!patchesValue.isUndefined()) {
        const QJsonArray patches = patchesValue.toArray();
        if (!patchesValue.isArray() || patches.size() > kManifestMaxPatches)
            return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: manifest.weights_patches: "
                                       "expected a list of at most %2 patches")
                            .arg(lease)
                            .arg(kManifestMaxPatches));
        static const QRegularExpression hex(QStringLiteral("^[0-9a-f]{64}$"));
        for (qsizetype i = 0; i < patches.size(); ++i) {
            JsonFields patch(patches[i].toObject(), QStringLiteral("manifest.weights_patches[%1]").arg(i));
            ManifestPatch entry;
            patch.readString(u"from_sha256", entry.fromSha256, Need::Required, 64);
            patch.readString(u"sha256", entry.sha256, Need::Required, 64);
            patch.readInt64(u"size", entry.size, IntRange{1, kMaxInt53}, Need::Required);
            if (patch.ok() && (!hex.match(entry.fromSha256).hasMatch() || !hex.match(entry.sha256).hasMatch()))
                patch.fail(u"sha256", QStringLiteral("expected 64 lowercase hex digits"));
            if (!patch.ok())
                return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: %2")
                                .arg(lease, patch.failure().message));
            task.weightsPatches.append(entry);
        }
    }

    // Optional: a checkpoint the workunit's last agent handed back, to resume from. Fetched and hashed like
    // every other file; the worker checks that it belongs to this subtask before it trains from it.
    const QJsonValue resumeValue = object->value(QStringLiteral("resume"));
    if (!resumeValue.isUndefined()) {
        JsonFields resume(resumeValue.toObject(), QStringLiteral("manifest.resume"));
        ManifestFile checkpoint;
        checkpoint.role = QStringLiteral("checkpoint");
        resume.readString(u"sha256", checkpoint.sha256, Need::Required, 64);
        resume.readInt64(u"size", checkpoint.size, IntRange{1, kMaxInt53}, Need::Required);
        resume.readInt64(u"step", task.resumeStep, IntRange{0, kMaxInt53}, Need::Required);
        resume.readString(u"from_lease", task.resumeFromLease, Need::Optional, 64);
        static const QRegularExpression hex(QStringLiteral("^[0-9a-f]{64}$"));
        if (resume.ok() && !hex.match(checkpoint.sha256).hasMatch())
            resume.fail(u"sha256", QStringLiteral("expected 64 lowercase hex digits"));
        if (!resumeValue.isObject())
            return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: manifest.resume: expected "
                                       "an object")
                            .arg(lease));
        if (!resume.ok())
            return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: %2")
                            .arg(lease, resume.failure().message));
        task.files.append(checkpoint);
    }

    // A TorchScript model is the "model" file: the spec names it by the hash the files list signs, so the worker
    // loads exactly the archive that was checked.
    const QJsonValue modelValue = object->value(QStringLiteral("model"));
    if (const QJsonValue script = modelValue.toObject().value(QStringLiteral("torchscript")); !script.isUndefined()) {
        if (script.toString() != QStringLiteral("sha256:") + task.files.first().sha256)
            return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: manifest.model.torchscript "
                                       "does not name the model file %2")
                            .arg(lease, task.files.first().sha256));
        task.scriptModel = true;
    }

    // The same form as a lease id: 32 lowercase hex digits. The worker copies it into the result.
    if (!LeaseId::isValid(task.nonce))
        return fail(QStringLiteral("the manifest of lease %1 is signed but malformed: manifest.nonce is not 32 "
                                   "lowercase hex digits")
                        .arg(lease));
    if (agentId != expected.agentId)
        return fail(
            QStringLiteral("the manifest of lease %1 was issued to agent %2, not to this agent (%3); refused")
                .arg(lease, agentId, expected.agentId));
    // The lease's folder and URLs are built from the expected id: it must be the one that was signed.
    if (signedLease != lease)
        return fail(QStringLiteral("the manifest of lease %1 names lease \"%2\"; refused")
                        .arg(lease, signedLease.left(64)));
    if (normalisedUrl(coordinator) != normalisedUrl(expected.coordinatorUrl))
        return fail(QStringLiteral(
                        "the manifest of lease %1 names coordinator %2, but this agent works for %3; refused")
                        .arg(lease, coordinator, expected.coordinatorUrl));
    return task;
}

Status checkManifestFresh(const TaskManifest& manifest, qint64 nowMs)
{
    const QString lease = manifest.leaseId.toString();
    const qint64 lifetime = manifest.deadlineMs - manifest.issuedMs;
    if (lifetime <= 0 || lifetime > kManifestMaxLeaseMs)
        return fail(
            QStringLiteral("the manifest of lease %1 gives it %2 ms from issue to deadline, outside the "
                           "protocol's 1 ms to 7 days; refused")
                .arg(lease)
                .arg(lifetime));
    if (manifest.deadlineMs + kManifestClockSlackMs < nowMs)
        return fail(
            QStringLiteral("the manifest of lease %1 expired %2 s ago (deadline_ms %3): an old manifest "
                           "sent again, or this machine's clock is wrong; refused, nothing of it was run. "
                           "If this repeats, check the clock (timedatectl)")
                .arg(lease)
                .arg((nowMs - manifest.deadlineMs) / 1000)
                .arg(manifest.deadlineMs));
    if (manifest.issuedMs - kManifestClockSlackMs > nowMs)
        return fail(
            QStringLiteral("the manifest of lease %1 was issued %2 s in the future (issued_ms %3): this "
                           "machine's clock or the coordinator's is wrong; refused. Check the clock "
                           "(timedatectl)")
                .arg(lease)
                .arg((manifest.issuedMs - nowMs) / 1000)
                .arg(manifest.issuedMs));
    return {};
}

} // namespace gleaner::agent
