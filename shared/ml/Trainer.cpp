#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "ml/Checkpoint.h"
#include "ml/TorchInternals.h"
#include "ml/Trainer.h"

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QLoggingCategory>

#include <cmath>

Q_LOGGING_CATEGORY(lcTrainer, "gleaner.ml.trainer")

namespace gleaner::ml {

QString TrainRequest::fingerprint(qint64 shardSamples) const
{
    QJsonObject json;
    json.insert(QStringLiteral("model"), model.toJson());
    json.insert(QStringLiteral("optimizer"), optimizer.toJson());
    json.insert(QStringLiteral("local_epochs"), localEpochs);
    json.insert(QStringLiteral("batch_size"), batchSize);
    json.insert(QStringLiteral("seed"), QString::number(seed));
    json.insert(QStringLiteral("samples"), shardSamples);
    return QString::fromLatin1(Sha256::hash(QJsonDocument(json).toJson(QJsonDocument::Compact)).toHex());
}

namespace {

// The order of local epoch `epoch`: a permutation drawn from its own generator, so resuming mid-epoch needs
// only the epoch number, and the order does not depend on anything else the process did with random numbers.
torch::Tensor epochOrder(quint64 seed, int epoch, qint64 samples)
{
    auto generator = at::detail::createCPUGenerator(seed * 0x9E3779B97F4A7C15ULL + quint64(epoch) + 1);
    return torch::randperm(samples, generator, torch::TensorOptions().dtype(torch::kInt64));
}

torch::Tensor asModelInput(const torch::Tensor& samples)
{
    // U8 pixels become [0, 1]; F32 datasets are taken as they are.
    return samples.scalar_type() == torch::kUInt8 ? samples.to(torch::kFloat32).div_(255.0) : samples;
}

Status checkShard(const TrainRequest& request, const Dataset& shard)
{
    if (shard.isEmpty())
        return fail(QStringLiteral("the shard holds no samples"));
    if (shard.sampleShape() != request.model.inputShape && request.model.arch != Architecture::Mlp)
        return fail(QStringLiteral("the shard's samples have shape %1 but the model expects %2")
                        .arg(shapeToString(shard.sampleShape()), shapeToString(request.model.inputShape)));
    if (shard.labelBound() > request.model.numClasses)
        return fail(QStringLiteral("the shard has label %1 but the model has %2 classes")
                        .arg(shard.labelBound() - 1)
                        .arg(request.model.numClasses));
    if (request.batchSize < 1 || request.localEpochs < 1)
        return fail(QStringLiteral("batch size and local epochs must be at least 1"));
    return {};
}

// Model, optimizer and position of one training run, and the checkpoints it writes.
class Run
{
public:
    Run(const TrainRequest& request, const Dataset& shard, Model model, CheckpointInfo state)
        : m_request(request), m_shard(shard), m_model(std::move(model)),
          m_optimizer(request.optimizer, namedParameters(m_model)), m_state(std::move(state))
    {
    }

    LocalOptimizer& optimizer() { return m_optimizer; }

    Result<TrainOutcome> execute(const TrainHooks& hooks);

private:
    static std::vector<std::pair<std::string, torch::Tensor>> namedParameters(Model& model)
    {
        std::vector<std::pair<std::string, torch::Tensor>> out;
        for (const auto& item : model.impl().module->named_parameters(true))
            out.emplace_back(item.key(), item.value());
        return out;
    }

    Status writeCheckpoint();

