// The training core on real data: the cnn learns a 2,000-image Fashion-MNIST slice (Debian's
// dataset-fashion-mnist) and must beat 70% test accuracy, as the foundation issue asks.
#include "ml/Evaluator.h"
#include "ml/Model.h"
#include "ml/Trainer.h"
#include "ml/data/DatasetLoader.h"

#include <QElapsedTimer>
#include <QTest>

using namespace gleaner;
using namespace gleaner::ml;

class TestFashionTraining : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void cnnLearnsFashionMnistSlice();
};

void TestFashionTraining::cnnLearnsFashionMnistSlice()
{
    DatasetSpec spec; // fashion-mnist from the Debian package
    auto data = loadDataset(spec, 2000);
    QVERIFY2(data.ok(), qPrintable(data.error()));
    QCOMPARE(data->train.size(), 2000);
    QCOMPARE(data->test.size(), 10000);
    const Dataset test = data->test.head(2000);

    TrainRequest request;
    request.model.arch = Architecture::Cnn; // defaults: 1x28x28, 10 classes, channels 32/64, hidden 128
    request.optimizer.kind = OptimizerSpec::Kind::Adam;
    request.optimizer.lr = 1e-3;
    request.localEpochs = 3;
    request.batchSize = 32;
    request.seed = 42;

    auto model = Model::create(request.model, request.seed);
    QVERIFY(model.ok());
    QElapsedTimer timer;
    timer.start();
    auto outcome = Trainer::train(request, model->weights(), data->train);
    QVERIFY2(outcome.ok(), qPrintable(outcome.error()));
    QCOMPARE(outcome->samples, 6000);

    auto evaluation = Evaluator::evaluate(request.model, outcome->weights, test);
    QVERIFY2(evaluation.ok(), qPrintable(evaluation.error()));
    qInfo("cnn on 2000 Fashion-MNIST images, 3 epochs: train loss %.3f, test accuracy %.3f on %lld images, "
          "%.1f s",
          outcome->meanLoss, evaluation->accuracy, evaluation->samples, double(timer.elapsed()) / 1000.0);
    QVERIFY2(evaluation->accuracy > 0.70, qPrintable(QString::number(evaluation->accuracy)));
}

QTEST_GUILESS_MAIN(TestFashionTraining)
#include "TestFashionTraining.moc"
