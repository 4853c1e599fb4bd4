#include "spec/ModelSpec.h"

#include <QJsonDocument>
#include <QJsonParseError>
#include <QSet>
#include "TestSupport.h"

#include <QTest>

using namespace gleaner;
using namespace Qt::StringLiterals;

Q_DECLARE_METATYPE(gleaner::ModelSpec)

namespace gleaner {
// QCOMPARE prints a spec that differs as its JSON.
char* toString(const ModelSpec& spec)
{
    return test::jsonToString(spec);
}
} // namespace gleaner

namespace {

ModelSpec makeSpec(Architecture arch, QList<qint64> shape, int classes)
{
    ModelSpec spec;
    spec.arch = arch;
    spec.inputShape = std::move(shape);
    spec.numClasses = classes;
    return spec;
}

} // namespace

class TestModelSpec : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void validSpecs_data();
    void validSpecs();
    void invalidSpecs_data();
    void invalidSpecs();
    void roundTrip_data();
    void roundTrip();
    void toJsonEmitsOnlyTheArchitecturesFields_data();
    void toJsonEmitsOnlyTheArchitecturesFields();
    void pathPrefixesMessages();
    void architectureNames();
};

void TestModelSpec::validSpecs_data()
{
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<ModelSpec>("expected");

    QTest::newRow("mlp with the default hidden layer")
        << R"({"arch": "mlp", "input_shape": [784], "num_classes": 10})"_ba
        << makeSpec(Architecture::Mlp, {784}, 10);

    ModelSpec mlpNoHidden = makeSpec(Architecture::Mlp, {1, 28, 28}, 10);
    mlpNoHidden.hidden = {};
    QTest::newRow("mlp without hidden layers (logistic regression)")
        << R"({"arch": "mlp", "input_shape": [1, 28, 28], "num_classes": 10, "hidden": []})"_ba
        << mlpNoHidden;

    ModelSpec mlp4d = makeSpec(Architecture::Mlp, {2, 3, 4, 5}, 100000);
    mlp4d.hidden = {256, 65536, 1};
    QTest::newRow("mlp on a 4-d input with limits of every range")
        << R"({"arch": "mlp", "input_shape": [2, 3, 4, 5], "num_classes": 100000, "hidden": [256, 65536, 1]})"_ba
        << mlp4d;

    QTest::newRow("cnn with default sizes")
        << R"({"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10})"_ba
        << makeSpec(Architecture::Cnn, {1, 28, 28}, 10);

    ModelSpec cnn = makeSpec(Architecture::Cnn, {3, 32, 8}, 2);
    cnn.channels = {16, 1024};
    cnn.hidden = {};
    QTest::newRow("cnn with its own channels and no hidden layer")
        << R"({"arch": "cnn", "input_shape": [3, 32, 8], "num_classes": 2, "channels": [16, 1024], "hidden": []})"_ba
        << cnn;

    QTest::newRow("cnn with 64 channels and a 4096 side")
        << R"({"arch": "cnn", "input_shape": [64, 4096, 12], "num_classes": 10})"_ba
        << makeSpec(Architecture::Cnn, {64, 4096, 12}, 10);

    QTest::newRow("resnet with default depth and width")
        << R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10})"_ba
        << makeSpec(Architecture::ResNet, {3, 32, 32}, 10);

    ModelSpec resnet = makeSpec(Architecture::ResNet, {3, 8, 9}, 100);
    resnet.depth = 11;
    resnet.width = 1024;
    QTest::newRow("resnet at the smallest depth and input")
        << R"({"arch": "resnet", "input_shape": [3, 8, 9], "num_classes": 100, "depth": 11, "width": 1024})"_ba
        << resnet;

    ModelSpec deep = makeSpec(Architecture::ResNet, {3, 32, 32}, 10);
    deep.depth = 1001;
    deep.width = 1;
    QTest::newRow("resnet-1001")
        << R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 1001, "width": 1})"_ba
        << deep;

    QTest::newRow("integers written as 10.0 and 2.8e1 are integers")
        << R"({"arch": "cnn", "input_shape": [1.0, 2.8e1, 28], "num_classes": 10.0})"_ba
        << makeSpec(Architecture::Cnn, {1, 28, 28}, 10);
}

