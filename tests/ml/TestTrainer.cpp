#include "ml/Checkpoint.h"
#include "ml/Evaluator.h"
#include "ml/Model.h"
#include "ml/Trainer.h"

#include "TestSupport.h"

#include <QFile>
#include <QTest>

#include <random>

using namespace gleaner;
using namespace gleaner::ml;

namespace {

// A small, learnable synthetic problem: class k lights up a k-th block of an 8x8 image, plus noise.
Dataset syntheticSet(qint64 count, quint64 seed)
{
    std::mt19937 rng(static_cast<quint32>(seed));
    QByteArray pixels(count * 64, '\0');
    std::vector<qint64> labels(static_cast<size_t>(count));
    for (qint64 i = 0; i < count; ++i) {
        const int label = int(rng() % 4);
        labels[size_t(i)] = label;
        for (int p = 0; p < 64; ++p) {
            const bool lit = (p / 16) == label;
            pixels[i * 64 + p] = char(quint8((lit ? 150 : 0) + rng() % 100));
        }
    }
    return *Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("synthetic"));
}

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

} // namespace

class TestTrainer : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void learnsAndReports();
    void resumeEqualsUninterruptedRun_data();
    void resumeEqualsUninterruptedRun();
    void cancelReturnsWithoutWeights();
    void pauseHookBlocksBetweenBatches();
    void resumeRefusesAnotherRequestsCheckpoint();
    void divergenceIsReported();
    void refusesMismatchedShard();
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
    QTest::newRow("mlp adam, stop mid-epoch")
        << int(Architecture::Mlp) << int(OptimizerSpec::Kind::Adam) << 10;
    QTest::newRow("mlp sgd momentum, stop at epoch end")
        << int(Architecture::Mlp) << int(OptimizerSpec::Kind::Sgd) << 25;
    QTest::newRow("cnn adam") << int(Architecture::Cnn) << int(OptimizerSpec::Kind::Adam) << 37;
    QTest::newRow("resnet sgd (BatchNorm buffers)")
        << int(Architecture::ResNet) << int(OptimizerSpec::Kind::Sgd) << 3;
}

void TestTrainer::resumeEqualsUninterruptedRun()
{
    QFETCH(int, arch);
    QFETCH(int, optimizer);
    QFETCH(int, stopAfter);
    const auto dir = test::scratchDir();
    const Dataset shard = syntheticSet(400, 3);
    TrainRequest r = request(Architecture(arch), OptimizerSpec::Kind(optimizer));
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

void TestTrainer::resumeRefusesAnotherRequestsCheckpoint()
{
    const auto dir = test::scratchDir();
    const Dataset shard = syntheticSet(100, 6);
    TrainRequest r = request(Architecture::Mlp, OptimizerSpec::Kind::Adam);
    r.checkpointPath = dir->filePath(QStringLiteral("c.safetensors"));
    TrainHooks stopper;
    stopper.betweenBatches = [](const TrainProgress&) { return TrainControl::CheckpointAndStop; };
    QVERIFY(Trainer::train(r, initialWeights(r), shard, stopper).ok());

    TrainRequest other = r;
    other.batchSize = 8;
    auto refused = Trainer::resume(other, shard);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"written for another"), qPrintable(refused.error()));

    QFile::resize(r.checkpointPath, 100);
    auto truncated = Trainer::resume(r, shard);
    QVERIFY(!truncated.ok());
    QVERIFY(truncated.error().contains(r.checkpointPath));
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

void TestTrainer::refusesMismatchedShard()
{
    TrainRequest r = request(Architecture::Cnn, OptimizerSpec::Kind::Adam);
    const Dataset shard = syntheticSet(10, 8);
    r.model.inputShape = {1, 12, 12};
    auto outcome = Trainer::train(r, Model::create(r.model, 1)->weights(), shard);
    QVERIFY(!outcome.ok());
    QVERIFY2(outcome.error().contains(u"shape [1, 8, 8]"), qPrintable(outcome.error()));
}

QTEST_GUILESS_MAIN(TestTrainer)
#include "TestTrainer.moc"
