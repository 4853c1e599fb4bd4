#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "ml/Checkpoint.h"
#include "ml/WeightMath.h"
#include "ml/Device.h"
#include "ml/TorchInternals.h"
#include "ml/Trainer.h"

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QLoggingCategory>

#include <cmath>
#include <optional>

Q_LOGGING_CATEGORY(lcTrainer, "gleaner.ml.trainer")

namespace gleaner::ml {
namespace {

// libtorch's intra-op thread count and cuDNN's algorithm choice are process-wide. A run sets what it needs
// and puts back what it found when it ends, however it ends, so the caller's settings survive the run.
class RunSettings
{
public:
    RunSettings(int threads, bool cuda) : m_threads(torch::get_num_threads())
    {
        if (threads > 0 && threads != m_threads)
            torch::set_num_threads(threads);
        if (cuda) {
            // cuDNN's benchmark mode picks algorithms by timing them, and some of them are not deterministic.
            auto& context = at::globalContext();
            m_cudnn = {context.deterministicCuDNN(), context.benchmarkCuDNN()};
            context.setDeterministicCuDNN(true);
            context.setBenchmarkCuDNN(false);
        }
    }
    RunSettings(const RunSettings&) = delete;
    RunSettings& operator=(const RunSettings&) = delete;
    ~RunSettings()
    {
        try {
            if (torch::get_num_threads() != m_threads)
                torch::set_num_threads(m_threads);
            if (m_cudnn) {
                at::globalContext().setDeterministicCuDNN(m_cudnn->first);
                at::globalContext().setBenchmarkCuDNN(m_cudnn->second);
            }
        } catch (const std::exception& e) {
            qCWarning(lcTrainer) << "cannot restore libtorch's thread settings:" << e.what();
        }
    }

