#include "aggregation/UpdateChecker.h"

#include "format/SafeTensors.h"
#include "ml/WeightMath.h"

#include <QFile>

#include <cmath>

namespace gleaner::coordinator::UpdateChecker {

qint64 maxUploadBytes(const TensorBundle& schema)
{
    // Names, shapes and offsets in JSON take well under 200 bytes a tensor; metadata is a few short strings.
    return schema.tensorBytes() + 256 * schema.size() + 64 * 1024;
}

Result<ReceivedUpdate> check(const QString& path, const TensorBundle& schema)
{
    // Read here and parsed from memory: the agent's messages must not carry the coordinator's file names.
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly | QIODevice::Unbuffered))
        return fail(QStringLiteral("the coordinator cannot read the upload back; try again later"));
    auto bundle = SafeTensors::parse(file.readAll());
    if (!bundle)
        return fail(QStringLiteral("the result is not a valid safetensors file: %1").arg(bundle.error()));
    if (auto s = ml::WeightMath::checkCompatible(schema, *bundle); !s)
        return fail(QStringLiteral("the result does not match the model: %1").arg(s.error()));
    QString where;
    if (!ml::WeightMath::allFinite(*bundle, &where))
        return fail(QStringLiteral("the result holds NaN or infinite values in tensor \"%1\"").arg(where));

    ReceivedUpdate update;
    const auto& meta = bundle->metadata();
    bool ok = false;
    update.baseVersion = meta.value(QStringLiteral("gleaner.base_version")).toLongLong(&ok);
    if (!ok || update.baseVersion < 0)
        return fail(QStringLiteral("the result's metadata lacks gleaner.base_version (the version it trained from)"));
    update.samples = meta.value(QStringLiteral("gleaner.samples")).toLongLong(&ok);
    if (!ok || update.samples <= 0)
        return fail(QStringLiteral("the result's metadata lacks a positive gleaner.samples"));
    update.loss = meta.value(QStringLiteral("gleaner.loss"), QStringLiteral("0")).toDouble(&ok);
    if (!ok || !std::isfinite(update.loss))
        return fail(QStringLiteral("the result's gleaner.loss is not a finite number"));
    update.trainSeconds = meta.value(QStringLiteral("gleaner.train_seconds"), QStringLiteral("0")).toDouble(&ok);
    if (!ok || !std::isfinite(update.trainSeconds) || update.trainSeconds < 0)
        return fail(QStringLiteral("the result's gleaner.train_seconds is not a non-negative number"));
    update.weights = std::move(*bundle);
    return update;
}

} // namespace gleaner::coordinator::UpdateChecker