void TestModelSpec::validSpecs()
{
    QFETCH(QByteArray, json);
    QFETCH(ModelSpec, expected);
    const Result<ModelSpec> spec = ModelSpec::fromJson(gleaner::test::jsonObject(json));
    QVERIFY2(spec.ok(), qPrintable(spec.error()));
    QCOMPARE(*spec, expected);
}

void TestModelSpec::invalidSpecs_data()
{
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("message");

    // Shorthands for the usual required fields.
    const auto row = [](const char* name, const char* json, const char* path, const char* message) {
        QTest::newRow(name) << QByteArray(json) << QString::fromUtf8(path) << QString::fromUtf8(message);
    };

    // arch
    row("arch missing", R"({"input_shape": [1, 28, 28], "num_classes": 10})", "model.arch",
        "required field is missing");
    row("arch unknown", R"({"arch": "transformer", "input_shape": [1, 28, 28], "num_classes": 10})",
        "model.arch", R"(expected one of "mlp", "cnn", "resnet", "torchscript", got "transformer")");
    row("arch in capitals gets a suggestion",
        R"({"arch": "CNN", "input_shape": [1, 28, 28], "num_classes": 10})", "model.arch",
        R"(got "CNN" (did you mean "cnn"?))");
    row("arch not a string", R"({"arch": 3, "input_shape": [1, 28, 28], "num_classes": 10})", "model.arch",
        "got 3");

    // unknown fields and fields of another architecture
    row("typo of depth", R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "dept": 20})",
        "model", R"(unknown field "dept" (did you mean "depth"?))");
    row("unrelated unknown field lists the known ones",
        R"({"arch": "mlp", "input_shape": [784], "num_classes": 10, "dropout": 0.5})", "model",
        R"(unknown field "dropout" (known fields: arch, input_shape, num_classes, hidden,)");
    row("depth on a cnn", R"({"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10, "depth": 20})",
        "model.depth", R"(only used by arch "resnet")");
    row("width on an mlp", R"({"arch": "mlp", "input_shape": [784], "num_classes": 10, "width": 16})",
        "model.width", R"(only used by arch "resnet")");
    row("channels on an mlp",
        R"({"arch": "mlp", "input_shape": [784], "num_classes": 10, "channels": [8, 8]})", "model.channels",
        R"(only used by arch "cnn")");
    row("hidden on a resnet",
        R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "hidden": []})", "model.hidden",
        R"(only used by arch "mlp" and "cnn")");

    // input_shape
    row("input_shape missing", R"({"arch": "mlp", "num_classes": 10})", "model.input_shape",
        "required field is missing");
    row("input_shape not a list", R"({"arch": "mlp", "input_shape": 784, "num_classes": 10})",
        "model.input_shape", "expected a list of 1 to 4 positive integers <= 4096, got 784");
    row("input_shape empty", R"({"arch": "mlp", "input_shape": [], "num_classes": 10})", "model.input_shape",
        "got an empty list");
    row("input_shape of 5 dims", R"({"arch": "mlp", "input_shape": [1, 2, 3, 4, 5], "num_classes": 10})",
        "model.input_shape", "got a list of 5 items");
    row("input_shape zero", R"({"arch": "mlp", "input_shape": [1, 28, 0], "num_classes": 10})",
        "model.input_shape[2]", "expected a positive integer <= 4096, got 0");
    row("input_shape too large", R"({"arch": "mlp", "input_shape": [4097], "num_classes": 10})",
        "model.input_shape[0]", "got 4097");
    row("input_shape fraction", R"({"arch": "mlp", "input_shape": [1, 2.5], "num_classes": 10})",
        "model.input_shape[1]", "got 2.5");
    row("input_shape string", R"({"arch": "mlp", "input_shape": ["28"], "num_classes": 10})",
        "model.input_shape[0]", R"(got "28")");
    row("cnn needs 3 dims", R"({"arch": "cnn", "input_shape": [28, 28], "num_classes": 10})",
        "model.input_shape", R"(arch "cnn" needs [channels, height, width], got 2 value(s))");
    row("cnn with 65 channels", R"({"arch": "cnn", "input_shape": [65, 28, 28], "num_classes": 10})",
        "model.input_shape[0]", "takes 1 to 64 channels, got 65");
    row("cnn height not divisible by 4", R"({"arch": "cnn", "input_shape": [1, 30, 28], "num_classes": 10})",
        "model.input_shape[1]", "needs a height divisible by 4 and at least 8");
    row("cnn width below 8", R"({"arch": "cnn", "input_shape": [1, 28, 4], "num_classes": 10})",
        "model.input_shape[2]", "needs a width divisible by 4 and at least 8");
    row("resnet width below 8", R"({"arch": "resnet", "input_shape": [3, 32, 7], "num_classes": 10})",
        "model.input_shape[2]", R"(arch "resnet" needs a width of at least 8)");
    row("resnet with 4 dims", R"({"arch": "resnet", "input_shape": [1, 3, 32, 32], "num_classes": 10})",
        "model.input_shape", "got 4 value(s)");

    // num_classes
    row("num_classes missing", R"({"arch": "mlp", "input_shape": [784]})", "model.num_classes",
        "required field is missing");
    row("num_classes 1", R"({"arch": "mlp", "input_shape": [784], "num_classes": 1})", "model.num_classes",
        "expected an integer from 2 to 100000, got 1");
    row("num_classes fraction", R"({"arch": "mlp", "input_shape": [784], "num_classes": 10.5})",
        "model.num_classes", "got 10.5");
    row("num_classes beyond int", R"({"arch": "mlp", "input_shape": [784], "num_classes": 3000000000})",
        "model.num_classes", "got 3000000000");
    row("num_classes null", R"({"arch": "mlp", "input_shape": [784], "num_classes": null})",
        "model.num_classes", "got null");

    // hidden and channels
    row("hidden negative", R"({"arch": "mlp", "input_shape": [784], "num_classes": 10, "hidden": [128, -3]})",
        "model.hidden[1]", "expected a positive integer <= 65536, got -3");
    row("hidden too wide",
        R"({"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10, "hidden": [65537]})",
        "model.hidden[0]", "got 65537");
    row("hidden not a list", R"({"arch": "mlp", "input_shape": [784], "num_classes": 10, "hidden": 128})",
        "model.hidden", "expected a list of positive integers <= 65536, got 128");
    row("hidden of booleans", R"({"arch": "mlp", "input_shape": [784], "num_classes": 10, "hidden": [true]})",
        "model.hidden[0]", "got true");
    row("one channel count",
        R"({"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10, "channels": [32]})",
        "model.channels", "expected a list of exactly 2 positive integers <= 1024, got a list of 1 item");
    row("channel count too large",
        R"({"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10, "channels": [32, 2048]})",
        "model.channels[1]", "got 2048");

    // resnet sizes
    row("depth not 9n+2", R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 30})",
        "model.depth", "expected 9n + 2 with n >= 1 (11, 20, 29, 38, ... up to 1001), got 30");
    row("depth 2 has no blocks",
        R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 2})", "model.depth",
        "got 2");
    row("depth beyond 1001",
        R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 1010})", "model.depth",
        "got 1010");
    row("depth as a string",
        R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": "29"})", "model.depth",
        R"(got "29")");
    row("width zero", R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "width": 0})",
        "model.width", "expected an integer from 1 to 1024, got 0");
    row("width as a word",
        R"({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "width": "wide"})",
        "model.width", R"(got "wide")");
}

