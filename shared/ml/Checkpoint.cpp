#include "ml/Checkpoint.h"

#include "crypto/Sha256.h"

#include <QJsonDocument>
#include <QStringList>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace gleaner::ml {
namespace {

const QString kMarker = QStringLiteral("gleaner.checkpoint");
const QString kVersion = QStringLiteral("2");
const QString kChecksum = QStringLiteral("checksum");

void addField(Sha256& hash, QStringView text)
{
    hash.addData(text.toUtf8());
    hash.addData(QByteArrayView("\0", 1)); // a separator no field contains, so fields cannot run together
}

void addTensors(Sha256& hash, const TensorBundle& bundle)
{
    std::vector<const TensorEntry*> entries;
    for (const auto& entry : bundle.entries())
        entries.push_back(&entry);
    std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->name < b->name; });
    for (const TensorEntry* entry : entries) {
        addField(hash, entry->name);
        addField(hash, dtypeName(entry->dtype));
        addField(hash, shapeToString(entry->shape));
        hash.addData(bundle.data(*entry));
    }
}

QString checksum(const TensorBundle& bundle)
{
    Sha256 hash;
    addTensors(hash, bundle);
    for (auto it = bundle.metadata().cbegin(); it != bundle.metadata().cend(); ++it) {
        if (it.key() == kChecksum)
            continue;
        addField(hash, it.key());
        addField(hash, it.value());
    }
    return Sha256::toHex(hash.result());
}

QString threadsText(int threads)
{
    return threads == 1 ? QStringLiteral("1 thread") : QStringLiteral("%1 threads").arg(threads);
}

} // namespace

QString Checkpoint::contentHash(const TensorBundle& bundle)
{
    Sha256 hash;
    addTensors(hash, bundle);
    return Sha256::toHex(hash.result());
}

QString RunIdentity::fingerprint() const
{
    Sha256 hash;
    for (const QString& part :
         {request, shard, initialWeights, QString::number(threads), device, torchVersion})
        addField(hash, part);
    return Sha256::toHex(hash.result());
}

QString RunIdentity::mismatch(const RunIdentity& current) const
{
    const QString afresh = QStringLiteral("start the subtask afresh");
    if (current.request != request)
        return QStringLiteral(
                   "the checkpoint was written for another model, optimizer, number of local epochs, "
                   "batch size, seed or augmentation; resume with the request that wrote it or %1")
            .arg(afresh);
    if (current.shard != shard)
        return QStringLiteral("the checkpoint was written for another shard (SHA-256 %1, this one is %2); "
                              "resume with the shard it was written for or %3")
            .arg(shard.left(16), current.shard.left(16), afresh);
    if (current.threads != threads)
        return QStringLiteral("the checkpoint was written with %1 and this run uses %2, which changes the "
                              "results; resume with threads=%3 or %4")
            .arg(threadsText(threads), threadsText(current.threads))
            .arg(threads)
            .arg(afresh);
    if (current.device != device)
        return QStringLiteral(
                   "the checkpoint was written on device %1 and this run uses %2; resume on %1 or %3")
            .arg(device, current.device, afresh);
    if (current.torchVersion != torchVersion)
        return QStringLiteral("the checkpoint was written with libtorch %1 and this is libtorch %2; %3")
            .arg(torchVersion, current.torchVersion, afresh);
    return {};
}

QString RunIdentity::mismatchForAdoption(const RunIdentity& current) const
{
    const QString afresh = QStringLiteral("the subtask starts afresh");
    if (current.request != request)
        return QStringLiteral(
                   "the handed-back checkpoint was written for another model, optimizer, number of local "
                   "epochs, batch size, seed, subtask size or augmentation; %1")
            .arg(afresh);
    if (current.shard != shard)
        return QStringLiteral("the handed-back checkpoint was written for another shard (SHA-256 %1, this one is "
                              "%2); %3")
            .arg(shard.left(16), current.shard.left(16), afresh);
    if (current.initialWeights != initialWeights)
        return QStringLiteral("the handed-back checkpoint started from other weights (SHA-256 %1, the lease's are "
                              "%2); %3")
            .arg(initialWeights.left(16), current.initialWeights.left(16), afresh);
    return {};
}

