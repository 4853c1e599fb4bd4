#include "ml/Checkpoint.h"
#include "ml/Evaluator.h"
#include "ml/Model.h"
#include "ml/Trainer.h"
#include "ml/WeightMath.h"

#include "format/SafeTensors.h"

#include "SyntheticData.h"
#include "TestSupport.h"

#include <QFile>
#include <QTest>

#include <array>
#include <functional>
#include <limits>

using namespace gleaner;
using namespace gleaner::ml;

namespace {

using test::syntheticSet;

TrainRequest request(Architecture arch, OptimizerSpec::Kind kind)
{
    TrainRequest r;
    r.model.arch = arch;
    r.model.inputShape = {1, 8, 8};
    r.model.numClasses = 4;
    r.model.hidden = {16};
    r.model.channels = {4, 8};
    r.model.depth = 11;
    r.model.width = 2;
    r.optimizer.kind = kind;
    r.optimizer.lr = kind == OptimizerSpec::Kind::Adam ? 0.01 : 0.05;
    r.optimizer.momentum = kind == OptimizerSpec::Kind::Sgd ? 0.9 : 0.0;
    r.localEpochs = 3;
    r.batchSize = 16;
    r.seed = 11;
    r.threads = 1;
    return r;
}

TensorBundle initialWeights(const TrainRequest& r)
{
    return Model::create(r.model, 5)->weights();
}

// The checkpoint at `path` with its tensors filtered and replaced, resealed with its own metadata, so that
// only the change made here is wrong with it.
void rewriteCheckpoint(const QString& path, const std::function<bool(const TensorEntry&)>& keep,
                       const std::function<void(TensorBundle&)>& add = {})
{
    auto loaded = SafeTensors::load(path);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    auto info = CheckpointInfo::readFrom(*loaded);
    QVERIFY2(info.ok(), qPrintable(info.error()));
    TensorBundle out;
    for (const auto& entry : loaded->entries())
        if (keep(entry))
            QVERIFY(out.add(entry.name, entry.dtype, entry.shape, loaded->data(entry)).ok());
    if (add)
        add(out);
    info->writeTo(out);
    QVERIFY(SafeTensors::save(path, out).ok());
}

} // namespace

class TestTrainer : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void learnsAndReports();
    void resumeEqualsUninterruptedRun_data();
    void resumeEqualsUninterruptedRun();
    void cancelReturnsWithoutWeights();
    void stepsSizeTheSubtask();
    void checkpointsHoldTheProgressTrainingCounts_data();
    void checkpointsHoldTheProgressTrainingCounts();
    void optimizerStateCarriesOver();
    void pauseHookBlocksBetweenBatches();
    void resumeRefuses_data();
    void resumeRefuses();
    void handedBackCheckpointIsAdoptedAcrossMachines();
    void divergenceIsReported();
    void refusesBadRequests_data();
    void refusesBadRequests();
    void unwritableCheckpointIsNamed();
    void fingerprintCoversShardAndWeights();
    void threadCountIsRestored();
};

void TestTrainer::learnsAndReports()
{
    const Dataset train = syntheticSet(400, 1);
    const Dataset test = syntheticSet(200, 2);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    const TensorBundle start = initialWeights(r);
    auto before = Evaluator::evaluate(r.model, start, test);
    QVERIFY2(before.ok(), qPrintable(before.error()));

    int calls = 0;
    TrainProgress last;
    TrainHooks hooks;
    hooks.betweenBatches = [&](const TrainProgress& p) {
        ++calls;
        last = p;
        return TrainControl::Continue;
    };
    auto outcome = Trainer::train(r, start, train, hooks);
    QVERIFY2(outcome.ok(), qPrintable(outcome.error()));
    QCOMPARE(outcome->status, TrainOutcome::Status::Finished);
    QCOMPARE(outcome->samples, 400 * 3);
    QCOMPARE(outcome->steps, qint64(25 * 3));
    QCOMPARE(calls, 75);
    QCOMPARE(last.step, last.totalSteps);
    QVERIFY(outcome->meanLoss > 0.0);

    auto after = Evaluator::evaluate(r.model, outcome->weights, test);
    QVERIFY2(after.ok(), qPrintable(after.error()));
    QCOMPARE(after->samples, 200);
    QVERIFY2(after->accuracy > 0.9, qPrintable(QString::number(after->accuracy)));
    QVERIFY(after->meanLoss < before->meanLoss);
}

