#include "ml/Model.h"

#include <QTest>

Q_DECLARE_METATYPE(gleaner::ModelSpec)

using namespace gleaner;
using namespace gleaner::ml;

namespace {

ModelSpec spec(Architecture arch, QList<qint64> input = {1, 28, 28})
{
    ModelSpec s;
    s.arch = arch;
    s.inputShape = std::move(input);
    return s;
}

ModelSpec paperScaleResNet()
{
    // The paper's CIFAR-10 model has about 4.97 million parameters; this configuration matches it.
    ModelSpec s = spec(Architecture::ResNet, {3, 32, 32});
    s.depth = 20;
    s.width = 77;
    return s;
}

} // namespace

class TestModelZoo : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void parameterCounts_data();
    void parameterCounts();
    void sameSeedSameWeights();
    void weightsRoundTripIncludingBuffers();
    void setWeightsRefusesForeignTensors_data();
    void setWeightsRefusesForeignTensors();
    void unknownDeviceIsRefused();
};

void TestModelZoo::parameterCounts_data()
{
    QTest::addColumn<ModelSpec>("spec");
    QTest::addColumn<qint64>("expected");

    // Counts worked out by hand from the layer sizes, so a change in any architecture is noticed.
    ModelSpec mlp = spec(Architecture::Mlp);
    mlp.hidden = {256, 128};
    QTest::newRow("mlp 784-256-128-10") << mlp << qint64(784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);

    ModelSpec cnn = spec(Architecture::Cnn);
    const qint64 cnnCount =
        (1 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 7 * 7 * 128 + 128) + (128 * 10 + 10);
    QTest::newRow("cnn 28x28 default") << cnn << cnnCount;

    ModelSpec cifarCnn = spec(Architecture::Cnn, {3, 32, 32});
    const qint64 cifarCount =
        (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 8 * 8 * 128 + 128) + (128 * 10 + 10);
    QTest::newRow("cnn 32x32x3 default") << cifarCnn << cifarCount;

    QTest::newRow("resnet paper scale (depth 20, width 77)") << paperScaleResNet() << qint64(4978214);
}

void TestModelZoo::parameterCounts()
{
    QFETCH(ModelSpec, spec);
    QFETCH(qint64, expected);
    auto model = Model::create(spec, 1);
    QVERIFY2(model.ok(), qPrintable(model.error()));
    QCOMPARE(model->parameterCount(), expected);
}

void TestModelZoo::sameSeedSameWeights()
{
    ModelSpec s = spec(Architecture::Cnn);
    auto a = Model::create(s, 7);
    auto b = Model::create(s, 7);
    auto c = Model::create(s, 8);
    QVERIFY(a.ok() && b.ok() && c.ok());
    QCOMPARE(a->weights().buffer(), b->weights().buffer());
    QVERIFY(a->weights().buffer() != c->weights().buffer());
}

void TestModelZoo::weightsRoundTripIncludingBuffers()
{
    ModelSpec s = spec(Architecture::ResNet, {3, 16, 16});
    s.depth = 11;
    s.width = 4;
    auto source = Model::create(s, 1);
    auto target = Model::create(s, 2);
    QVERIFY(source.ok() && target.ok());

    TensorBundle weights = source->weights();
    // BatchNorm statistics travel with the weights, as buffers, under torch's names.
    const TensorEntry* mean = weights.find(u"stem_bn.running_mean");
    QVERIFY(mean);
    QVERIFY(weights.find(u"stage1.block0.bn1.running_var"));
    const TensorEntry* counter = weights.find(u"stem_bn.num_batches_tracked");
    QVERIFY(counter);
    QCOMPARE(counter->dtype, DType::I64);
    weights.mutableValues<float>(*mean)[0] = 0.25f;

    QVERIFY(target->setWeights(weights).ok());
    QCOMPARE(target->weights().buffer(), weights.buffer());
}

void TestModelZoo::setWeightsRefusesForeignTensors_data()
{
    QTest::addColumn<QString>("mutation");
    QTest::addColumn<QString>("message");
    QTest::newRow("missing tensor") << "drop"
                                    << "lack tensor \"classifier.bias\"";
    QTest::newRow("extra tensor") << "extra"
                                  << "\"surplus\" is not part of this mlp model";
    QTest::newRow("wrong shape") << "shape"
                                 << "has shape [5]; the model needs [10]";
    QTest::newRow("integer for float") << "dtype"
                                       << "is I32; the model needs a floating-point type";
}

void TestModelZoo::setWeightsRefusesForeignTensors()
{
    QFETCH(QString, mutation);
    QFETCH(QString, message);
    ModelSpec s = spec(Architecture::Mlp);
    auto model = Model::create(s, 1);
    QVERIFY(model.ok());
    const TensorBundle good = model->weights();
    TensorBundle bad;
    for (const auto& entry : good.entries()) {
        if (entry.name != u"classifier.bias") {
            QVERIFY(bad.add(entry.name, entry.dtype, entry.shape, good.data(entry)).ok());
            continue;
        }
        if (mutation == u"drop")
            continue;
        if (mutation == u"shape")
            QVERIFY(bad.addZeroed(entry.name, DType::F32, {5}));
        else if (mutation == u"dtype")
            QVERIFY(bad.addZeroed(entry.name, DType::I32, entry.shape));
        else
            QVERIFY(bad.add(entry.name, entry.dtype, entry.shape, good.data(entry)).ok());
    }
    if (mutation == u"extra")
        QVERIFY(bad.addZeroed(QStringLiteral("surplus"), DType::F32, {1}));

    const TensorBundle before = model->weights();
    const Status status = model->setWeights(bad);
    QVERIFY(!status.ok());
    QVERIFY2(status.error().contains(message), qPrintable(status.error()));
    QCOMPARE(model->weights().buffer(), before.buffer()); // refused bundles change nothing
}

void TestModelZoo::unknownDeviceIsRefused()
{
    auto model = Model::create(spec(Architecture::Mlp), 1, QStringLiteral("tpu"));
    QVERIFY(!model.ok());
    QVERIFY(model.error().contains(u"\"tpu\" is not known"));
}

QTEST_GUILESS_MAIN(TestModelZoo)
#include "TestModelZoo.moc"
