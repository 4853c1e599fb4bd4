#include "worker/WorkerRun.h"

#include "codec/UpdateCodec.h"
#include "format/SafeTensors.h"
#include "ml/Checkpoint.h"
#include "ml/Trainer.h"
#include "worker/ProcessPriority.h"
#include "worker/TaskFolder.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QSaveFile>

#include <chrono>
#include <new>

namespace gleaner::agent {

void WorkerControl::pause()
{
    std::lock_guard lock(m_mutex);
    m_paused = true;
    ++m_generation;
    m_changed.notify_all();
}

void WorkerControl::resume()
{
    std::lock_guard lock(m_mutex);
    m_paused = false;
    ++m_generation;
    m_changed.notify_all();
}

void WorkerControl::requestCheckpoint()
{
    std::lock_guard lock(m_mutex);
    if (m_pending == Command::None)
        m_pending = Command::Checkpoint;
    ++m_generation;
    m_changed.notify_all();
}

void WorkerControl::stop()
{
    std::lock_guard lock(m_mutex);
    if (m_pending != Command::Cancel)
        m_pending = Command::Stop;
    ++m_generation;
    m_changed.notify_all();
}

void WorkerControl::cancel()
{
    std::lock_guard lock(m_mutex);
    m_pending = Command::Cancel;
    ++m_generation;
    m_changed.notify_all();
}

void WorkerControl::setCpuShare(double share)
{
    if (!(share > 0.0 && share <= 1.0))
        return;
    std::lock_guard lock(m_mutex);
    m_cpuShare = share;
    ++m_generation;
    m_changed.notify_all();
}

double WorkerControl::cpuShare(double initial) const
{
    std::lock_guard lock(m_mutex);
    return m_cpuShare > 0.0 ? m_cpuShare : initial;
}

void WorkerControl::rest(double seconds)
{
    std::unique_lock lock(m_mutex);
    const quint64 generation = m_generation;
    m_changed.wait_for(lock, std::chrono::duration<double>(seconds),
                       [&] { return m_generation != generation; });
}

bool WorkerControl::apply(const QString& line)
{
    const QString word = line.trimmed();
    if (word.startsWith(u"share ")) {
        bool ok = false;
        const double share = word.mid(6).trimmed().toDouble(&ok);
        if (!ok || !(share > 0.0 && share <= 1.0))
            return false;
        setCpuShare(share);
        return true;
    }
    if (word == u"pause")
        pause();
    else if (word == u"resume")
        resume();
    else if (word == u"checkpoint")
        requestCheckpoint();
    else if (word == u"stop")
        stop();
    else if (word == u"cancel")
        cancel();
    else
        return false;
    return true;
}

bool WorkerControl::paused() const
{
    std::lock_guard lock(m_mutex);
    return m_paused;
}

WorkerControl::Command WorkerControl::take(const std::function<void(bool)>& onPauseChange)
{
    std::unique_lock lock(m_mutex);
    if (m_paused && m_pending != Command::Stop && m_pending != Command::Cancel) {
        onPauseChange(true);
        m_changed.wait(
            lock, [this] { return !m_paused || m_pending == Command::Stop || m_pending == Command::Cancel; });
        onPauseChange(false);
    }
    const Command command = m_pending;
    m_pending = Command::None;
    return command;
}

namespace {

QJsonObject event(const char* name)
{
    return QJsonObject{{QStringLiteral("event"), QString::fromLatin1(name)}};
}

int failWith(const std::function<void(const QJsonObject&)>& emit, const QString& message)
{
    QJsonObject e = event("error");
    e.insert(QStringLiteral("message"), message);
    emit(e);
    return WorkerFailed;
}

void warn(const std::function<void(const QJsonObject&)>& emit, const QString& message)
{
    QJsonObject e = event("warning");
    e.insert(QStringLiteral("message"), message);
    emit(e);
}

// Writes the result as the manifest asks it sent: full weights, or the update against the weights the subtask
// started from, encoded, with the residual that error feedback carries to the job's next subtask. Anything that
// keeps the update from being encoded (a residual that does not fit, an encoding this agent does not know) is a
// warning, and the result goes as full weights, which the coordinator always takes.
Status saveResult(const TaskFolder& task, const TensorBundle& result,
                  const std::function<void(const QString&)>& warnings)
{
    if (!task.uploadProblem.isEmpty())
        warnings(task.uploadProblem + QStringLiteral("; sending full weights"));
    QFile::remove(task.residualOutPath());
    if (!task.upload.isUpdate())
        return SafeTensors::save(task.resultPath(), result);

    auto base = SafeTensors::load(task.weightsPath());
    if (!base) {
        warnings(base.error() + QStringLiteral("; sending full weights"));
        return SafeTensors::save(task.resultPath(), result);
    }
    TensorBundle residual;
    if (task.upload.errorFeedback && QFile::exists(task.residualInPath())) {
        auto kept = SafeTensors::load(task.residualInPath());
        if (kept)
            residual = std::move(*kept);
        else
            warnings(kept.error() + QStringLiteral("; this upload carries no earlier residual"));
    }
    auto encoded = UpdateCodec::encode(result, *base, task.upload, &residual);
    if (!encoded && !residual.isEmpty()) {
        warnings(encoded.error() + QStringLiteral("; this upload carries no earlier residual"));
        residual = {};
        encoded = UpdateCodec::encode(result, *base, task.upload, &residual);
    }
    if (!encoded) {
        warnings(encoded.error() + QStringLiteral("; sending full weights"));
        return SafeTensors::save(task.resultPath(), result);
    }
    const QByteArray bytes = UpdateCodec::pack(*encoded, task.upload.zstd);
    QSaveFile file(task.resultPath());
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return fail(QStringLiteral("%1: cannot write the result: %2").arg(task.resultPath(), file.errorString()));
    // Before the result is announced, as the optimizer state: the agent takes both when the worker reports done.
    if (!residual.isEmpty()) {
        if (auto saved = SafeTensors::save(task.residualOutPath(), residual); !saved)
            warnings(QStringLiteral("cannot keep what this upload left out for the next one: %1").arg(saved.error()));
    }
    return {};
}

} // namespace

QString unconfinedModelRefusal(const WorkerOptions& options)
{
    if (options.allowUnconfinedModels || options.syscallFilter || options.memoryCapBytes > 0)
        return {};
    return QStringLiteral("this job's model is a TorchScript program, and neither the system-call filter (seccomp) "
                          "nor a memory cap is in force on this computer to bound it; install libseccomp2 on a "
                          "Linux kernel with seccomp, or set a memory limit (memory_idle_mb and memory_active_mb), "
                          "or let the owner accept the risk with allow_unconfined_models");
}

QString explainMemoryFailure(const WorkerOptions& options, const QString& message, bool* capHit)
{
    // What libtorch's CPU allocator, glibc and guarded() say when an allocation fails.
    const bool allocation = message.contains(u"out of memory") || message.contains(u"not enough memory") ||
                            message.contains(u"can't allocate memory") ||
                            message.contains(u"Cannot allocate memory") || message.contains(u"bad_alloc");
    const bool hit = options.memoryCapBytes > 0 && allocation;
    if (capHit)
        *capHit = hit;
    if (!hit)
        return message;
    return QStringLiteral("the worker exceeded its memory cap of %1 MB (%2)")
        .arg(options.memoryCapBytes / (1024 * 1024))
        .arg(message);
}

namespace {

int train(const WorkerOptions& options, WorkerControl& control, const std::function<void(const QJsonObject&)>& emit)
{
    if (!(options.cpuShare > 0.0 && options.cpuShare <= 1.0))
        return failWith(emit, QStringLiteral("--cpu-share must be in (0, 1], got %1").arg(options.cpuShare));
    auto task = TaskFolder::open(options.taskDir);
    if (!task)
        return failWith(emit, task.error());
    if (task->model.arch == Architecture::TorchScript)
        if (const QString refusal = unconfinedModelRefusal(options); !refusal.isEmpty())
            return failWith(emit, refusal);
    auto shardBundle = SafeTensors::load(task->shardPath());
    if (!shardBundle)
        return failWith(emit, shardBundle.error());
    auto shard = ml::Dataset::fromBundle(std::move(*shardBundle), task->shardPath());
    if (!shard)
        return failWith(emit, shard.error());

    ml::TrainRequest request;
    request.model = task->model;
    request.optimizer = task->optimizer;
    request.localEpochs = task->localEpochs;
    request.steps = task->steps;
    request.batchSize = task->batchSize;
    request.seed = task->seed;
    request.augment = task->augment;
    request.device = options.device;
    request.threads = options.threads;
    request.checkpointPath = task->checkpointPath();
    request.checkpointIntervalSeconds = options.checkpointIntervalSeconds;

    QElapsedTimer sinceProgress;
    sinceProgress.start();
    double computeAtLastHook = 0.0;
    qint64 lastStep = 0;
    bool announced = false;
    // A checkpoint another agent handed back (protocol 6.8) becomes this run's first checkpoint; it is taken when it
    // was written for this subtask (its request, shard and starting weights), whatever machine wrote it.
    const bool handed = QFile::exists(task->handedCheckpointPath());
    if (handed && !QFile::exists(task->checkpointPath()) &&
        !QFile::copy(task->handedCheckpointPath(), task->checkpointPath()))
        warn(emit, QStringLiteral("cannot take the handed-back checkpoint %1; training from step 0")
                       .arg(task->handedCheckpointPath()));
    bool resuming = QFile::exists(task->checkpointPath());
    if (resuming && handed) {
        auto weights = SafeTensors::load(task->weightsPath());
        if (!weights)
            return failWith(emit, weights.error());
        request.adoptFromWeights = ml::Checkpoint::contentHash(*weights);
    }

    ml::TrainHooks hooks;
    hooks.betweenBatches = [&](const ml::TrainProgress& p) {
        lastStep = p.step;
        if (!announced) {
            QJsonObject started = event("started");
            started.insert(QStringLiteral("step"), p.step - 1);
            started.insert(QStringLiteral("of"), p.totalSteps);
            started.insert(QStringLiteral("resumed"), resuming);
            if (resuming && handed)
                started.insert(QStringLiteral("handed_back"), true);
            emit(started);
            announced = true;
        }
        if (sinceProgress.elapsed() >= options.progressIntervalMs || p.step == p.totalSteps) {
            QJsonObject progress = event("progress");
            progress.insert(QStringLiteral("step"), p.step);
            progress.insert(QStringLiteral("of"), p.totalSteps);
            progress.insert(QStringLiteral("epoch"), p.epoch + 1);
            progress.insert(QStringLiteral("loss"), p.meanLoss);
            progress.insert(QStringLiteral("samples_per_s"), p.samplesPerSecond);
            progress.insert(QStringLiteral("seconds"), p.seconds);
            emit(progress);
            sinceProgress.restart();
        }
        // The CPU-time share: after a mini-batch that computed for t seconds, rest t * (1 - s) / s.
        const double computed = p.seconds - computeAtLastHook;
        computeAtLastHook = p.seconds;
        const double share = control.cpuShare(options.cpuShare);
        if (share < 1.0 && computed > 0)
            control.rest(computed * (1.0 - share) / share);

        const auto command = control.take([&](bool paused) {
            QJsonObject change = event(paused ? "paused" : "resumed");
            change.insert(QStringLiteral("step"), p.step);
            emit(change);
        });
        switch (command) {
        case WorkerControl::Command::Checkpoint: {
            QJsonObject saved = event("checkpoint");
            saved.insert(QStringLiteral("step"), p.step);
            saved.insert(QStringLiteral("path"), task->checkpointPath());
            emit(saved); // the trainer writes it right after this hook returns
            return ml::TrainControl::Checkpoint;
        }
        case WorkerControl::Command::Stop:
            return ml::TrainControl::CheckpointAndStop;
        case WorkerControl::Command::Cancel:
            return ml::TrainControl::Cancel;
        case WorkerControl::Command::None:
            break;
        }
        return ml::TrainControl::Continue;
    };

    Result<ml::TrainOutcome> outcome = fail(QString());
    if (resuming)
        outcome = ml::Trainer::resume(request, *shard, hooks);
    if (resuming && handed && !outcome && !announced) {
        // Not this subtask's, damaged or hostile: discarded, and the subtask starts afresh from the lease's weights.
        warn(emit, outcome.error() + QStringLiteral("; training from step 0"));
        QFile::remove(task->checkpointPath());
        QFile::remove(task->handedCheckpointPath());
        request.adoptFromWeights.clear();
        resuming = false;
    }
    if (!resuming) {
        auto weights = SafeTensors::load(task->weightsPath());
        if (!weights)
            return failWith(emit, weights.error());
        // The optimizer state the agent kept from this job's previous subtask: its moments carry over as in
        // one long run. One that does not fit (the job's optimizer or model differ from what it was written
        // for) is set aside with a warning, and training starts with a fresh optimizer.
        if (QFile::exists(task->optimizerInPath())) {
            auto state = SafeTensors::load(task->optimizerInPath());
            if (state)
                request.optimizerState = std::move(*state);
            else
                warn(emit, state.error() + QStringLiteral("; training with a fresh optimizer"));
        }
        outcome = ml::Trainer::train(request, *weights, *shard, hooks);
        if (!outcome && !request.optimizerState.isEmpty() && !announced) {
            warn(emit, outcome.error() + QStringLiteral("; training with a fresh optimizer"));
            request.optimizerState = {};
            outcome = ml::Trainer::train(request, *weights, *shard, hooks);
        }
    }
    if (!outcome)
        return failWith(emit, outcome.error());

    switch (outcome->status) {
    case ml::TrainOutcome::Status::Stopped: {
        QJsonObject stopped = event("stopped");
        stopped.insert(QStringLiteral("step"), lastStep);
        stopped.insert(QStringLiteral("checkpoint"), task->checkpointPath());
        emit(stopped);
        return WorkerStopped;
    }
    case ml::TrainOutcome::Status::Cancelled: {
        QFile::remove(task->checkpointPath());
        QJsonObject cancelled = event("cancelled");
        cancelled.insert(QStringLiteral("step"), lastStep);
        emit(cancelled);
        return WorkerCancelled;
    }
    case ml::TrainOutcome::Status::Finished:
        break;
    }

    TensorBundle result = std::move(outcome->weights);
    result.metadata().clear();
    result.setMetadata(QStringLiteral("gleaner.base_version"), QString::number(task->baseVersion));
    result.setMetadata(QStringLiteral("gleaner.samples"), QString::number(outcome->samples));
    result.setMetadata(QStringLiteral("gleaner.loss"), QString::number(outcome->meanLoss, 'g', 17));
    result.setMetadata(QStringLiteral("gleaner.train_seconds"), QString::number(outcome->seconds, 'g', 6));
    result.setMetadata(QStringLiteral("gleaner.nonce"), task->nonce);
    if (!task->leaseId.isEmpty())
        result.setMetadata(QStringLiteral("gleaner.lease_id"), task->leaseId);
    if (auto saved = saveResult(*task, result, [&](const QString& message) { warn(emit, message); }); !saved)
        return failWith(emit, saved.error());
    // Before the result is announced: the agent takes it when the worker reports done. Not fatal: the next
    // subtask then starts with a fresh optimizer.
    if (auto saved = SafeTensors::save(task->optimizerOutPath(), outcome->optimizerState); !saved)
        warn(emit, QStringLiteral("cannot keep the optimizer state for the next subtask: %1").arg(saved.error()));
    QFile::remove(task->checkpointPath()); // the result supersedes it
    QJsonObject done = event("done");
    done.insert(QStringLiteral("result"), task->resultPath());
    done.insert(QStringLiteral("samples"), outcome->samples);
    done.insert(QStringLiteral("loss"), outcome->meanLoss);
    done.insert(QStringLiteral("train_seconds"), outcome->seconds);
    emit(done);
    return WorkerDone;
}

} // namespace

int runWorker(const WorkerOptions& options, WorkerControl& control,
              const std::function<void(const QJsonObject&)>& emitEvent)
{
    // A failed allocation under the kernel's cap is said as such, wherever it happened (the shard, the weights,
    // training), so that the agent reports the cap rather than a bare "out of memory".
    const std::function<void(const QJsonObject&)> emit = [&options, &emitEvent](const QJsonObject& e) {
        if (e.value(QStringLiteral("event")).toString() != u"error")
            return emitEvent(e);
        bool capHit = false;
        QJsonObject said = e;
        said.insert(QStringLiteral("message"),
                    explainMemoryFailure(options, e.value(QStringLiteral("message")).toString(), &capHit));
        if (capHit)
            said.insert(QStringLiteral("memory_cap"), true);
        emitEvent(said);
    };
    try {
        return train(options, control, emit);
    } catch (const std::bad_alloc&) {
        // Outside libtorch's guarded calls: Qt reading a file the cap leaves no room for, a container growing.
        return failWith(emit, QStringLiteral("out of memory (std::bad_alloc)"));
    }
}

} // namespace gleaner::agent
