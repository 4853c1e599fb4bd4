#include "WorkerTask.h"

#include "format/SafeTensors.h"
#include "ml/Model.h"
#include "ml/data/Dataset.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QTest>

#include <random>
#include <vector>

namespace gleaner::test {

void writeTask(const QString& dir, int localEpochs, std::optional<qint64> steps, const QJsonObject& upload)
{
    QDir().mkpath(dir);
    std::mt19937 rng(3);
    const qint64 count = 512;
    QByteArray pixels(count * 64, '\0');
    std::vector<qint64> labels(static_cast<size_t>(count));
    for (qint64 i = 0; i < count; ++i) {
        labels[size_t(i)] = qint64(rng() % 4);
        for (int p = 0; p < 64; ++p)
            pixels[i * 64 + p] = char(quint8(((p / 16) == labels[size_t(i)] ? 150 : 0) + rng() % 100));
    }
    auto shard = ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("shard"));
    QVERIFY(SafeTensors::save(dir + QStringLiteral("/shard.safetensors"), shard->bundle()).ok());
    ModelSpec model;
    model.arch = Architecture::Mlp;
    model.inputShape = {1, 8, 8};
    model.numClasses = 4;
    model.hidden = {32};
    auto net = ml::Model::create(model, 1);
    QVERIFY(SafeTensors::save(dir + QStringLiteral("/weights.safetensors"), net->weights()).ok());
    QJsonObject hyper{{QStringLiteral("local_epochs"), localEpochs},
                      {QStringLiteral("batch_size"), 16},
                      {QStringLiteral("optimizer"), QJsonObject{{QStringLiteral("name"), QStringLiteral("adam")},
                                                                {QStringLiteral("lr"), 0.01}}},
                      {QStringLiteral("seed"), 99}};
    if (steps)
        hyper.insert(QStringLiteral("steps"), *steps);
    QJsonObject manifest{{QStringLiteral("lease_id"), QStringLiteral("abc")},
                         {QStringLiteral("nonce"), QStringLiteral("f9e7ba5c922dfa993b0564ddb94c1748")},
                         {QStringLiteral("base_version"), 7},
                         {QStringLiteral("model"), model.toJson()},
                         {QStringLiteral("hyperparameters"), hyper}};
    if (!upload.isEmpty())
        manifest.insert(QStringLiteral("upload"), upload);
    QFile file(dir + QStringLiteral("/manifest.json"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(QJsonDocument(manifest).toJson(QJsonDocument::Compact));
}

void setModel(const QString& dir, const QJsonObject& model)
{
    QFile file(dir + QStringLiteral("/manifest.json"));
    QVERIFY(file.open(QIODevice::ReadOnly));
    QJsonObject manifest = QJsonDocument::fromJson(file.readAll()).object();
    file.close();
    manifest.insert(QStringLiteral("model"), model);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(QJsonDocument(manifest).toJson(QJsonDocument::Compact));
}

} // namespace gleaner::test