void TestTrainer::resumeEqualsUninterruptedRun_data()
{
    QTest::addColumn<int>("arch");
    QTest::addColumn<int>("optimizer");
    QTest::addColumn<int>("stopAfter");
    QTest::addColumn<qint64>("steps");
    QTest::addColumn<bool>("augmented"); // random crops (padding 2) and flips
    QTest::newRow("mlp adam, stop mid-epoch")
        << int(Architecture::Mlp) << int(OptimizerSpec::Kind::Adam) << 10 << qint64(0) << false;
    QTest::newRow("mlp sgd momentum, stop at epoch end")
        << int(Architecture::Mlp) << int(OptimizerSpec::Kind::Sgd) << 25 << qint64(0) << false;
    QTest::newRow("cnn adam") << int(Architecture::Cnn) << int(OptimizerSpec::Kind::Adam) << 37 << qint64(0)
                              << false;
    QTest::newRow("resnet sgd (BatchNorm buffers)")
        << int(Architecture::ResNet) << int(OptimizerSpec::Kind::Sgd) << 3 << qint64(0) << false;
    QTest::newRow("mlp adam sized to 60 steps, stop in the second pass")
        << int(Architecture::Mlp) << int(OptimizerSpec::Kind::Adam) << 40 << qint64(60) << false;
    QTest::newRow("cnn adam augmented, stop mid-epoch")
        << int(Architecture::Cnn) << int(OptimizerSpec::Kind::Adam) << 37 << qint64(0) << true;
    QTest::newRow("mlp sgd augmented, sized to 60 steps, stop in the second pass")
        << int(Architecture::Mlp) << int(OptimizerSpec::Kind::Sgd) << 40 << qint64(60) << true;
}

void TestTrainer::resumeEqualsUninterruptedRun()
{
    QFETCH(int, arch);
    QFETCH(int, optimizer);
    QFETCH(int, stopAfter);
    QFETCH(qint64, steps);
    QFETCH(bool, augmented);
    const auto dir = test::scratchDir();
    const Dataset shard = syntheticSet(400, 3);
    TrainRequest r = request(Architecture(arch), OptimizerSpec::Kind(optimizer));
    r.steps = steps;
    r.augment.cropPadding = augmented ? 2 : 0;
    r.augment.flip = augmented;
    r.checkpointPath = dir->filePath(QStringLiteral("checkpoint.safetensors"));
    const TensorBundle start = initialWeights(r);

    auto uninterrupted = Trainer::train(r, start, shard);
    QVERIFY2(uninterrupted.ok(), qPrintable(uninterrupted.error()));

    TrainHooks stopper;
    stopper.betweenBatches = [&](const TrainProgress& p) {
        return p.step == stopAfter ? TrainControl::CheckpointAndStop : TrainControl::Continue;
    };
    auto first = Trainer::train(r, start, shard, stopper);
    QVERIFY2(first.ok(), qPrintable(first.error()));
    QCOMPARE(first->status, TrainOutcome::Status::Stopped);
    QCOMPARE(first->steps, qint64(stopAfter));
    QVERIFY(first->weights.isEmpty());
    QVERIFY(QFile::exists(r.checkpointPath));

    // A different process state in between must not matter: draw some random numbers elsewhere.
    (void)Model::create(r.model, 999);

    auto resumed = Trainer::resume(r, shard);
    QVERIFY2(resumed.ok(), qPrintable(resumed.error()));
    QCOMPARE(resumed->status, TrainOutcome::Status::Finished);
    QCOMPARE(resumed->samples, uninterrupted->samples);
    QCOMPARE(resumed->steps, uninterrupted->steps);
    QCOMPARE(resumed->meanLoss, uninterrupted->meanLoss);
    QCOMPARE(resumed->weights.tensorBytes(), uninterrupted->weights.tensorBytes());
    QVERIFY2(resumed->weights.buffer() == uninterrupted->weights.buffer(),
             "resumed weights differ from the uninterrupted run");
}

