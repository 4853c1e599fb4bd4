// TorchScript jobs in the coordinator: a hostile archive is refused at submit naming the operator; an accepted one
// becomes the job's signed model file, named by its hash in the stored spec and in every manifest, survives a
// restart, and goes back out as a TorchScript archive holding the job's weights.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "core/Coordinator.h"
#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "ml/Model.h"
#include "ml/data/Dataset.h"

#include <QFile>
#include <QJsonArray>
#include <QTest>

#include <future>
#include <random>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestScriptJobs : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void hostileArchiveIsRefusedAtSubmit();
    void archiveIsTheSignedModelFile();
    void exportsTheProgramWithTheJobsWeights();

private:
    QByteArray spec(const QString& archive) const;
    HttpResponse exportOf(qint64 job, bool torchscript);

    test::CoordinatorFixture f;
    QString m_dataset;
};

namespace {

QString fixture(const char* name)
{
    return QStringLiteral(GLEANER_TORCHSCRIPT_FIXTURES "/") + QLatin1StringView(name);
}

// 8x8 images of 3 classes (the fixtures' models give 3 logits).
void writeDataset(const QString& dir)
{
    QDir().mkpath(dir);
    std::mt19937 rng(5);
    for (const char* name : {"train", "test"}) {
        const qint64 count = 96;
        QByteArray pixels(count * 64, '\0');
        std::vector<qint64> labels(static_cast<size_t>(count));
        for (qint64 i = 0; i < count; ++i) {
            labels[size_t(i)] = qint64(rng() % 3);
            for (int p = 0; p < 64; ++p)
                pixels[i * 64 + p] = char(quint8((p * 3 / 64 == labels[size_t(i)] ? 150 : 0) + rng() % 100));
        }
        auto data = ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("synthetic"));
        QVERIFY(SafeTensors::save(dir + u'/' + QLatin1StringView(name) + QStringLiteral(".safetensors"), data->bundle()));
    }
}

} // namespace

void TestScriptJobs::init()
{
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    writeDataset(m_dataset);
}

QByteArray TestScriptJobs::spec(const QString& archive) const
{
    return QStringLiteral(R"({"name": "scripted", "dataset": {"format": "safetensors", "train": "%1/train.safetensors",
        "test": "%1/test.safetensors"}, "model": {"torchscript": "%2", "input_shape": [1, 8, 8], "num_classes": 3},
        "shards": 2, "local_epochs": 1, "batch_size": 16, "optimizer": {"name": "adam", "lr": 0.01},
        "target_accuracy": 0.99, "max_epochs": 3, "deadline_seconds": 60, "seed": 7})")
        .arg(m_dataset, archive)
        .toUtf8();
}

HttpResponse TestScriptJobs::exportOf(qint64 job, bool torchscript)
{
    f.core->drain();
    std::promise<HttpResponse> answer;
    f.core->state().post([&] {
        f.core->weightsExport().serve(
            job, [&](HttpResponse r) { answer.set_value(std::move(r)); }, torchscript);
    });
    auto future = answer.get_future();
    while (future.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready)
        QCoreApplication::processEvents();
    return future.get();
}

void TestScriptJobs::hostileArchiveIsRefusedAtSubmit()
{
    int status = 0;
    const QJsonObject reply =
        f.call([&] { return f.core->jobs().submit(spec(fixture("hidden-in-submodule.pt"))); }, &status);
    QCOMPARE(status, 422);
    const QString error = reply.value(QStringLiteral("error")).toString();
    QVERIFY2(error.startsWith(u"model.torchscript: "), qPrintable(error));
    QVERIFY2(error.contains(u"aten::from_file in __torch__.Helper.peek"), qPrintable(error));
    // Nothing of it was kept: no job.
    QVERIFY(f.call([&] { return f.core->jobs().list(); }).value(QStringLiteral("jobs")).toArray().isEmpty());

    f.call([&] { return f.core->jobs().submit(spec(fixture("wrong-output.pt"))); }, &status);
    QCOMPARE(status, 422);

    // A view 4 TiB past its storage: the coordinator crashed in libtorch running it at submit before the audit.
    const QJsonObject alias =
        f.call([&] { return f.core->jobs().submit(spec(fixture("reshape-alias.pt"))); }, &status);
    QCOMPARE(status, 422);
    QVERIFY2(alias.value(QStringLiteral("error")).toString().contains(u"aten::_reshape_alias"),
             qPrintable(alias.value(QStringLiteral("error")).toString()));
    // A terabyte asked for on the check's batch of two: refused, and the coordinator still answers.
    const QJsonObject huge =
        f.call([&] { return f.core->jobs().submit(spec(fixture("huge-allocation.pt"))); }, &status);
    QCOMPARE(status, 422);
    QVERIFY2(huge.value(QStringLiteral("error")).toString().contains(u"needs more than 4096 MB"),
             qPrintable(huge.value(QStringLiteral("error")).toString()));
    QVERIFY(f.call([&] { return f.core->jobs().list(); }).value(QStringLiteral("jobs")).toArray().isEmpty());
}

