// TaskFolder: what a worker reads from the manifest the agent verified, here its optional
// hyperparameters.augment, written as the coordinator writes it and refused, naming the field, when the
// worker cannot train as it says.

#include "spec/AugmentSpec.h"
#include "worker/TaskFolder.h"

#include "TestSupport.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

// A task folder whose manifest holds `hyper`'s keys on top of the required hyperparameters, for a model with
// `inputShape`. The weights and shard files only need to exist: TaskFolder::open does not read them.
void writeFolder(const QString& dir, const QJsonObject& extraHyper,
                 const QList<qint64>& inputShape = {1, 8, 8})
{
    ModelSpec model;
    model.arch = Architecture::Mlp;
    model.inputShape = inputShape;
    model.numClasses = 4;
    QJsonObject hyper{
        {QStringLiteral("local_epochs"), 1},
        {QStringLiteral("batch_size"), 16},
        {QStringLiteral("optimizer"),
         QJsonObject{{QStringLiteral("name"), QStringLiteral("sgd")}, {QStringLiteral("lr"), 0.1}}},
        {QStringLiteral("seed"), 5}};
    for (auto it = extraHyper.begin(); it != extraHyper.end(); ++it)
        hyper.insert(it.key(), it.value());
    const QJsonObject manifest{{QStringLiteral("nonce"), QStringLiteral("f9e7ba5c922dfa993b0564ddb94c1748")},
                               {QStringLiteral("base_version"), 3},
                               {QStringLiteral("model"), model.toJson()},
                               {QStringLiteral("hyperparameters"), hyper}};
    QVERIFY(test::writeFile(dir + QStringLiteral("/manifest.json"),
                            QJsonDocument(manifest).toJson(QJsonDocument::Compact)));
    QVERIFY(test::writeFile(dir + QStringLiteral("/weights.safetensors"), "w"));
    QVERIFY(test::writeFile(dir + QStringLiteral("/shard.safetensors"), "s"));
}

} // namespace

class TestTaskFolder : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void withoutAugmentTrainsPlain();
    void augmentRoundTrips();
    void badAugmentIsRefused_data();
    void badAugmentIsRefused();
};

void TestTaskFolder::withoutAugmentTrainsPlain()
{
    // Manifests of jobs without augmentation carry no key, as before it existed.
    const auto dir = test::scratchDir();
    writeFolder(dir->path(), {});
    auto task = TaskFolder::open(dir->path());
    QVERIFY2(task.ok(), qPrintable(task.error()));
    QCOMPARE(task->augment, AugmentSpec{});
    QCOMPARE(task->seed, quint64(5));
}

void TestTaskFolder::augmentRoundTrips()
{
    // As the coordinator writes it: the job spec's AugmentSpec::toJson() under hyperparameters.augment.
    AugmentSpec spec;
    spec.cropPadding = 4;
    spec.flip = true;
    const auto dir = test::scratchDir();
    writeFolder(dir->path(), {{QStringLiteral("augment"), spec.toJson()}});
    auto task = TaskFolder::open(dir->path());
    QVERIFY2(task.ok(), qPrintable(task.error()));
    QCOMPARE(task->augment, spec);
}

void TestTaskFolder::badAugmentIsRefused_data()
{
    QTest::addColumn<QByteArray>("augment");
    QTest::addColumn<bool>("flat");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown key") << QByteArray(R"({"flip": true, "rotate": 10})") << false
                                 << R"(hyperparameters.augment: unknown field "rotate")";
    QTest::newRow("negative padding")
        << QByteArray(R"({"crop_padding": -2})") << false
        << "hyperparameters.augment.crop_padding: expected an integer from 0 to 2048";
    QTest::newRow("padding beyond half the image") << QByteArray(R"({"crop_padding": 5})") << false
                                                   << "hyperparameters.augment.crop_padding: 5 is more than "
                                                      "half the image (input_shape [1, 8, 8] allows at "
                                                      "most 4)";
    QTest::newRow("flip not a bool") << QByteArray(R"({"flip": 1})") << false
                                     << "hyperparameters.augment.flip: expected true or false";
    QTest::newRow("not an object") << QByteArray("true") << false
                                   << "hyperparameters.augment: expected an object";
    QTest::newRow("flat samples") << QByteArray(R"({"flip": true})") << true
                                  << "hyperparameters.augment: augmentation is for images";
}

void TestTaskFolder::badAugmentIsRefused()
{
    QFETCH(QByteArray, augment);
    QFETCH(bool, flat);
    QFETCH(QString, message);
    const auto dir = test::scratchDir();
    const QJsonObject wrapped = QJsonDocument::fromJson("{\"augment\": " + augment + "}").object();
    QVERIFY(wrapped.contains(QStringLiteral("augment")));
    writeFolder(dir->path(), wrapped, flat ? QList<qint64>{64} : QList<qint64>{1, 8, 8});
    auto task = TaskFolder::open(dir->path());
    QVERIFY(!task.ok());
    QVERIFY2(task.error().contains(message), qPrintable(task.error()));
    QVERIFY2(task.error().contains(u"manifest.json"), qPrintable(task.error()));
}

QTEST_GUILESS_MAIN(TestTaskFolder)
#include "TestTaskFolder.moc"
