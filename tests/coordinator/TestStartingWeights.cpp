// A job that starts from given weights (fine-tuning): the file is checked against the model, every mismatch named
// at once, and the job starts exactly from it.
#include "TestSupport.h"

#include "format/SafeTensors.h"
#include "jobs/JobImporter.h"
#include "ml/Model.h"

#include <QJsonArray>
#include <QTest>

#include <limits>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestStartingWeights : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void seededWithoutAFile();
    void startsFromTheFile();
    void namesEveryMismatch();
    void refusesNonFiniteValues();
};

namespace {

JobSpec mlpJob(const QString& initialWeights = {})
{
    JobSpec spec;
    spec.name = QStringLiteral("fine-tune");
    spec.model = ModelSpec::fromJson(QJsonObject{{QStringLiteral("arch"), QStringLiteral("mlp")},
                                                 {QStringLiteral("input_shape"), QJsonArray{4}},
                                                 {QStringLiteral("num_classes"), 3},
                                                 {QStringLiteral("hidden"), QJsonArray{8}}})
                     .value();
    spec.seed = 5;
    spec.initialWeights = initialWeights;
    return spec;
}

} // namespace

void TestStartingWeights::seededWithoutAFile()
{
    const JobSpec spec = mlpJob();
    auto net = ml::Model::create(spec.model, spec.seed);
    QVERIFY(net);
    auto start = JobImporter::startingWeights(spec, *net);
    QVERIFY2(start, qPrintable(start ? QString() : start.error()));
    QCOMPARE(start->buffer(), ml::Model::create(spec.model, spec.seed)->weights().buffer());
}

void TestStartingWeights::startsFromTheFile()
{
    auto dir = test::scratchDir();
    // Weights of the same model from another seed, stored as float64 (as PyTorch's double() would): taken as given.
    auto other = ml::Model::create(mlpJob().model, 99);
    const TensorBundle wanted = other->weights();
    TensorBundle asDoubles;
    for (const TensorEntry& entry : wanted.entries()) {
        const auto values = wanted.values<float>(entry);
        std::vector<double> doubles(values.begin(), values.end());
        QVERIFY(asDoubles.addValues<double>(entry.name, DType::F64, entry.shape, doubles));
    }
    const QString file = dir->filePath(QStringLiteral("start.safetensors"));
    QVERIFY(SafeTensors::save(file, asDoubles));
    const JobSpec spec = mlpJob(file);
    auto net = ml::Model::create(spec.model, spec.seed);
    auto start = JobImporter::startingWeights(spec, *net);
    QVERIFY2(start, qPrintable(start ? QString() : start.error()));
    QCOMPARE(start->buffer(), wanted.buffer());
    QCOMPARE(net->weights().buffer(), wanted.buffer());
}

void TestStartingWeights::namesEveryMismatch()
{
    auto dir = test::scratchDir();
    const TensorBundle good = ml::Model::create(mlpJob().model, 1)->weights();
    // One tensor missing, one of another shape, one of an integer type, one the model lacks.
    TensorBundle bad;
    const auto& entries = good.entries();
    QVERIFY(entries.size() >= 4);
    QVERIFY(bad.add(entries[1].name, DType::F32, {1, 2}, QByteArray(8, '\0')));
    QVERIFY(bad.add(entries[2].name, DType::I32, entries[2].shape, QByteArray(int(entries[2].byteSize), '\0')));
    for (qsizetype i = 3; i < entries.size(); ++i)
        QVERIFY(bad.add(entries[i].name, entries[i].dtype, entries[i].shape, good.data(entries[i])));
    QVERIFY(bad.add(QStringLiteral("classifier.extra"), DType::F32, {2}, QByteArray(8, '\0')));
    const QString file = dir->filePath(QStringLiteral("other-model.safetensors"));
    QVERIFY(SafeTensors::save(file, bad));
    const JobSpec spec = mlpJob(file);
    auto net = ml::Model::create(spec.model, spec.seed);
    const QByteArray before = net->weights().buffer();
    auto refused = JobImporter::startingWeights(spec, *net);
    QVERIFY(!refused);
    const QString e = refused.error();
    QVERIFY2(e.startsWith(QStringLiteral("initial_weights %1 does not fit the mlp model: ").arg(file)), qPrintable(e));
    QVERIFY2(e.contains(QStringLiteral("lacks \"%1\"").arg(entries[0].name)), qPrintable(e));
    QVERIFY2(e.contains(QStringLiteral("\"%1\" has shape [1, 2] where the model has").arg(entries[1].name)), qPrintable(e));
    QVERIFY2(e.contains(QStringLiteral("\"%1\" is I32 where the model needs a floating-point type").arg(entries[2].name)),
             qPrintable(e));
    QVERIFY2(e.contains(QStringLiteral("\"classifier.extra\" is not part of the model")), qPrintable(e));
    QCOMPARE(net->weights().buffer(), before); // nothing loaded half-way

    auto missing = JobImporter::startingWeights(mlpJob(dir->filePath(QStringLiteral("absent.safetensors"))), *net);
    QVERIFY(!missing);
    QVERIFY2(missing.error().startsWith(u"initial_weights: "), qPrintable(missing.error()));
}

void TestStartingWeights::refusesNonFiniteValues()
{
    auto dir = test::scratchDir();
    TensorBundle weights = ml::Model::create(mlpJob().model, 1)->weights();
    const TensorEntry first = weights.entries().constFirst();
    weights.mutableValues<float>(first)[0] = std::numeric_limits<float>::quiet_NaN();
    const QString file = dir->filePath(QStringLiteral("nan.safetensors"));
    QVERIFY(SafeTensors::save(file, weights));
    const JobSpec spec = mlpJob(file);
    auto net = ml::Model::create(spec.model, spec.seed);
    auto refused = JobImporter::startingWeights(spec, *net);
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(QStringLiteral("holds a value that is not finite")), qPrintable(refused.error()));

    // The spec keeps the path through its JSON.
    QCOMPARE(JobSpec::fromJson(spec.toJson())->initialWeights, file);
}

QTEST_GUILESS_MAIN(TestStartingWeights)
#include "TestStartingWeights.moc"
