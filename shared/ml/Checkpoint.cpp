#include "ml/Checkpoint.h"

namespace gleaner::ml {
namespace {
const QString kMarker = QStringLiteral("gleaner.checkpoint");
}

void CheckpointInfo::writeTo(TensorBundle& bundle) const
{
    bundle.setMetadata(kMarker, QStringLiteral("1"));
    bundle.setMetadata(QStringLiteral("fingerprint"), fingerprint);
    bundle.setMetadata(QStringLiteral("epoch"), QString::number(epoch));
    bundle.setMetadata(QStringLiteral("batch"), QString::number(batch));
    bundle.setMetadata(QStringLiteral("samples"), QString::number(samples));
    bundle.setMetadata(QStringLiteral("total_steps"), QString::number(totalSteps));
    bundle.setMetadata(QStringLiteral("loss_sum"), QString::number(lossSum, 'g', 17));
    bundle.setMetadata(QStringLiteral("seconds"), QString::number(seconds, 'g', 17));
}

Result<CheckpointInfo> CheckpointInfo::readFrom(const TensorBundle& bundle)
{
    const auto& meta = bundle.metadata();
    if (meta.value(kMarker) != u"1")
        return fail(
            QStringLiteral("not a Gleaner checkpoint (metadata gleaner.checkpoint is missing or not 1)"));
    CheckpointInfo info;
    info.fingerprint = meta.value(QStringLiteral("fingerprint"));
    bool ok[6] = {};
    info.epoch = meta.value(QStringLiteral("epoch")).toInt(&ok[0]);
    info.batch = meta.value(QStringLiteral("batch")).toLongLong(&ok[1]);
    info.samples = meta.value(QStringLiteral("samples")).toLongLong(&ok[2]);
    info.totalSteps = meta.value(QStringLiteral("total_steps")).toLongLong(&ok[3]);
    info.lossSum = meta.value(QStringLiteral("loss_sum")).toDouble(&ok[4]);
    info.seconds = meta.value(QStringLiteral("seconds")).toDouble(&ok[5]);
    for (bool fieldOk : ok)
        if (!fieldOk)
            return fail(QStringLiteral("checkpoint metadata is incomplete or not numeric"));
    if (info.fingerprint.isEmpty() || info.epoch < 0 || info.batch < 0 || info.samples < 0)
        return fail(QStringLiteral("checkpoint metadata is out of range"));
    return info;
}

} // namespace gleaner::ml