void TestTrainer::stepsSizeTheSubtask()
{
    // 400 samples in mini-batches of 16: 25 a pass. A subtask sized to 60 steps makes 2.4 passes, whatever the
    // local epochs say; one sized to 10 trains 160 samples of one pass.
    const Dataset shard = syntheticSet(400, 4);
    for (const auto& [steps, samples] : {std::pair<qint64, qint64>{60, 960}, {10, 160}}) {
        TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
        r.steps = steps;
        TrainProgress last;
        TrainHooks hooks;
        hooks.betweenBatches = [&](const TrainProgress& p) {
            last = p;
            return TrainControl::Continue;
        };
        auto outcome = Trainer::train(r, initialWeights(r), shard, hooks);
        QVERIFY2(outcome.ok(), qPrintable(outcome.error()));
        QCOMPARE(outcome->status, TrainOutcome::Status::Finished);
        QCOMPARE(outcome->steps, steps);
        QCOMPARE(outcome->samples, samples);
        QCOMPARE(last.totalSteps, steps);
        QVERIFY(!outcome->weights.isEmpty());
    }
    // The size is part of the run's identity: a checkpoint of one size does not resume another.
    TrainRequest a = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    TrainRequest b = a;
    b.steps = 60;
    const TensorBundle start = initialWeights(a);
    QVERIFY(a.fingerprint(shard, start) != b.fingerprint(shard, start));
}

// What the coordinator holds a handed-back checkpoint to (CheckpointInfo::progressMismatch) is what training
// writes, after every mini-batch: across passes, after a pass's short last mini-batch, in whole local epochs and in
// subtasks sized in mini-batches. An honest agent's checkpoint refused would count against it.
void TestTrainer::checkpointsHoldTheProgressTrainingCounts_data()
{
    QTest::addColumn<qint64>("steps");
    QTest::newRow("3 local epochs") << qint64(0);
    QTest::newRow("30 mini-batches") << qint64(30);
}

void TestTrainer::checkpointsHoldTheProgressTrainingCounts()
{
    QFETCH(qint64, steps);
    // 200 samples in mini-batches of 16: 13 a pass, the last of 8 samples.
    const Dataset shard = syntheticSet(200, 4);
    const auto dir = test::scratchDir();
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Sgd);
    r.steps = steps;
    r.checkpointPath = dir->filePath(QStringLiteral("checkpoint.safetensors"));
    const qint64 maxSteps = steps > 0 ? steps : 13 * r.localEpochs;
    qint64 checked = 0;
    QString wrong;
    TrainHooks hooks;
    hooks.betweenBatches = [&](const TrainProgress& p) {
        // The checkpoint the previous call asked for, written after that mini-batch.
        if (p.step > 1 && wrong.isEmpty()) {
            auto bundle = SafeTensors::load(r.checkpointPath);
            auto info = bundle ? CheckpointInfo::readFrom(*bundle) : Result<CheckpointInfo>(fail(bundle.error()));
            if (!info)
                wrong = info.error();
            else if (info->totalSteps != p.step - 1)
                wrong = QStringLiteral("step %1 read a checkpoint of step %2").arg(p.step).arg(info->totalSteps);
            else if (const QString why = info->progressMismatch(shard.size(), r.batchSize, maxSteps); !why.isEmpty())
                wrong = QStringLiteral("step %1: %2").arg(p.step - 1).arg(why);
            else
                ++checked;
        }
        return TrainControl::Checkpoint;
    };
    auto outcome = Trainer::train(r, initialWeights(r), shard, hooks);
    QVERIFY2(outcome.ok(), qPrintable(outcome.error()));
    QVERIFY2(wrong.isEmpty(), qPrintable(wrong));
    QCOMPARE(checked, maxSteps - 1);
    // And one sample more is not.
    auto bundle = SafeTensors::load(r.checkpointPath);
    QVERIFY(bundle.ok());
    auto info = CheckpointInfo::readFrom(*bundle);
    QVERIFY(info.ok());
    QVERIFY(info->progressMismatch(shard.size(), r.batchSize, maxSteps).isEmpty());
    info->samples += 1;
    QVERIFY(info->progressMismatch(shard.size(), r.batchSize, maxSteps).contains(u"samples is"));
}