void TestScriptJobs::archiveIsTheSignedModelFile()
{
    int status = 0;
    const QJsonObject reply =
        f.call([&] { return f.core->jobs().submit(spec(fixture("batchnorm.pt"))); }, &status);
    QCOMPARE(status, 201);
    const QJsonArray tensors = reply.value(QStringLiteral("model_tensors")).toArray();
    QCOMPARE(tensors.first().toObject().value(QStringLiteral("name")).toString(), QStringLiteral("conv.weight"));
    QCOMPARE(tensors.last().toObject().value(QStringLiteral("name")).toString(), QStringLiteral("bn.num_batches_tracked"));
    const qint64 job = reply.value(QStringLiteral("id")).toInteger();
    f.core->drain();
    QTRY_COMPARE_WITH_TIMEOUT(
        (f.core->drain(),
         f.call([&] { return f.core->jobs().status(job); }).value(QStringLiteral("state")).toString()),
        QStringLiteral("running"), 20'000);

    auto digest = Sha256::hashFile(fixture("batchnorm.pt"));
    QVERIFY(digest);
    const QString sha = Sha256::toHex(*digest);
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    for (bool restarted : {false, true}) {
        if (restarted) // the stored spec names the archive by content; a restarted coordinator finds it again
            QVERIFY(f.reopen());
        const auto tasks = f.lease(agent);
        QCOMPARE(tasks.size(), size_t(1));
        const QJsonObject manifest = tasks.front().manifest;
        const QJsonObject model = manifest.value(QStringLiteral("model")).toObject();
        QCOMPARE(model.value(QStringLiteral("torchscript")).toString(), QString(QStringLiteral("sha256:") + sha));
        const QJsonObject file = manifest.value(QStringLiteral("files")).toArray().first().toObject();
        QCOMPARE(file.value(QStringLiteral("role")).toString(), QStringLiteral("model"));
        QCOMPARE(file.value(QStringLiteral("sha256")).toString(), sha);
        QCOMPARE(file.value(QStringLiteral("size")).toInteger(), QFileInfo(fixture("batchnorm.pt")).size());
        // The job's spec as status shows it names the archive the same way, not the submitter's path.
        const QJsonObject status = f.call([&] { return f.core->jobs().status(job); });
        QVERIFY2(!QJsonDocument(status).toJson().contains(fixture("batchnorm.pt").toUtf8()), "the submitter's path leaked");
    }
}

void TestScriptJobs::exportsTheProgramWithTheJobsWeights()
{
    const qint64 job = f.submit(spec(fixture("residual.pt")));
    QVERIFY(job > 0);
    const HttpResponse weights = exportOf(job, false);
    QCOMPARE(weights.status, 200);
    auto expected = SafeTensors::load(weights.filePath);
    QVERIFY(expected);

    for (bool restarted : {false, true}) {
        if (restarted)
            QVERIFY(f.reopen());
        const HttpResponse program = exportOf(job, true);
        QVERIFY2(program.status == 200, program.body.constData());
        ModelSpec model;
        model.arch = Architecture::TorchScript;
        model.torchscript = program.filePath;
        model.inputShape = {1, 8, 8};
        model.numClasses = 3;
        auto loaded = ml::Model::create(model, 1);
        QVERIFY2(loaded, qPrintable(loaded ? QString() : loaded.error()));
        const TensorBundle inside = loaded->weights();
        for (const TensorEntry& entry : expected->entries())
            QCOMPARE(inside.data(*inside.find(entry.name)), expected->data(entry));
    }

    // A zoo job has no program to give; an unknown job has nothing.
    const QString zooData = f.scratch->filePath(QStringLiteral("zoo"));
    test::writeSyntheticDataset(zooData);
    const qint64 zoo = f.submit(test::tinyJobSpec(zooData, 2));
    QVERIFY(zoo > 0);
    const HttpResponse refused = exportOf(zoo, true);
    QCOMPARE(refused.status, 409);
    QVERIFY2(refused.body.contains("trains the zoo's mlp model, not a TorchScript program"), refused.body.constData());
    QCOMPARE(exportOf(1'000, true).status, 404);
}

QTEST_GUILESS_MAIN(TestScriptJobs)
#include "TestScriptJobs.moc"
