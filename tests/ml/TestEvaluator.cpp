// The Evaluator as the coordinator's validation thread uses it: inputs that do not fit the model are refused
// with a message before any tensor is touched, and evaluating never changes the weights.
#include "ml/Evaluator.h"
#include "ml/Model.h"

#include "SyntheticData.h"

#include <QTest>

#include <thread>

using namespace gleaner;
using namespace gleaner::ml;

namespace {

ModelSpec smallSpec(Architecture arch)
{
    ModelSpec s;
    s.arch = arch;
    s.inputShape = {1, 8, 8};
    s.numClasses = 4;
    s.hidden = {16};
    s.channels = {4, 8};
    s.depth = 11;
    s.width = 2;
    return s;
}

} // namespace

class TestEvaluator : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void refusesInputThatDoesNotFit_data();
    void refusesInputThatDoesNotFit();
    void mlpTakesAnyShapeWithTheSameValueCount();
    void evaluationLeavesWeightsAlone();
    void concurrentEvaluationsAgree();
};

void TestEvaluator::refusesInputThatDoesNotFit_data()
{
    QTest::addColumn<int>("arch");
    QTest::addColumn<QList<qint64>>("inputShape");
    QTest::addColumn<int>("dataClasses");
    QTest::addColumn<qint64>("samples");
    QTest::addColumn<int>("batchSize");
    QTest::addColumn<QString>("message");
    const QList<qint64> fits{1, 8, 8};
    QTest::newRow("empty dataset") << int(Architecture::Mlp) << fits << 4 << qint64(0) << 256
                                   << "the dataset holds no samples; it needs at least one";
    QTest::newRow("cnn shape differs")
        << int(Architecture::Cnn) << QList<qint64>{1, 12, 12} << 4 << qint64(20) << 256
        << "the dataset's samples have shape [1, 8, 8] but the cnn model expects input_shape [1, 12, 12]; "
           "set "
           "model.input_shape to [1, 8, 8]";
    QTest::newRow("cnn same count, other shape") << int(Architecture::Cnn) << QList<qint64>{4, 4, 4} << 4
                                                 << qint64(20) << 256 << "expects input_shape [4, 4, 4]";
    QTest::newRow("mlp value count differs")
        << int(Architecture::Mlp) << QList<qint64>{1, 12, 12} << 4 << qint64(20) << 256
        << "the dataset's samples have shape [1, 8, 8] (64 values) but the mlp model expects input_shape "
           "[1, 12, 12] (144 values)";
    QTest::newRow("label beyond num_classes")
        << int(Architecture::Mlp) << fits << 6 << qint64(50) << 256
        << "the dataset has label 5 but the model has 4 classes (labels 0..3); set model.num_classes to at "
           "least 6";
    QTest::newRow("batch size 0") << int(Architecture::Mlp) << fits << 4 << qint64(20) << 0
                                  << "the evaluation batch size is 0; it must be at least 1";
}

void TestEvaluator::refusesInputThatDoesNotFit()
{
    QFETCH(int, arch);
    QFETCH(QList<qint64>, inputShape);
    QFETCH(int, dataClasses);
    QFETCH(qint64, samples);
    QFETCH(int, batchSize);
    QFETCH(QString, message);
    ModelSpec spec = smallSpec(Architecture(arch));
    spec.inputShape = inputShape;
    const Dataset data = test::syntheticSet(samples, 3, dataClasses);
    auto model = Model::create(spec, 1);
    QVERIFY2(model.ok(), qPrintable(model.error()));

    // Both entry points refuse the same input with the same words.
    auto byModel = Evaluator::evaluate(*model, data, batchSize);
    QVERIFY(!byModel.ok());
    QVERIFY2(byModel.error().contains(message), qPrintable(byModel.error()));
    auto bySpec = Evaluator::evaluate(spec, model->weights(), data, batchSize);
    QVERIFY(!bySpec.ok());
    QVERIFY2(bySpec.error().contains(message), qPrintable(bySpec.error()));
}

void TestEvaluator::mlpTakesAnyShapeWithTheSameValueCount()
{
    ModelSpec spec = smallSpec(Architecture::Mlp);
    spec.inputShape = {64}; // the mlp flattens [1, 8, 8] samples to 64 values
    const Dataset data = test::syntheticSet(200, 4);
    auto model = Model::create(spec, 1);
    QVERIFY(model.ok());
    auto evaluation = Evaluator::evaluate(spec, model->weights(), data, 64);
    QVERIFY2(evaluation.ok(), qPrintable(evaluation.error()));
    QCOMPARE(evaluation->samples, 200);
    QVERIFY(evaluation->meanLoss > 0.0);
}

void TestEvaluator::evaluationLeavesWeightsAlone()
{
    // In train mode, BatchNorm would fold the validation batches into its running statistics.
    const ModelSpec spec = smallSpec(Architecture::ResNet);
    auto model = Model::create(spec, 2);
    QVERIFY(model.ok());
    const TensorBundle before = model->weights();
    auto evaluation = Evaluator::evaluate(*model, test::syntheticSet(100, 5), 32);
    QVERIFY2(evaluation.ok(), qPrintable(evaluation.error()));
    QCOMPARE(evaluation->samples, 100);
    QCOMPARE(model->weights().buffer(), before.buffer());
}

void TestEvaluator::concurrentEvaluationsAgree()
{
    // The coordinator validates on its own thread, over weights and a test set that other threads read too.
    const ModelSpec spec = smallSpec(Architecture::Cnn);
    const TensorBundle weights = Model::create(spec, 3)->weights();
    const Dataset data = test::syntheticSet(300, 6);
    auto reference = Evaluator::evaluate(spec, weights, data, 50);
    QVERIFY(reference.ok());

    std::vector<std::optional<Result<Evaluation>>> results(4);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < results.size(); ++i)
        threads.emplace_back([&, i] { results[i] = Evaluator::evaluate(spec, weights, data, 50); });
    for (auto& thread : threads)
        thread.join();
    for (const auto& result : results) {
        QVERIFY2(result->ok(), qPrintable(result->error()));
        QCOMPARE((*result)->correct, reference->correct);
        QCOMPARE((*result)->meanLoss, reference->meanLoss);
    }
}

QTEST_GUILESS_MAIN(TestEvaluator)
#include "TestEvaluator.moc"