void TestTrainer::optimizerStateCarriesOver()
{
    // A finished run hands back its optimizer's state; a run started from it continues its moments and its step
    // count (Adam's bias correction then treats it as a run well under way), and learns differently from a
    // fresh one.
    const Dataset shard = syntheticSet(160, 4);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.localEpochs = 1;
    auto first = Trainer::train(r, initialWeights(r), shard);
    QVERIFY2(first.ok(), qPrintable(first.error()));
    const auto stepsOf = [](const TensorBundle& state) {
        const TensorEntry* steps = state.find(QStringLiteral("steps"));
        return steps ? state.values<qint64>(*steps)[0] : qint64(-1);
    };
    QCOMPARE(stepsOf(first->optimizerState), 10);
    // Both Adam moments of every parameter (the mlp has no buffers), and the step count.
    QCOMPARE(first->optimizerState.entries().size(), 2 * first->weights.entries().size() + 1);

    TrainRequest carried = r;
    carried.optimizerState = first->optimizerState;
    auto second = Trainer::train(carried, first->weights, shard);
    QVERIFY2(second.ok(), qPrintable(second.error()));
    QCOMPARE(stepsOf(second->optimizerState), 20);
    auto fresh = Trainer::train(r, first->weights, shard);
    QVERIFY2(fresh.ok(), qPrintable(fresh.error()));
    QVERIFY(*WeightMath::l2Distance(fresh->weights, second->weights) > 0.0);

    // A state written for another model is refused, naming the tensor that does not fit.
    TrainRequest wider = r;
    wider.model.hidden = {32};
    wider.optimizerState = first->optimizerState;
    auto refused = Trainer::train(wider, initialWeights(wider), shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"optimizer state to start from") && refused.error().contains(u"does not match"),
             qPrintable(refused.error()));
    // And one that holds NaN (a run that went bad) is refused, naming the tensor, before any step is taken.
    TrainRequest poisoned = r;
    poisoned.optimizerState = first->optimizerState;
    const TensorEntry& moment = poisoned.optimizerState.entries().front();
    poisoned.optimizerState.mutableValues<float>(moment)[0] = std::numeric_limits<float>::quiet_NaN();
    auto nan = Trainer::train(poisoned, first->weights, shard);
    QVERIFY(!nan.ok());
    QVERIFY2(nan.error().contains(u"NaN") && nan.error().contains(moment.name), qPrintable(nan.error()));
}

void TestTrainer::cancelReturnsWithoutWeights()
{
    const Dataset shard = syntheticSet(100, 4);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    TrainHooks hooks;
    hooks.betweenBatches = [](const TrainProgress& p) {
        return p.step == 2 ? TrainControl::Cancel : TrainControl::Continue;
    };
    auto outcome = Trainer::train(r, initialWeights(r), shard, hooks);
    QVERIFY(outcome.ok());
    QCOMPARE(outcome->status, TrainOutcome::Status::Cancelled);
    QCOMPARE(outcome->steps, 2);
    QVERIFY(outcome->weights.isEmpty());
}

void TestTrainer::pauseHookBlocksBetweenBatches()
{
    // A pause is the hook blocking: the time spent there is not counted as training time.
    const Dataset shard = syntheticSet(64, 5);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.localEpochs = 1;
    TrainHooks hooks;
    hooks.betweenBatches = [](const TrainProgress& p) {
        if (p.step == 1)
            QThread::msleep(300);
        return TrainControl::Continue;
    };
    auto outcome = Trainer::train(r, initialWeights(r), shard, hooks);
    QVERIFY(outcome.ok());
    QCOMPARE(outcome->status, TrainOutcome::Status::Finished);
    QVERIFY2(outcome->seconds < 0.3, qPrintable(QString::number(outcome->seconds)));
}

