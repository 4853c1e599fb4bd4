#include "worker/TaskFolder.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>

namespace gleaner::agent {

QString TaskFolder::manifestPath() const { return QDir(dir).filePath(QStringLiteral("manifest.json")); }
QString TaskFolder::modelPath() const { return QDir(dir).filePath(QStringLiteral("model.pt")); }
QString TaskFolder::weightsPath() const { return QDir(dir).filePath(QStringLiteral("weights.safetensors")); }
QString TaskFolder::shardPath() const { return QDir(dir).filePath(QStringLiteral("shard.safetensors")); }
QString TaskFolder::checkpointPath() const { return QDir(dir).filePath(QStringLiteral("checkpoint.safetensors")); }
QString TaskFolder::handedCheckpointPath() const
{
    return QDir(dir).filePath(QStringLiteral("handed-checkpoint.safetensors"));
}
QString TaskFolder::resultPath() const { return QDir(dir).filePath(QStringLiteral("result.safetensors")); }
QString TaskFolder::optimizerInPath() const { return QDir(dir).filePath(QStringLiteral("optimizer-in.safetensors")); }
QString TaskFolder::optimizerOutPath() const { return QDir(dir).filePath(QStringLiteral("optimizer.safetensors")); }
QString TaskFolder::residualInPath() const { return QDir(dir).filePath(QStringLiteral("residual-in.safetensors")); }
QString TaskFolder::residualOutPath() const { return QDir(dir).filePath(QStringLiteral("residual.safetensors")); }

Result<TaskFolder> TaskFolder::open(const QString& dir)
{
    TaskFolder task;
    task.dir = dir;
    QFile file(task.manifestPath());
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot read the task's manifest: %2").arg(file.fileName(), file.errorString()));
    QJsonParseError error;
    const QJsonObject manifest = QJsonDocument::fromJson(file.readAll(), &error).object();
    if (manifest.isEmpty())
        return fail(QStringLiteral("%1: not a manifest (%2)").arg(file.fileName(), error.errorString()));
    const auto where = [&](const char* field) { return QStringLiteral("%1: %2").arg(file.fileName(), QString::fromLatin1(field)); };

    auto model = ModelSpec::fromJson(manifest.value(QStringLiteral("model")).toObject());
    if (!model)
        return fail(where("model") + u": " + model.error());
    task.model = *model;
    // The archive the agent verified against the signed manifest's hash; the worker checks its operators again
    // before the first forward pass (ml::Model::create).
    if (task.model.arch == Architecture::TorchScript)
        task.model.archivePath = task.modelPath();
    const QJsonObject hyper = manifest.value(QStringLiteral("hyperparameters")).toObject();
    auto optimizer = OptimizerSpec::fromJson(hyper.value(QStringLiteral("optimizer")).toObject());
    if (!optimizer)
        return fail(where("hyperparameters.optimizer") + u": " + optimizer.error());
    task.optimizer = *optimizer;
    task.localEpochs = hyper.value(QStringLiteral("local_epochs")).toInt(0);
    task.batchSize = hyper.value(QStringLiteral("batch_size")).toInt(0);
    if (task.localEpochs < 1 || task.batchSize < 1)
        return fail(where("hyperparameters") + QStringLiteral(": local_epochs and batch_size must be positive"));
    // Optional: a speed-aware coordinator sizes each subtask in mini-batches.
    if (const QJsonValue steps = hyper.value(QStringLiteral("steps")); !steps.isUndefined()) {
        task.steps = steps.toInteger(-1);
        if (!steps.isDouble() || task.steps < 1 || task.steps > (qint64(1) << 40))
            return fail(where("hyperparameters.steps") + QStringLiteral(": expected a positive integer"));
    }
    task.seed = quint64(hyper.value(QStringLiteral("seed")).toInteger(0));
    // Optional: random crops and flips. One this worker cannot read is refused rather than dropped: training
    // without it would be a different training from the one the coordinator asked for.
    if (const QJsonValue augment = hyper.value(QStringLiteral("augment")); !augment.isUndefined()) {
        if (!augment.isObject())
            return fail(where("hyperparameters.augment") + QStringLiteral(": expected an object"));
        auto spec = AugmentSpec::fromJson(augment.toObject(), QStringLiteral("hyperparameters.augment"));
        if (!spec)
            return fail(QStringLiteral("%1: %2").arg(file.fileName(), spec.error()));
        if (auto fits = spec->checkInput(task.model.inputShape, QStringLiteral("hyperparameters.augment"));
            !fits)
            return fail(QStringLiteral("%1: %2").arg(file.fileName(), fits.error()));
        task.augment = *spec;
    }
    task.baseVersion = manifest.value(QStringLiteral("base_version")).toInteger(-1);
    if (task.baseVersion < 0)
        return fail(where("base_version") + QStringLiteral(": missing"));
    // An encoding this agent cannot read is no reason to lose the work: full weights are always taken.
    if (const QJsonValue upload = manifest.value(QStringLiteral("upload")); !upload.isUndefined()) {
        auto spec = UploadSpec::fromJson(upload.toObject());
        if (spec)
            task.upload = *spec;
        else
            task.uploadProblem = where("upload") + u": " + spec.error();
    }
    task.leaseId = manifest.value(QStringLiteral("lease_id")).toString();
    task.nonce = manifest.value(QStringLiteral("nonce")).toString();
    if (task.nonce.isEmpty())
        return fail(where("nonce") + QStringLiteral(": missing"));
    QStringList needed{task.weightsPath(), task.shardPath()};
    if (task.model.arch == Architecture::TorchScript)
        needed << task.modelPath();
    for (const QString& needed : needed)
        if (!QFile::exists(needed))
            return fail(QStringLiteral("%1 is missing; the agent prepares it before starting a worker").arg(needed));
    return task;
}

} // namespace gleaner::agent
