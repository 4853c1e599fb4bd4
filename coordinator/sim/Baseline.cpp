#include "sim/Baseline.h"

#include "aggregation/AveragedRule.h"
#include "format/SafeTensors.h"
#include "ml/Checkpoint.h"
#include "ml/Evaluator.h"
#include "ml/Trainer.h"
#include "ml/data/DatasetLoader.h"

#include <limits>

namespace gleaner::coordinator::sim {

Result<SimReport> runBaseline(const SimOptions& options, const JobSpec& spec, const TensorBundle& initial,
                              const ml::Dataset& test, const QString& scratch, const Simulation::Progress& progress)
{
    auto split = ml::loadDataset(spec.dataset, spec.limitTrain, spec.model.inputShape);
    if (!split)
        return fail(split.error());
    const ml::Dataset& train = split->train;
    SimReport report;
    report.rule = QStringLiteral("baseline");
    report.agents = 1;
    report.speeds = {1.0};
    const qint64 shardSamples = std::max<qint64>(1, train.size() / spec.shards);
    const int every = options.validateEvery > 0 ? options.validateEvery : std::max(1, spec.shards / 5);
    const qint64 interval = shardSamples * every;

    ml::TrainRequest request;
    request.model = spec.model;
    request.optimizer = spec.optimizer;
    request.localEpochs = spec.maxEpochs;
    request.batchSize = spec.batchSize;
    request.seed = spec.seed;
    request.augment = spec.augment; // trained as the agents train, so the comparison is fair
    request.threads = options.threads;
    request.checkpointPath = scratch + QStringLiteral("/baseline.checkpoint");
    request.checkpointIntervalSeconds = 0;

    qint64 next = interval;
    qint64 epochEndAt = train.size();
    bool epochEnd = false;
    ml::TrainHooks hooks;
    // The job's schedule by the samples one process trained: an update is a shard's local_epochs passes.
    if (spec.optimizer.schedule.given)
        hooks.learningRate = [&](qint64 samples) {
            return spec.optimizer.at(double(samples) / (double(train.size()) * spec.localEpochs)).lr;
        };
    // A job that keeps an average of its weights (ema_decay) is validated on it; the process moves its
    // average once per update's worth of samples (a shard's local_epochs passes), as the coordinator does per
    // update.
    const double decay = spec.aggregation.emaDecay;
    const qint64 averageEvery = shardSamples * spec.localEpochs;
    qint64 nextAverage = decay > 0 ? averageEvery : std::numeric_limits<qint64>::max();
    TensorBundle average;
    qint64 averaged = 0;
    hooks.betweenBatches = [&](const ml::TrainProgress& p) {
        epochEnd = p.samples >= epochEndAt;
        if (p.samples >= next || p.samples >= nextAverage || epochEnd)
            return ml::TrainControl::CheckpointAndStop;
        return ml::TrainControl::Continue;
    };
    const auto record = [&](const TensorBundle& weights, qint64 samples) -> Status {
        auto evaluation = ml::Evaluator::evaluate(spec.model, average.isEmpty() ? weights : average, test);
        if (!evaluation)
            return fail(evaluation.error());
        const int epoch = int((samples - 1) / train.size()) + 1;
        SimPoint point{double(samples) / options.rate, samples, 0, epoch, epochEnd, evaluation->accuracy,
                       evaluation->meanLoss};
        report.points.push_back(point);
        if (progress)
            progress(QStringLiteral("%1 s: baseline epoch %2%3, %4 samples: accuracy %5, loss %6")
                         .arg(point.seconds, 0, 'f', 1)
                         .arg(epoch)
                         .arg(epochEnd ? QStringLiteral(" end") : QString())
                         .arg(samples)
                         .arg(point.accuracy, 0, 'f', 4)
                         .arg(point.loss, 0, 'f', 4));
        return {};
    };
    auto outcome = ml::Trainer::train(request, initial, train, hooks);
    while (true) {
        if (!outcome)
            return fail(QStringLiteral("baseline training: %1").arg(outcome.error()));
        if (outcome->status == ml::TrainOutcome::Status::Finished) {
            epochEnd = true;
            for (; nextAverage <= outcome->samples; nextAverage += averageEvery)
                if (auto s = AveragedRule::follow(average, averaged, outcome->weights, decay); !s)
                    return fail(s.error());
            if (auto s = record(outcome->weights, outcome->samples); !s)
                return fail(s.error());
            report.ended = QStringLiteral("ran its %1 epochs").arg(spec.maxEpochs);
            break;
        }
        auto checkpoint = SafeTensors::load(request.checkpointPath);
        if (!checkpoint)
            return fail(checkpoint.error());
        TensorBundle weights;
        for (const auto& entry : checkpoint->entries())
            if (entry.name.startsWith(u"model."))
                (void)weights.add(entry.name.mid(6), entry.dtype, entry.shape, checkpoint->data(entry));
        auto info = ml::CheckpointInfo::readFrom(*checkpoint);
        const qint64 samples = info ? info->samples : std::min(next, nextAverage);
        // Every update's worth of samples passed moves the average once (a mini-batch may cross more than
        // one).
        for (; nextAverage <= samples; nextAverage += averageEvery)
            if (auto s = AveragedRule::follow(average, averaged, weights, decay); !s)
                return fail(s.error());
        if (samples >= next || epochEnd) {
            if (auto s = record(weights, samples); !s)
                return fail(s.error());
            if (!options.ignoreTarget && report.points.back().accuracy >= spec.targetAccuracy) {
                report.ended = QStringLiteral("reached the target accuracy %1").arg(spec.targetAccuracy);
                break;
            }
        }
        while (next <= samples)
            next += interval;
        if (epochEnd)
            epochEndAt += train.size();
        outcome = ml::Trainer::resume(request, train, hooks);
    }
    return report;
}

} // namespace gleaner::coordinator::sim