void TestTrainer::resumeRefuses_data()
{
    QTest::addColumn<QString>("change");
    QTest::addColumn<QString>("message");
    QTest::newRow("another batch size")
        << "batch"
        << "the checkpoint was written for another model, optimizer, number of "
           "local epochs, batch size, seed or augmentation";
    QTest::newRow("another augmentation")
        << "augment"
        << "the checkpoint was written for another model, optimizer, number of "
           "local epochs, batch size, seed or augmentation";
    QTest::newRow("another shard of the same size")
        << "shard"
        << "the checkpoint was written for another shard (SHA-256 ";
    QTest::newRow("another thread count")
        << "threads"
        << "the checkpoint was written with 1 thread and this run uses 2 threads, which changes the results; "
           "resume with threads=1 or start the subtask afresh";
    QTest::newRow("truncated file") << "truncate"
                                    << "";
    QTest::newRow("damaged tensor bytes") << "flip"
                                          << "the checkpoint is damaged";
    QTest::newRow("edited metadata") << "metadata"
                                     << "the checkpoint is damaged";
    QTest::newRow("format 1") << "version"
                              << "written by an older Gleaner (format 1)";
    QTest::newRow("no optimizer state") << "optimizer"
                                        << "optimizer state lacks \"optim.fc0.weight.exp_avg\"";
    QTest::newRow("no step count") << "steps"
                                   << "optimizer state lacks its step count (optim.steps";
    QTest::newRow("negative step count") << "negative"
                                         << "negative step count (optim.steps = -1)";
    QTest::newRow("no checkpoint path") << "nopath"
                                        << "the request names no checkpoint to resume from";
}

void TestTrainer::resumeRefuses()
{
    QFETCH(QString, change);
    QFETCH(QString, message);
    const auto dir = test::scratchDir();
    Dataset shard = syntheticSet(100, 6);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.checkpointPath = dir->filePath(QStringLiteral("c.safetensors"));
    TrainHooks stopper;
    stopper.betweenBatches = [](const TrainProgress& p) {
        return p.step == 2 ? TrainControl::CheckpointAndStop : TrainControl::Continue;
    };
    auto stopped = Trainer::train(r, initialWeights(r), shard, stopper);
    QVERIFY2(stopped.ok(), qPrintable(stopped.error()));
    QCOMPARE(stopped->status, TrainOutcome::Status::Stopped);
    // The untouched checkpoint resumes: every refusal below comes from the one change.
    QVERIFY(QFile::copy(r.checkpointPath, dir->filePath(QStringLiteral("good.safetensors"))));
    TrainRequest good = r;
    good.checkpointPath = dir->filePath(QStringLiteral("good.safetensors"));
    auto resumed = Trainer::resume(good, shard);
    QVERIFY2(resumed.ok(), qPrintable(resumed.error()));

    const auto notSteps = [](const TensorEntry& e) { return e.name != u"optim.steps"; };
    if (change == u"batch") {
        r.batchSize = 8;
    } else if (change == u"augment") {
        r.augment.flip = true;
    } else if (change == u"shard") {
        shard = syntheticSet(100, 60);
    } else if (change == u"threads") {
        r.threads = 2;
    } else if (change == u"truncate") {
        QVERIFY(QFile::resize(r.checkpointPath, 100));
    } else if (change == u"flip" || change == u"metadata") {
        QFile file(r.checkpointPath);
        QVERIFY(file.open(QIODevice::ReadWrite));
        QByteArray bytes = file.readAll();
        // The last byte is tensor data; the header's "epoch":"0" becomes "epoch":"1".
        const qsizetype at = change == u"flip" ? bytes.size() - 1 : bytes.indexOf("\"epoch\":\"0\"") + 9;
        QVERIFY(at > 9);
        bytes[at] = char(bytes[at] ^ (change == u"flip" ? 0x40 : 0x01));
        QVERIFY(file.seek(0));
        QCOMPARE(file.write(bytes), bytes.size());
    } else if (change == u"version") {
        auto loaded = SafeTensors::load(r.checkpointPath);
        QVERIFY(loaded.ok());
        loaded->setMetadata(QStringLiteral("gleaner.checkpoint"), QStringLiteral("1"));
        QVERIFY(SafeTensors::save(r.checkpointPath, *loaded).ok());
    } else if (change == u"optimizer") {
        rewriteCheckpoint(r.checkpointPath,
                          [](const TensorEntry& e) { return !e.name.endsWith(u".exp_avg"); });
    } else if (change == u"steps") {
        rewriteCheckpoint(r.checkpointPath, notSteps);
    } else if (change == u"negative") {
        rewriteCheckpoint(r.checkpointPath, notSteps, [](TensorBundle& b) {
            const std::array<qint64, 1> minusOne{-1};
            QVERIFY(b.addValues<qint64>(QStringLiteral("optim.steps"), DType::I64, {}, minusOne).ok());
        });
    } else if (change == u"nopath") {
        r.checkpointPath.clear();
    }
    if (QTest::currentTestFailed())
        return;

    auto refused = Trainer::resume(r, shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(message), qPrintable(refused.error()));
    QVERIFY2(refused.error().contains(r.checkpointPath), qPrintable(refused.error()));
}