    const TrainRequest& m_request;
    const Dataset& m_shard;
    Model m_model;
    LocalOptimizer m_optimizer;
    CheckpointInfo m_state;
    int m_checkpoints = 0;
};

Status Run::writeCheckpoint()
{
    TensorBundle bundle;
    const TensorBundle weights = m_model.weights();
    for (const auto& entry : weights.entries())
        if (auto s = bundle.add(Checkpoint::modelPrefix() + entry.name, entry.dtype, entry.shape,
                                weights.data(entry));
            !s)
            return s;
    if (auto s = m_optimizer.exportState(bundle, Checkpoint::optimizerPrefix()); !s)
        return s;
    {
        auto generator = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(generator.mutex());
        if (auto s = addTensor(bundle, Checkpoint::rngTensor(), generator.get_state()); !s)
            return s;
    }
    m_state.writeTo(bundle);
    if (auto saved = SafeTensors::save(m_request.checkpointPath, bundle); !saved)
        return fail(QStringLiteral("cannot write the checkpoint: %1").arg(saved.error()));
    ++m_checkpoints;
    return {};
}

Result<TrainOutcome> Run::execute(const TrainHooks& hooks)
{
    if (m_request.threads > 0)
        torch::set_num_threads(m_request.threads);
    Model::Impl& net = m_model.impl();
    net.module->train();

    auto x = toTensor(m_shard.bundle(), m_shard.x());
    auto y = toTensor(m_shard.bundle(), m_shard.y());
    if (!x || !y)
        return fail(x ? y.error() : x.error());
    const torch::Tensor samples = x->to(net.device);
    const torch::Tensor labels = y->to(net.device);

    const qint64 count = m_shard.size();
    const qint64 batchSize = m_request.batchSize;
    const qint64 stepsPerEpoch = (count + batchSize - 1) / batchSize;
    const qint64 totalSteps = stepsPerEpoch * m_request.localEpochs;
    const double secondsBefore = m_state.seconds;
    double computeSeconds = 0.0; // excludes time the caller spent paused in the hook
    double sinceCheckpoint = 0.0;

    TrainOutcome outcome;
    const auto finish = [&](TrainOutcome::Status status) {
        outcome.status = status;
        outcome.meanLoss = m_state.samples > 0 ? m_state.lossSum / double(m_state.samples) : 0.0;
        outcome.samples = m_state.samples;
        outcome.steps = m_state.totalSteps;
        outcome.seconds = m_state.seconds;
        outcome.checkpointsWritten = m_checkpoints;
        return outcome;
    };

    for (int epoch = m_state.epoch; epoch < m_request.localEpochs; ++epoch) {
        const torch::Tensor order = epochOrder(m_request.seed, epoch, count).to(net.device);
        for (qint64 batch = (epoch == m_state.epoch ? m_state.batch : 0); batch < stepsPerEpoch; ++batch) {
            QElapsedTimer timer;
            timer.start();
            const qint64 begin = batch * batchSize;
            const qint64 end = std::min(count, begin + batchSize);
            const torch::Tensor index = order.slice(0, begin, end);
            const torch::Tensor input = asModelInput(samples.index_select(0, index));
            const torch::Tensor target = labels.index_select(0, index);

            m_optimizer.zeroGrad();
            const torch::Tensor loss = torch::nn::functional::cross_entropy(net.forward(input), target);
            loss.backward();
            const double lossValue = loss.item<double>();
            if (!std::isfinite(lossValue))
                return fail(
                    QStringLiteral("training diverged: the loss is %1 at local epoch %2, mini-batch %3; "
                                   "lower the learning rate")
                        .arg(lossValue)
                        .arg(epoch + 1)
                        .arg(batch + 1));
            m_optimizer.step();

            m_state.lossSum += lossValue * double(end - begin);
            m_state.samples += end - begin;
            m_state.totalSteps += 1;
            const bool epochDone = batch + 1 == stepsPerEpoch;
            m_state.epoch = epochDone ? epoch + 1 : epoch;
            m_state.batch = epochDone ? 0 : batch + 1;
            const double elapsed = double(timer.nsecsElapsed()) / 1e9;
            computeSeconds += elapsed;
            sinceCheckpoint += elapsed;
            m_state.seconds = secondsBefore + computeSeconds;

            TrainControl control = TrainControl::Continue;
            if (hooks.betweenBatches) {
                TrainProgress progress;
                progress.epoch = epoch;
                progress.step = m_state.totalSteps;
                progress.totalSteps = totalSteps;
                progress.samples = m_state.samples;
                progress.meanLoss = m_state.lossSum / double(m_state.samples);
                progress.seconds = m_state.seconds;
                progress.samplesPerSecond =
                    m_state.seconds > 0 ? double(m_state.samples) / m_state.seconds : 0;
                control = hooks.betweenBatches(progress);
            }
            if (control == TrainControl::Cancel)
                return finish(TrainOutcome::Status::Cancelled);

            const bool last = m_state.epoch == m_request.localEpochs;
            const bool periodic = m_request.checkpointIntervalSeconds > 0 &&
                                  sinceCheckpoint >= m_request.checkpointIntervalSeconds && !last;
            const bool wanted =
                control == TrainControl::Checkpoint || control == TrainControl::CheckpointAndStop;
            if ((periodic || wanted) && !m_request.checkpointPath.isEmpty()) {
                if (auto s = writeCheckpoint(); !s)
                    return fail(s.error());
                sinceCheckpoint = 0.0;
            } else if (wanted) {
                qCWarning(lcTrainer) << "checkpoint requested but the request names no checkpoint path";
            }
            if (control == TrainControl::CheckpointAndStop && !last)
                return finish(TrainOutcome::Status::Stopped);
        }
    }

    outcome.weights = m_model.weights();
    return finish(TrainOutcome::Status::Finished);
}

TensorBundle stripPrefix(const TensorBundle& bundle, QStringView prefix)
{
    TensorBundle out;
    for (const auto& entry : bundle.entries())
        if (entry.name.startsWith(prefix))
            (void)out.add(entry.name.mid(prefix.size()), entry.dtype, entry.shape, bundle.data(entry));
    return out;
}

} // namespace

Result<TrainOutcome> Trainer::train(const TrainRequest& request, const TensorBundle& initialWeights,
                                    const Dataset& shard, const TrainHooks& hooks)
{
    if (auto s = checkShard(request, shard); !s)
        return fail(s.error());
    auto model = Model::create(request.model, request.seed, request.device);
    if (!model)
        return fail(model.error());
    if (auto s = model->setWeights(initialWeights); !s)
        return fail(QStringLiteral("starting weights: %1").arg(s.error()));
    torch::manual_seed(request.seed);
    CheckpointInfo start;
    start.fingerprint = request.fingerprint(shard.size());
    Run run(request, shard, std::move(*model), start);
    return run.execute(hooks);
}

Result<TrainOutcome> Trainer::resume(const TrainRequest& request, const Dataset& shard,
                                     const TrainHooks& hooks)
{
    if (auto s = checkShard(request, shard); !s)
        return fail(s.error());
    auto bundle = SafeTensors::load(request.checkpointPath);
    if (!bundle)
        return fail(bundle.error());
    auto info = CheckpointInfo::readFrom(*bundle);
    if (!info)
        return fail(QStringLiteral("%1: %2").arg(request.checkpointPath, info.error()));
    if (info->fingerprint != request.fingerprint(shard.size()))
        return fail(QStringLiteral("%1: the checkpoint was written for another model, optimizer, shard or "
                                   "settings; start the subtask afresh")
                        .arg(request.checkpointPath));

    auto model = Model::create(request.model, request.seed, request.device);
    if (!model)
        return fail(model.error());
    if (auto s = model->setWeights(stripPrefix(*bundle, Checkpoint::modelPrefix())); !s)
        return fail(QStringLiteral("%1: %2").arg(request.checkpointPath, s.error()));

    const TensorEntry* rng = bundle->find(Checkpoint::rngTensor());
    if (!rng)
        return fail(
            QStringLiteral("%1: the checkpoint lacks the generator state").arg(request.checkpointPath));
    auto rngState = toTensor(*bundle, *rng);
    if (!rngState)
        return fail(rngState.error());

    Run run(request, shard, std::move(*model), *info);
    if (auto s = run.optimizer().importState(*bundle, Checkpoint::optimizerPrefix()); !s)
        return fail(QStringLiteral("%1: %2").arg(request.checkpointPath, s.error()));
    {
        auto generator = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(*rngState);
    }
    return run.execute(hooks);
}

} // namespace gleaner::ml
