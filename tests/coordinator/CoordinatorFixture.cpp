#include "CoordinatorFixture.h"

#include "TestSupport.h"
#include "format/SafeTensors.h"

#include <QDir>
#include <QJsonDocument>
#include <QTest>

#include <random>

namespace gleaner::test {
namespace {

ml::Dataset synthetic(qint64 count, quint32 seed)
{
    std::mt19937 rng(seed);
    QByteArray pixels(count * 64, '\0');
    std::vector<qint64> labels(static_cast<size_t>(count));
    for (qint64 i = 0; i < count; ++i) {
        const int label = int(rng() % 4);
        labels[size_t(i)] = label;
        for (int p = 0; p < 64; ++p)
            pixels[i * 64 + p] = char(quint8(((p / 16) == label ? 150 : 0) + rng() % 100));
    }
    return *ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("synthetic"));
}

} // namespace

void writeSyntheticDataset(const QString& dir, qint64 trainCount, qint64 testCount)
{
    QDir().mkpath(dir);
    QVERIFY(SafeTensors::save(dir + QStringLiteral("/train.safetensors"), synthetic(trainCount, 1).bundle()).ok());
    QVERIFY(SafeTensors::save(dir + QStringLiteral("/test.safetensors"), synthetic(testCount, 2).bundle()).ok());
}

QByteArray tinyJobSpec(const QString& dir, int shards, int maxEpochs, double target, int deadlineSeconds,
                       const QString& extra)
{
    return QStringLiteral(R"({"name": "tiny", "dataset": {"format": "safetensors", "train": "%1/train.safetensors",
        "test": "%1/test.safetensors"}, "model": {"arch": "mlp", "input_shape": [1, 8, 8], "num_classes": 4,
        "hidden": [16]}, "shards": %2, "local_epochs": 1, "batch_size": 16, "optimizer": {"name": "adam", "lr": 0.01},
        "target_accuracy": %3, "max_epochs": %4, "deadline_seconds": %5, "seed": 7 %6})")
        .arg(dir)
        .arg(shards)
        .arg(target)
        .arg(maxEpochs)
        .arg(deadlineSeconds)
        .arg(extra)
        .toUtf8();
}

bool CoordinatorFixture::setUp(bool openEnrollment)
{
    scratch = scratchDir();
    dir = coordinator::DataDirectory(scratch->filePath(QStringLiteral("data")));
    config.openEnrollment = openEnrollment;
    config.listenPort = 0;
    config.snapshotEveryUpdates = 1000;
    config.publishIntervalMs = 0;
    auto created = coordinator::initializeDataDirectory(dir, config);
    if (!created) {
        qWarning() << created.error();
        return false;
    }
    init = *created;
    return reopen();
}

bool CoordinatorFixture::reopen()
{
    core.reset();
    auto opened = coordinator::Coordinator::open(dir, config, clock);
    if (!opened) {
        qWarning() << opened.error();
        return false;
    }
    core = std::move(*opened);
    return true;
}

QJsonObject CoordinatorFixture::call(const std::function<coordinator::HttpResponse()>& work, int* status)
{
    const coordinator::HttpResponse response = core->state().call(work);
    if (status)
        *status = response.status;
    return QJsonDocument::fromJson(response.body).object();
}

QJsonObject CoordinatorFixture::enroll(const QString& name)
{
    QJsonObject request{{QStringLiteral("name"), name}, {QStringLiteral("platform"), QStringLiteral("test")}};
    return call([&] { return core->enroll(request); });
}

qint64 CoordinatorFixture::submit(const QByteArray& spec)
{
    int status = 0;
    const QJsonObject reply = call([&] { return core->submitJob(spec); }, &status);
    if (status != 201) {
        qWarning() << "submit refused:" << reply;
        return -1;
    }
    const qint64 id = reply.value(QStringLiteral("id")).toInteger();
    for (int i = 0; i < 200; ++i) {
        core->drain();
        const QJsonObject job = call([&] { return core->jobStatus(id); });
        if (job.value(QStringLiteral("state")).toString() != u"created")
            return id;
        QTest::qWait(20);
    }
    return -1;
}

} // namespace gleaner::test