// Another agent's checkpoint (protocol 6.8): taken when it is this subtask's work from these starting weights,
// whatever thread count wrote it; equal to the uninterrupted run when the thread count is the same.
void TestTrainer::handedBackCheckpointIsAdoptedAcrossMachines()
{
    const auto dir = test::scratchDir();
    const Dataset shard = syntheticSet(200, 4);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.checkpointPath = dir->filePath(QStringLiteral("handed.safetensors"));
    const TensorBundle start = initialWeights(r);
    auto uninterrupted = Trainer::train(r, start, shard);
    QVERIFY2(uninterrupted.ok(), qPrintable(uninterrupted.error()));
    TrainHooks stopper;
    stopper.betweenBatches = [](const TrainProgress& p) {
        return p.step == 5 ? TrainControl::CheckpointAndStop : TrainControl::Continue;
    };
    QVERIFY(Trainer::train(r, start, shard, stopper).ok());
    const QByteArray handed = [&] {
        QFile f(r.checkpointPath);
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }();
    const auto restore = [&] {
        QFile f(r.checkpointPath);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        QCOMPARE(f.write(handed), handed.size());
    };

    // Same thread count: the same bits as one agent that never left.
    TrainRequest adopt = r;
    adopt.adoptFromWeights = Checkpoint::contentHash(start);
    auto same = Trainer::resume(adopt, shard);
    QVERIFY2(same.ok(), qPrintable(same.error()));
    QVERIFY(same->weights.buffer() == uninterrupted->weights.buffer());

    // Another thread count: a strict resume refuses, an adoption continues the same training.
    restore();
    adopt.threads = 2;
    TrainRequest strict = adopt;
    strict.adoptFromWeights.clear();
    QVERIFY(!Trainer::resume(strict, shard).ok());
    restore();
    auto other = Trainer::resume(adopt, shard);
    QVERIFY2(other.ok(), qPrintable(other.error()));
    QCOMPARE(other->steps, uninterrupted->steps);
    QCOMPARE(other->samples, uninterrupted->samples);
    // Its own checkpoints from here on are this run's: a strict resume of them works.
    restore();
    TrainHooks again;
    again.betweenBatches = [](const TrainProgress& p) {
        return p.step == 8 ? TrainControl::CheckpointAndStop : TrainControl::Continue;
    };
    QVERIFY(Trainer::resume(adopt, shard, again).ok());
    strict.threads = 2;
    auto continued = Trainer::resume(strict, shard);
    QVERIFY2(continued.ok(), qPrintable(continued.error()));

    // Started from other weights, or for another subtask: refused, naming why.
    restore();
    TrainRequest wrongBase = adopt;
    wrongBase.adoptFromWeights = Checkpoint::contentHash(Model::create(r.model, 6)->weights());
    auto refused = Trainer::resume(wrongBase, shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"started from other weights"), qPrintable(refused.error()));
    TrainRequest wrongSeed = adopt;
    wrongSeed.seed = 12;
    refused = Trainer::resume(wrongSeed, shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"another model, optimizer"), qPrintable(refused.error()));
    // Finite values only, even with a valid checksum.
    rewriteCheckpoint(r.checkpointPath, [](const TensorEntry&) { return true; });
    {
        auto loaded = SafeTensors::load(r.checkpointPath);
        auto info = CheckpointInfo::readFrom(*loaded);
        QVERIFY(loaded.ok() && info.ok());
        for (const auto& e : loaded->entries())
            if (e.name.startsWith(u"model.") && e.dtype == DType::F32) {
                loaded->mutableValues<float>(e)[0] = std::numeric_limits<float>::infinity();
                break;
            }
        info->writeTo(*loaded);
        QVERIFY(SafeTensors::save(r.checkpointPath, *loaded).ok());
    }
    refused = Trainer::resume(adopt, shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"NaN or infinite"), qPrintable(refused.error()));
    // Progress other than training counts it (samples raised by 16, checksum recomputed): the worker refuses it
    // and trains from step 0 instead, so its result is not one the coordinator refuses.
    restore();
    {
        auto loaded = SafeTensors::load(r.checkpointPath);
        auto info = CheckpointInfo::readFrom(*loaded);
        QVERIFY(loaded.ok() && info.ok());
        info->samples += 16;
        info->writeTo(*loaded);
        QVERIFY(SafeTensors::save(r.checkpointPath, *loaded).ok());
    }
    refused = Trainer::resume(adopt, shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"samples is"), qPrintable(refused.error()));
}