    // The intra-op thread count in effect: part of what the run's results depend on.
    static int effectiveThreads() { return torch::get_num_threads(); }

private:
    int m_threads;
    std::optional<std::pair<bool, bool>> m_cudnn;
};

QString requestHash(const TrainRequest& request)
{
    return RunIdentity::requestHash(request.model.toJson(), request.optimizer.toJson(), request.localEpochs,
                                    request.batchSize, request.seed, request.steps, request.augment);
}

RunIdentity identityOf(const TrainRequest& request, const QString& device, const QString& shardHash,
                       const QString& initialWeightsHash, int threads)
{
    RunIdentity identity;
    identity.request = requestHash(request);
    identity.shard = shardHash;
    identity.initialWeights = initialWeightsHash;
    identity.threads = threads;
    identity.device = device;
    identity.torchVersion = torchVersion();
    return identity;
}

} // namespace

QString TrainRequest::fingerprint(const Dataset& shard, const TensorBundle& initialWeights) const
{
    return guardedOr(QStringLiteral("fingerprint of a training request"), QString(), [&] {
        const auto resolved = resolveDevice(device);
        const RunSettings settings(threads, false);
        return identityOf(*this, resolved ? *resolved : device, Checkpoint::contentHash(shard.bundle()),
                          Checkpoint::contentHash(initialWeights), RunSettings::effectiveThreads())
            .fingerprint();
    });
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

Status checkRequest(const TrainRequest& request, const Dataset& shard)
{
    if (request.batchSize < 1)
        return fail(QStringLiteral("the batch size is %1; it must be at least 1").arg(request.batchSize));
    if (request.localEpochs < 1)
        return fail(QStringLiteral("the number of local epochs is %1; it must be at least 1")
                        .arg(request.localEpochs));
    if (request.steps < 0)
        return fail(QStringLiteral("steps is %1; use 0 for whole local epochs or a positive count").arg(request.steps));
    if (request.threads < 0)
        return fail(QStringLiteral("threads is %1; use 0 for libtorch's default or a positive count")
                        .arg(request.threads));
    if (auto s = request.augment.checkInput(request.model.inputShape); !s)
        return s;
    return checkModelInput(request.model, shard, QStringLiteral("the shard"));
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
        return model.impl().net->parameters();
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
    for (const auto& [name, tensor] : namedWeights(*m_model.impl().net))
        if (auto s = addTensor(bundle, Checkpoint::modelPrefix() + QString::fromStdString(name), tensor); !s)
            return s;
    if (auto s = m_optimizer.exportState(bundle, Checkpoint::optimizerPrefix()); !s)
        return s;
    m_state.writeTo(bundle); // last: its checksum covers every tensor
    if (auto saved = SafeTensors::save(m_request.checkpointPath, bundle); !saved)
        return fail(QStringLiteral("cannot write the checkpoint: %1; check that its folder exists and is "
                                   "writable, or change the checkpoint path")
                        .arg(saved.error()));
    ++m_checkpoints;
    return {};
}

Result<TrainOutcome> Run::execute(const TrainHooks& hooks)
{
    Model::Impl& net = m_model.impl();
    net.net->train(true);

    // Read-only views of the shard on the CPU (batches are gathered with index_select, which copies only the
    // batch); one copy to the device on CUDA.
    auto x = constView(m_shard.bundle(), m_shard.x());
    auto y = constView(m_shard.bundle(), m_shard.y());
    if (!x || !y)
        return fail(x ? y.error() : x.error());
    const torch::Tensor samples = x->to(net.device);
    const torch::Tensor labels = y->to(net.device);

    const qint64 count = m_shard.size();
    const qint64 batchSize = m_request.batchSize;
    const qint64 stepsPerEpoch = (count + batchSize - 1) / batchSize;
    const qint64 totalSteps = m_request.steps > 0 ? m_request.steps : stepsPerEpoch * m_request.localEpochs;
    const int epochs = int((totalSteps + stepsPerEpoch - 1) / stepsPerEpoch);
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

    for (int epoch = m_state.epoch; epoch < epochs && m_state.totalSteps < totalSteps; ++epoch) {
        const torch::Tensor order = epochOrder(m_request.seed, epoch, count).to(net.device);
        for (qint64 batch = (epoch == m_state.epoch ? m_state.batch : 0);
             batch < stepsPerEpoch && m_state.totalSteps < totalSteps; ++batch) {
            QElapsedTimer timer;
            timer.start();
            const qint64 begin = batch * batchSize;
            const qint64 end = std::min(count, begin + batchSize);
            const torch::Tensor index = order.slice(0, begin, end);
            const torch::Tensor input =
                asModelInput(augmentBatch(samples.index_select(0, index), m_request.augment,
                                          m_request.model.inputShape, m_request.seed, epoch, batch));
            const torch::Tensor target = labels.index_select(0, index);

            if (hooks.learningRate)
                m_optimizer.setLearningRate(hooks.learningRate(m_state.samples));
            m_optimizer.zeroGrad();
            torch::Tensor logits;
            if (net.net->drawsRandomness()) {
                // Dropout's masks depend on the subtask's seed and the mini-batch alone, as the data order does.
                const std::lock_guard lock(generatorLock());
                torch::manual_seed(m_request.seed * 0xD1B54A32D192ED03ULL + quint64(epoch) * 0x9E3779B97F4A7C15ULL +
                                   quint64(batch) + 1);
                logits = net.forward(input);
            } else {
                logits = net.forward(input);
            }
            const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, target);
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

            const bool last = m_state.totalSteps >= totalSteps;
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

    auto weights = exportWeights(net);
    if (!weights)
        return fail(weights.error());
    outcome.weights = std::move(*weights);
    if (auto s = m_optimizer.exportState(outcome.optimizerState, QString()); !s)
        return fail(s.error());
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
    const auto train = [&]() -> Result<TrainOutcome> {
        if (auto s = checkRequest(request, shard); !s)
            return fail(s.error());
        auto model = Model::create(request.model, request.seed, request.device);
        if (!model)
            return fail(model.error());
        if (auto s = model->setWeights(initialWeights); !s)
            return fail(QStringLiteral("starting weights: %1").arg(s.error()));
        const RunSettings settings(request.threads, model->impl().device.is_cuda());
        CheckpointInfo start;
        start.run = identityOf(request, model->device(), Checkpoint::contentHash(shard.bundle()),
                               Checkpoint::contentHash(initialWeights), RunSettings::effectiveThreads());
        Run run(request, shard, std::move(*model), start);
        if (!request.optimizerState.isEmpty()) {
            QString where;
            if (!WeightMath::allFinite(request.optimizerState, &where))
                return fail(QStringLiteral("the optimizer state to start from holds NaN or infinite values in \"%1\"")
                                .arg(where));
            if (auto s = run.optimizer().importState(request.optimizerState, QString()); !s)
                return fail(QStringLiteral("the optimizer state to start from: %1").arg(s.error()));
        }
        return run.execute(hooks);
    };
    return guarded(QStringLiteral("training"), train);
}

Result<TrainOutcome> Trainer::resume(const TrainRequest& request, const Dataset& shard,
                                     const TrainHooks& hooks)
{
    const QString& path = request.checkpointPath;
    const QString afresh = QStringLiteral("; start the subtask afresh");
    const auto resume = [&]() -> Result<TrainOutcome> {
        if (path.isEmpty())
            return fail(
                QStringLiteral("the request names no checkpoint to resume from; set its checkpoint path "
                               "or start the subtask with train()"));
        if (auto s = checkRequest(request, shard); !s)
            return fail(s.error());
        auto bundle = SafeTensors::load(path);
        if (!bundle)
            return fail(bundle.error() + afresh);
        auto info = CheckpointInfo::readFrom(*bundle);
        if (!info)
            return fail(QStringLiteral("%1: %2").arg(path, info.error()));

        auto model = Model::create(request.model, request.seed, request.device);
        if (!model)
            return fail(model.error());
        const RunSettings settings(request.threads, model->impl().device.is_cuda());
        // The starting weights are not at hand any more: their hash comes from the checkpoint, whose checksum
        // vouches for it; everything else is recomputed from what this call was given.
        const bool adopting = !request.adoptFromWeights.isEmpty();
        const RunIdentity current =
            identityOf(request, model->device(), Checkpoint::contentHash(shard.bundle()),
                       adopting ? request.adoptFromWeights : info->run.initialWeights,
                       RunSettings::effectiveThreads());
        const QString why = adopting ? info->run.mismatchForAdoption(current) : info->run.mismatch(current);
        if (!why.isEmpty())
            return fail(QStringLiteral("%1: %2").arg(path, why));
        if (adopting) {
            // Another machine wrote it: nothing in it may poison the run, nor the result's counts (the coordinator
            // would refuse a result whose samples a forged checkpoint raised). Later checkpoints are this run's own.
            const qint64 stepsPerEpoch = (shard.size() + request.batchSize - 1) / request.batchSize;
            const qint64 maxSteps = request.steps > 0 ? request.steps : stepsPerEpoch * request.localEpochs;
            if (const QString wrong = info->progressMismatch(shard.size(), request.batchSize, maxSteps);
                !wrong.isEmpty())
                return fail(QStringLiteral("%1: the handed-back checkpoint's progress is impossible: %2")
                                .arg(path, wrong));
            QString where;
            if (!WeightMath::allFinite(*bundle, &where))
                return fail(QStringLiteral("%1: the handed-back checkpoint holds NaN or infinite values in \"%2\"")
                                .arg(path, where));
            info->run = current;
        }

        if (auto s = model->setWeights(stripPrefix(*bundle, Checkpoint::modelPrefix())); !s)
            return fail(QStringLiteral("%1: %2").arg(path, s.error()) + afresh);
        Run run(request, shard, std::move(*model), *info);
        if (auto s = run.optimizer().importState(*bundle, Checkpoint::optimizerPrefix()); !s)
            return fail(QStringLiteral("%1: %2").arg(path, s.error()) + afresh);
        return run.execute(hooks);
    };
    return guarded(QStringLiteral("resuming training from %1").arg(path), resume);
}

} // namespace gleaner::ml