QString RunIdentity::requestHash(const QJsonObject& model, const QJsonObject& optimizer, int localEpochs,
                                 int batchSize, quint64 seed, qint64 steps, const AugmentSpec& augment)
{
    QJsonObject json;
    json.insert(QStringLiteral("model"), model);
    json.insert(QStringLiteral("optimizer"), optimizer);
    json.insert(QStringLiteral("local_epochs"), localEpochs);
    json.insert(QStringLiteral("batch_size"), batchSize);
    json.insert(QStringLiteral("seed"), QString::number(seed));
    if (steps > 0) // absent when unset: fingerprints of earlier checkpoints stay valid
        json.insert(QStringLiteral("steps"), QString::number(steps));
    if (augment.enabled()) // the same: absent when off
        json.insert(QStringLiteral("augment"), augment.toJson());
    return Sha256::toHex(Sha256::hash(QJsonDocument(json).toJson(QJsonDocument::Compact)));
}

void CheckpointInfo::writeTo(TensorBundle& bundle) const
{
    bundle.setMetadata(kMarker, kVersion);
    bundle.setMetadata(QStringLiteral("fingerprint"), run.fingerprint());
    bundle.setMetadata(QStringLiteral("request_sha256"), run.request);
    bundle.setMetadata(QStringLiteral("shard_sha256"), run.shard);
    bundle.setMetadata(QStringLiteral("initial_weights_sha256"), run.initialWeights);
    bundle.setMetadata(QStringLiteral("threads"), QString::number(run.threads));
    bundle.setMetadata(QStringLiteral("device"), run.device);
    bundle.setMetadata(QStringLiteral("torch_version"), run.torchVersion);
    bundle.setMetadata(QStringLiteral("epoch"), QString::number(epoch));
    bundle.setMetadata(QStringLiteral("batch"), QString::number(batch));
    bundle.setMetadata(QStringLiteral("samples"), QString::number(samples));
    bundle.setMetadata(QStringLiteral("total_steps"), QString::number(totalSteps));
    bundle.setMetadata(QStringLiteral("loss_sum"), QString::number(lossSum, 'g', 17));
    bundle.setMetadata(QStringLiteral("seconds"), QString::number(seconds, 'g', 17));
    bundle.setMetadata(kChecksum, checksum(bundle));
}

Result<CheckpointInfo> CheckpointInfo::readFrom(const TensorBundle& bundle)
{
    const auto& meta = bundle.metadata();
    const QString version = meta.value(kMarker);
    if (version == u"1")
        return fail(QStringLiteral("the checkpoint was written by an older Gleaner (format 1) and cannot be "
                                   "resumed; start the subtask afresh"));
    if (version != kVersion)
        return fail(
            QStringLiteral("not a Gleaner checkpoint (metadata gleaner.checkpoint is \"%1\", expected "
                           "\"%2\"); start the subtask afresh")
                .arg(version, kVersion));
    if (meta.value(kChecksum) != checksum(bundle))
        return fail(QStringLiteral("the checkpoint is damaged (its tensors or metadata do not match the "
                                   "recorded checksum); start the subtask afresh"));
    CheckpointInfo info;
    info.run.request = meta.value(QStringLiteral("request_sha256"));
    info.run.shard = meta.value(QStringLiteral("shard_sha256"));
    info.run.initialWeights = meta.value(QStringLiteral("initial_weights_sha256"));
    info.run.device = meta.value(QStringLiteral("device"));
    info.run.torchVersion = meta.value(QStringLiteral("torch_version"));
    bool ok[7] = {};
    info.run.threads = meta.value(QStringLiteral("threads")).toInt(&ok[0]);
    info.epoch = meta.value(QStringLiteral("epoch")).toInt(&ok[1]);
    info.batch = meta.value(QStringLiteral("batch")).toLongLong(&ok[2]);
    info.samples = meta.value(QStringLiteral("samples")).toLongLong(&ok[3]);
    info.totalSteps = meta.value(QStringLiteral("total_steps")).toLongLong(&ok[4]);
    info.lossSum = meta.value(QStringLiteral("loss_sum")).toDouble(&ok[5]);
    info.seconds = meta.value(QStringLiteral("seconds")).toDouble(&ok[6]);
    const char* const names[] = {"threads", "epoch", "batch", "samples", "total_steps", "loss_sum", "seconds"};
    for (size_t i = 0; i < std::size(ok); ++i)
        if (!ok[i])
            return fail(QStringLiteral("the checkpoint's %1 is missing or not a number; start the subtask afresh")
                            .arg(QLatin1String(names[i])));
    if (info.run.request.isEmpty() || info.run.shard.isEmpty() || info.run.initialWeights.isEmpty() ||
        info.run.device.isEmpty() || info.run.threads < 1 || info.epoch < 0 || info.batch < 0 ||
        info.samples < 0 || info.totalSteps < 0)
        return fail(
            QStringLiteral("checkpoint metadata is missing or out of range; start the subtask afresh"));
    // QString::toDouble reads "nan" and "inf": the sums are bounded here, once, for every reader.
    if (!std::isfinite(info.lossSum) || info.lossSum < 0)
        return fail(QStringLiteral("the checkpoint's loss_sum is %1; a sum of losses is a finite number, not "
                                   "negative; start the subtask afresh")
                        .arg(info.lossSum));
    if (!std::isfinite(info.seconds) || info.seconds < 0)
        return fail(QStringLiteral("the checkpoint's seconds is %1; a training time is a finite number, not "
                                   "negative; start the subtask afresh")
                        .arg(info.seconds));
    if (meta.value(QStringLiteral("fingerprint")) != info.run.fingerprint())
        return fail(QStringLiteral("the checkpoint's fingerprint does not match its recorded run; start the "
                                   "subtask afresh"));
    return info;
}