void TestTrainer::divergenceIsReported()
{
    const Dataset shard = syntheticSet(100, 7);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Sgd);
    r.optimizer.lr = 1e30;
    auto outcome = Trainer::train(r, initialWeights(r), shard);
    QVERIFY(!outcome.ok());
    QVERIFY2(outcome.error().contains(u"lower the learning rate"), qPrintable(outcome.error()));
}

void TestTrainer::refusesBadRequests_data()
{
    QTest::addColumn<QString>("change");
    QTest::addColumn<QString>("message");
    QTest::newRow("batch size 0") << "batch"
                                  << "the batch size is 0; it must be at least 1";
    QTest::newRow("no local epochs") << "epochs"
                                     << "the number of local epochs is 0; it must be at least 1";
    QTest::newRow("negative threads") << "threads"
                                      << "threads is -1; use 0 for libtorch's default";
    QTest::newRow("negative steps") << "steps"
                                    << "steps is -3; use 0 for whole local epochs or a positive count";
    QTest::newRow("empty shard") << "empty"
                                 << "the shard holds no samples";
    QTest::newRow("cnn shape differs")
        << "cnn"
        << "the shard's samples have shape [1, 8, 8] but the cnn model expects input_shape [1, 12, 12]";
    QTest::newRow("mlp value count differs")
        << "mlp"
        << "the shard's samples have shape [1, 8, 8] (64 values) but the mlp model expects input_shape "
           "[1, 12, 12] (144 values)";
    QTest::newRow("label beyond num_classes") << "labels"
                                              << "the shard has label 5 but the model has 4 classes";
    QTest::newRow("augmenting flat samples")
        << "flat"
        << "augment: augmentation is for images, a model input_shape [C, H, W]; this model's is [64]";
    QTest::newRow("crop padding beyond half the image")
        << "padding"
        << "augment.crop_padding: 5 is more than half the image (input_shape [1, 8, 8] allows at most 4)";
}