void TestModelSpec::invalidSpecs()
{
    QFETCH(QByteArray, json);
    QFETCH(QString, path);
    QFETCH(QString, message);
    const Result<ModelSpec> spec = ModelSpec::fromJson(gleaner::test::jsonObject(json));
    QVERIFY(!spec.ok());
    QVERIFY2(spec.error().startsWith(path + u": "_s), qPrintable(u"wrong field in: "_s + spec.error()));
    QVERIFY2(spec.error().contains(message), qPrintable(u"unexpected message: "_s + spec.error()));
}

void TestModelSpec::roundTrip_data()
{
    validSpecs_data();
}

void TestModelSpec::roundTrip()
{
    QFETCH(ModelSpec, expected);
    const QJsonObject json = expected.toJson();
    const Result<ModelSpec> again = ModelSpec::fromJson(json);
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(*again, expected);

    // Through text too, as a task manifest carries it.
    const QByteArray text = QJsonDocument(json).toJson();
    const Result<ModelSpec> fromText = ModelSpec::fromJson(gleaner::test::jsonObject(text));
    QVERIFY2(fromText.ok(), qPrintable(fromText.error()));
    QCOMPARE(*fromText, expected);
}

void TestModelSpec::toJsonEmitsOnlyTheArchitecturesFields_data()
{
    QTest::addColumn<ModelSpec>("spec");
    QTest::addColumn<QStringList>("keys");
    QTest::newRow("mlp") << makeSpec(Architecture::Mlp, {784}, 10)
                         << QStringList{u"arch"_s, u"hidden"_s, u"input_shape"_s, u"num_classes"_s};
    QTest::newRow("cnn") << makeSpec(Architecture::Cnn, {1, 28, 28}, 10)
                         << QStringList{u"arch"_s, u"channels"_s, u"hidden"_s, u"input_shape"_s,
                                        u"num_classes"_s};
    QTest::newRow("resnet") << makeSpec(Architecture::ResNet, {3, 32, 32}, 10)
                            << QStringList{u"arch"_s, u"depth"_s, u"input_shape"_s, u"num_classes"_s,
                                           u"width"_s};
}