QString CheckpointInfo::progressMismatch(qint64 shardSamples, qint64 batchSize, qint64 maxSteps) const
{
    if (shardSamples < 1 || batchSize < 1 || maxSteps < 0)
        return QStringLiteral("the subtask has %1 samples in mini-batches of %2: no checkpoint fits it")
            .arg(shardSamples)
            .arg(batchSize);
    // Each count is bounded before any arithmetic on it: a hostile file may claim any 64-bit value.
    const qint64 stepsPerPass = (shardSamples + batchSize - 1) / batchSize;
    const qint64 maxPasses = maxSteps / stepsPerPass + 1;
    if (epoch < 0 || epoch > maxPasses || batch < 0 || batch >= stepsPerPass)
        return QStringLiteral("epoch %1, batch %2: a pass over the shard has %3 mini-batches, the subtask %4 "
                              "in all")
            .arg(epoch)
            .arg(batch)
            .arg(stepsPerPass)
            .arg(maxSteps);
    const qint64 step = qint64(epoch) * stepsPerPass + batch;
    if (step > maxSteps)
        return QStringLiteral("epoch %1, batch %2 is mini-batch %3; the subtask has %4")
            .arg(epoch)
            .arg(batch)
            .arg(step)
            .arg(maxSteps);
    if (totalSteps != step)
        return QStringLiteral("total_steps is %1; epoch %2, batch %3 is mini-batch %4")
            .arg(totalSteps)
            .arg(epoch)
            .arg(batch)
            .arg(step);
    // A full pass trains every sample once; within a pass every mini-batch before the last is full.
    const qint64 trained = qint64(epoch) * shardSamples + batch * batchSize;
    if (samples != trained)
        return QStringLiteral("samples is %1; %2 mini-batches of %3 over a shard of %4 samples train exactly %5")
            .arg(samples)
            .arg(step)
            .arg(batchSize)
            .arg(shardSamples)
            .arg(trained);
    if (!(lossSum >= 0 && lossSum <= double(samples) * kMaxLossPerSample))
        return QStringLiteral("loss_sum is %1; %2 samples sum to at most %3")
            .arg(lossSum, 0, 'g', 6)
            .arg(samples)
            .arg(double(samples) * kMaxLossPerSample, 0, 'g', 6);
    if (!(seconds >= 0 && seconds <= kMaxSeconds))
        return QStringLiteral("seconds is %1; a subtask trains at most %2 seconds")
            .arg(seconds, 0, 'g', 6)
            .arg(kMaxSeconds, 0, 'g', 6);
    return {};
}

} // namespace gleaner::ml