void TestTrainer::refusesBadRequests()
{
    QFETCH(QString, change);
    QFETCH(QString, message);
    TrainRequest r =
        request(change == u"cnn" ? Architecture::Cnn : Architecture::Mlp, OptimizerSpec::Kind::Adam);
    Dataset shard = syntheticSet(40, 8);
    if (change == u"batch")
        r.batchSize = 0;
    else if (change == u"epochs")
        r.localEpochs = 0;
    else if (change == u"threads")
        r.threads = -1;
    else if (change == u"steps")
        r.steps = -3;
    else if (change == u"empty")
        shard = syntheticSet(0, 8);
    else if (change == u"cnn" || change == u"mlp")
        r.model.inputShape = {1, 12, 12};
    else if (change == u"labels")
        shard = syntheticSet(40, 8, 6);
    else if (change == u"flat") {
        r.model.inputShape = {64};
        r.augment.flip = true;
    } else if (change == u"padding")
        r.augment.cropPadding = 5;
    auto outcome = Trainer::train(r, Model::create(r.model, 1)->weights(), shard);
    QVERIFY(!outcome.ok());
    QVERIFY2(outcome.error().contains(message), qPrintable(outcome.error()));
}

void TestTrainer::unwritableCheckpointIsNamed()
{
    // A regular file where the checkpoint's folder should be: unwritable even for root.
    const auto dir = test::scratchDir();
    QFile blocker(dir->filePath(QStringLiteral("blocker")));
    QVERIFY(blocker.open(QIODevice::WriteOnly));
    blocker.close();
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.checkpointPath = dir->filePath(QStringLiteral("blocker/sub/checkpoint.safetensors"));
    TrainHooks stopper;
    stopper.betweenBatches = [](const TrainProgress&) { return TrainControl::CheckpointAndStop; };
    auto outcome = Trainer::train(r, initialWeights(r), syntheticSet(40, 9), stopper);
    QVERIFY(!outcome.ok());
    QVERIFY2(outcome.error().contains(r.checkpointPath), qPrintable(outcome.error()));
    QVERIFY2(outcome.error().contains(u"cannot write the checkpoint"), qPrintable(outcome.error()));
}

void TestTrainer::fingerprintCoversShardAndWeights()
{
    const TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    const Dataset shard = syntheticSet(100, 10);
    const TensorBundle start = initialWeights(r);
    const QString fingerprint = r.fingerprint(shard, start);
    QCOMPARE(fingerprint.size(), 64);
    QCOMPARE(r.fingerprint(shard, start), fingerprint);
    QVERIFY(r.fingerprint(syntheticSet(100, 11), start) != fingerprint); // same size, other samples
    QVERIFY(r.fingerprint(shard, Model::create(r.model, 6)->weights()) != fingerprint);
    TrainRequest otherSeed = r;
    otherSeed.seed += 1;
    QVERIFY(otherSeed.fingerprint(shard, start) != fingerprint);
    TrainRequest augmented = r;
    augmented.augment.flip = true;
    QVERIFY(augmented.fingerprint(shard, start) != fingerprint);
    TrainRequest cropped = augmented;
    cropped.augment.cropPadding = 1;
    QVERIFY(cropped.fingerprint(shard, start) != augmented.fingerprint(shard, start));
    TrainRequest moreThreads = r;
    moreThreads.threads = 2;
    QVERIFY(moreThreads.fingerprint(shard, start) != fingerprint);
    TrainRequest elsewhere = r; // where checkpoints go does not change the result
    elsewhere.checkpointPath = QStringLiteral("/elsewhere.safetensors");
    QCOMPARE(elsewhere.fingerprint(shard, start), fingerprint);
}

void TestTrainer::threadCountIsRestored()
{
    // libtorch's thread count is process-wide: a training run must leave the caller's count as it found it.
    // Observed through fingerprint(), which with threads = 0 takes libtorch's current count.
    const Dataset shard = syntheticSet(64, 12);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.localEpochs = 1;
    const TensorBundle start = initialWeights(r);
    TrainRequest current = r;
    current.threads = 0;
    const QString before = current.fingerprint(shard, start);
    int differed = 0;
    for (int threads : {2, 3}) {
        r.threads = threads;
        if (r.fingerprint(shard, start) != before)
            ++differed; // this count is not the current one, so a leak would show
        auto outcome = Trainer::train(r, start, shard);
        QVERIFY2(outcome.ok(), qPrintable(outcome.error()));
        QCOMPARE(current.fingerprint(shard, start), before);
    }
    QVERIFY(differed > 0);
}

QTEST_GUILESS_MAIN(TestTrainer)
#include "TestTrainer.moc"