void TestModelSpec::toJsonEmitsOnlyTheArchitecturesFields()
{
    QFETCH(ModelSpec, spec);
    QFETCH(QStringList, keys);
    // Another arch's field in the JSON would be refused when an agent reads the manifest back.
    QCOMPARE(spec.toJson().keys(), keys);
}

void TestModelSpec::pathPrefixesMessages()
{
    const QJsonObject json = gleaner::test::jsonObject(R"({"arch": "mlp", "input_shape": [784], "num_classes": 10,
                                             "hidden": [128, -3]})");
    const Result<ModelSpec> inTask = ModelSpec::fromJson(json, u"task.model"_s);
    QVERIFY(!inTask.ok());
    QCOMPARE(inTask.error(), u"task.model.hidden[1]: expected a positive integer <= 65536, got -3"_s);

    const QJsonObject unknown = gleaner::test::jsonObject(R"({"arch": "mlp", "input_shape": [784], "num_classes": 10,
                                                "hiden": [64]})");
    QCOMPARE(ModelSpec::fromJson(unknown, u"task.model"_s).error(),
             uR"(task.model: unknown field "hiden" (did you mean "hidden"?))"_s);
}

void TestModelSpec::architectureNames()
{
    QCOMPARE(architectureName(Architecture::Mlp), u"mlp"_s);
    QCOMPARE(architectureName(Architecture::Cnn), u"cnn"_s);
    QCOMPARE(architectureName(Architecture::ResNet), u"resnet"_s);
}

QTEST_GUILESS_MAIN(TestModelSpec)
#include "TestModelSpec.moc"
