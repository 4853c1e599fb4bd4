#include "ml/Device.h"
#include "ml/Model.h"

#include <QTest>

#include <thread>

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
    void devicesResolve_data();
    void devicesResolve();
    void hugeModelsAreRefused_data();
    void hugeModelsAreRefused();
    void concurrentCreatesKeepSeeds();
    void misalignedWeightsLoad();
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

void TestModelZoo::devicesResolve_data()
{
    QTest::addColumn<QString>("request");
    QTest::addColumn<QString>("expected"); // the canonical name, or empty when refused
    QTest::addColumn<QString>("message");  // part of the refusal
    const bool cuda = cudaAvailable();
    QTest::newRow("cpu") << "cpu"
                         << "cpu"
                         << "";
    QTest::newRow("upper case, spaces") << "  CPU "
                                        << "cpu"
                                        << "";
    QTest::newRow("empty means cpu") << ""
                                     << "cpu"
                                     << "";
    QTest::newRow("auto") << "auto" << (cuda ? "cuda:0" : "cpu") << "";
    QTest::newRow("cuda") << "cuda" << (cuda ? "cuda:0" : "") << (cuda ? "" : "has no CUDA support");
    QTest::newRow("cuda:x") << "cuda:x"
                            << ""
                            << "device \"cuda:x\": expected cuda:N with N a device number";
    QTest::newRow("cuda:-1") << "cuda:-1"
                             << ""
                             << "device \"cuda:-1\": expected cuda:N with N a device number";
    QTest::newRow("cuda:") << "cuda:"
                           << ""
                           << "expected cuda:N with N a device number";
    QTest::newRow("cuda:99999") << "cuda:99999"
                                << "" << (cuda ? "CUDA device(s) are visible" : "has no CUDA support");
    QTest::newRow("gpu") << "gpu"
                         << ""
                         << "device \"gpu\" is not known; use \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"";
}

void TestModelZoo::devicesResolve()
{
    QFETCH(QString, request);
    QFETCH(QString, expected);
    QFETCH(QString, message);
    const auto resolved = resolveDevice(request);
    if (expected.isEmpty()) {
        QVERIFY(!resolved.ok());
        QVERIFY2(resolved.error().contains(message), qPrintable(resolved.error()));
    } else {
        QVERIFY2(resolved.ok(), qPrintable(resolved.error()));
        QCOMPARE(*resolved, expected);
    }
}

void TestModelZoo::hugeModelsAreRefused_data()
{
    // Each spec is built through the struct, as a caller may; none must allocate terabytes, crash or throw.
    QTest::addColumn<ModelSpec>("spec");
    QTest::addColumn<QString>("message");
    ModelSpec mlp = spec(Architecture::Mlp, {4096, 4096, 4096}); // passes ModelSpec's validation
    QTest::newRow("mlp over a 4096^3 input")
        << mlp << "mlp with input_shape [4096, 4096, 4096] would have 8.8e+12 parameters";
    ModelSpec mlpWide = spec(Architecture::Mlp, {4096, 4096, 4096, 4096});
    mlpWide.hidden = {65536, 65536};
    QTest::newRow("mlp whose first layer overflows 64 bits")
        << mlpWide << "Gleaner builds at most 2147483648";
    ModelSpec cnn = spec(Architecture::Cnn, {64, 4096, 4096});
    cnn.channels = {1024, 1024};
    cnn.hidden = {65536};
    QTest::newRow("cnn with a huge head") << cnn << "use a smaller input_shape, fewer hidden units";
    ModelSpec resnet = spec(Architecture::ResNet, {3, 32, 32});
    resnet.depth = 1001;
    resnet.width = 1024;
    QTest::newRow("resnet depth 1001 width 1024")
        << resnet << "resnet with input_shape [3, 32, 32] would have";
    QTest::newRow("negative dimension")
        << spec(Architecture::Mlp, {1, -28, 28}) << "input_shape [1, -28, 28] has a dimension below 1";
}

void TestModelZoo::hugeModelsAreRefused()
{
    QFETCH(ModelSpec, spec);
    QFETCH(QString, message);
    auto model = Model::create(spec, 1);
    QVERIFY(!model.ok());
    QVERIFY2(model.error().contains(message), qPrintable(model.error()));
}

void TestModelZoo::concurrentCreatesKeepSeeds()
{
    // The coordinator creates models on several threads (job set-up, validation); each must still get the
    // weights its seed gives, although initialisation draws from torch's one global generator.
    const ModelSpec s = spec(Architecture::Cnn);
    const QByteArray seven = Model::create(s, 7)->weights().buffer();
    const QByteArray eight = Model::create(s, 8)->weights().buffer();
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < mismatches.size(); ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 6; ++i) {
                const quint64 seed = (t + size_t(i)) % 2 == 0 ? 7 : 8;
                auto model = Model::create(s, seed);
                if (!model.ok() || model->weights().buffer() != (seed == 7 ? seven : eight))
                    ++mismatches[t];
            }
        });
    for (auto& thread : threads)
        thread.join();
    for (int count : mismatches)
        QCOMPARE(count, 0);
}

void TestModelZoo::misalignedWeightsLoad()
{
    // A foreign safetensors file need not align its tensors: shift every tensor by one byte.
    auto source = Model::create(spec(Architecture::Mlp), 1);
    auto target = Model::create(spec(Architecture::Mlp), 2);
    QVERIFY(source.ok() && target.ok());
    const TensorBundle good = source->weights();
    QList<TensorEntry> entries = good.entries();
    for (auto& entry : entries)
        entry.offset += 1;
    const TensorBundle shifted = TensorBundle::fromBuffer(QByteArray(1, '\0') + good.buffer(), entries);
    QVERIFY(quintptr(shifted.data(shifted.entries().first()).data()) % 4 != 0);
    const Status loaded = target->setWeights(shifted);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    QCOMPARE(target->weights().buffer(), good.buffer());
}

QTEST_GUILESS_MAIN(TestModelZoo)
#include "TestModelZoo.moc"
