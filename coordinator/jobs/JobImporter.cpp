#include "jobs/JobImporter.h"

#include "format/SafeTensors.h"
#include "ml/Evaluator.h"
#include "ml/Model.h"
#include "ml/data/TrainingImport.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonObject>
#include <QLoggingCategory>
#include <QFileInfo>
#include <QJsonDocument>

#include <algorithm>
#include <cmath>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator::JobImporter {

QByteArray modelSpecBytes(const ModelSpec& model)
{
    return QJsonDocument(model.toJson()).toJson(QJsonDocument::Compact);
}

Status checkDatasetFiles(const DatasetSpec& dataset)
{
    QStringList files;
    switch (dataset.format) {
    case DatasetSpec::Format::FashionMnist:
    case DatasetSpec::Format::Cifar10:
    case DatasetSpec::Format::Images:
        if (!QFileInfo(dataset.dir).isDir())
            return fail(QStringLiteral("dataset.dir: folder %1 does not exist on the coordinator%2")
                            .arg(dataset.dir,
                                 dataset.format == DatasetSpec::Format::FashionMnist
                                     ? QStringLiteral(" (install Debian's dataset-fashion-mnist package)")
                                     : QString()));
        return {};
    case DatasetSpec::Format::Idx:
        files = {dataset.trainImages, dataset.trainLabels, dataset.testImages, dataset.testLabels};
        break;
    case DatasetSpec::Format::SafeTensors:
        files = {dataset.train, dataset.test};
        break;
    case DatasetSpec::Format::Csv:
        files = {dataset.train, dataset.test};
        break;
    case DatasetSpec::Format::Npz:
        files = dataset.file.isEmpty() ? QStringList{dataset.train, dataset.test} : QStringList{dataset.file};
        break;
    }
    for (const QString& file : files)
        if (!file.isEmpty() && !QFileInfo(file).isFile()) // an empty "test": test_fraction holds it out
            return fail(QStringLiteral("dataset: file %1 does not exist on the coordinator").arg(file));
    return {};
}

Result<QJsonArray> checkModel(const ModelSpec& model)
{
    if (model.arch != Architecture::TorchScript)
        return QJsonArray{};
    auto net = ml::Model::create(model, 0);
    if (!net)
        return fail(QStringLiteral("model.torchscript: %1").arg(net.error()));
    QJsonArray tensors;
    const TensorBundle weights = net->weights();
    for (const TensorEntry& entry : weights.entries()) {
        QJsonArray shape;
        for (qint64 d : entry.shape)
            shape.append(d);
        tensors.append(QJsonObject{{QStringLiteral("name"), entry.name},
                                   {QStringLiteral("shape"), shape},
                                   {QStringLiteral("dtype"), dtypeName(entry.dtype)}});
    }
    return tensors;
}

ModelSpec storedModel(const ModelSpec& model, const BlobInfo& blob, const BlobStore& blobs)
{
    if (model.arch != Architecture::TorchScript)
        return model;
    ModelSpec stored = model;
    stored.torchscript = QStringLiteral("sha256:") + blob.sha256;
    stored.archivePath = blobs.path(blob.sha256);
    return stored;
}

Result<TensorBundle> startingWeights(const JobSpec& spec, ml::Model& net)
{
    TensorBundle seeded = net.weights();
    if (seeded.isEmpty())
        return fail(QStringLiteral("cannot read the initial weights of the model; see the log"));
    if (spec.initialWeights.isEmpty())
        return seeded;
    const QString& file = spec.initialWeights;
    auto given = SafeTensors::load(file);
    if (!given)
        return fail(QStringLiteral("initial_weights: %1").arg(given.error()));
    // Every mismatch at once: a file from another model usually differs in many places, and fixing them one
    // submit at a time would be slow.
    QStringList problems;
    for (const TensorEntry& want : seeded.entries()) {
        const TensorEntry* have = given->find(want.name);
        if (!have)
            problems << QStringLiteral("lacks \"%1\" %2").arg(want.name, shapeToString(want.shape));
        else if (have->shape != want.shape)
            problems << QStringLiteral("\"%1\" has shape %2 where the model has %3")
                            .arg(want.name, shapeToString(have->shape), shapeToString(want.shape));
        else if (dtypeIsFloating(have->dtype) != dtypeIsFloating(want.dtype))
            problems << QStringLiteral("\"%1\" is %2 where the model needs %3")
                            .arg(want.name, dtypeName(have->dtype), dtypeIsFloating(want.dtype)
                                                                        ? QStringLiteral("a floating-point type")
                                                                        : QStringLiteral("an integer type"));
    }
    for (const TensorEntry& extra : given->entries())
        if (!seeded.find(extra.name))
            problems << QStringLiteral("\"%1\" is not part of the model").arg(extra.name);
    if (!problems.isEmpty()) {
        const qsizetype shown = std::min<qsizetype>(problems.size(), 20);
        return fail(QStringLiteral("initial_weights %1 does not fit the %2 model: %3%4")
                        .arg(file, architectureName(spec.model.arch), problems.first(shown).join(QStringLiteral("; ")),
                             problems.size() > shown ? QStringLiteral("; and %1 more").arg(problems.size() - shown)
                                                     : QString()));
    }
    if (auto loaded = net.setWeights(*given); !loaded)
        return fail(QStringLiteral("initial_weights %1: %2").arg(file, loaded.error()));
    TensorBundle start = net.weights();
    for (const TensorEntry& entry : start.entries()) {
        if (entry.dtype != DType::F32)
            continue;
        for (const float value : start.values<float>(entry))
            if (!std::isfinite(value))
                return fail(QStringLiteral("initial_weights %1: \"%2\" holds a value that is not finite").arg(file, entry.name));
    }
    return start;
}

Result<ImportedJob> import(const JobSpec& spec, BlobStore& blobs, const QString& scratchDir)
{
    // The training set is streamed into its shards (TrainingImport), never held whole: its size is bounded by
    // the disk, not by the coordinator's memory. Only the test set is loaded.
    auto data = ml::TrainingImport::open(spec.dataset, spec.limitTrain, spec.model.inputShape);
    if (!data)
        return fail(data.error());
    if (spec.model.arch != Architecture::Mlp && data->sampleShape() != spec.model.inputShape)
        return fail(QStringLiteral("model.input_shape is %1 but the dataset's samples have shape %2")
                        .arg(shapeToString(spec.model.inputShape), shapeToString(data->sampleShape())));
    if (data->trainLabelBound() > spec.model.numClasses || data->testLabelBound() > spec.model.numClasses)
        return fail(QStringLiteral("model.num_classes is %1 but the dataset has %2 classes")
                        .arg(spec.model.numClasses)
                        .arg(std::max(data->trainLabelBound(), data->testLabelBound())));

    ImportedJob job;
    job.notes = data->notes();
    const QString shardDir = QDir(scratchDir).filePath(QStringLiteral("shards"));
    // A large training set takes minutes: the log says how far the import is, every 10 seconds after the first 5.
    QElapsedTimer clock;
    clock.start();
    qint64 nextReportMs = 5'000;
    const auto progress = [&](qint64 done, qint64 total) {
        if (clock.elapsed() < nextReportMs)
            return;
        nextReportMs = clock.elapsed() + 10'000;
        qCInfo(lcCoordinator).noquote() << QStringLiteral("job \"%1\": %2% of the training set in its shards (%3 of %4 samples)")
                                               .arg(spec.name)
                                               .arg(100 * done / std::max<qint64>(total, 1))
                                               .arg(done)
                                               .arg(total);
    };
    auto files = data->writeShards(spec.shards, spec.seed, shardDir, progress);
    if (!files)
        return fail(files.error());
    for (const auto& file : *files) {
        auto blob = blobs.adoptFile(file.path);
        if (!blob) {
            QDir(shardDir).removeRecursively();
            return fail(blob.error());
        }
        job.shards.append(ShardRef{file.index, blob->sha256, blob->size, file.samples});
    }
    QDir(shardDir).removeRecursively();

    // A TorchScript job's model file is its archive, copied into the store; it is loaded and checked again from
    // there, so what agents get is exactly what passed the checks.
    Result<BlobInfo> model = Error{};
    if (spec.model.arch == Architecture::TorchScript) {
        QFile archive(spec.model.archiveFile());
        if (!archive.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("model.torchscript: cannot read %1: %2").arg(archive.fileName(), archive.errorString()));
        model = blobs.put(archive.readAll());
    } else {
        model = blobs.put(modelSpecBytes(spec.model));
    }
    if (!model)
        return fail(model.error());
    job.model = *model;
    job.modelSpec = storedModel(spec.model, *model, blobs);

    auto net = ml::Model::create(job.modelSpec, spec.seed);
    if (!net)
        return fail(QStringLiteral("model: %1").arg(net.error()));
    auto initial = startingWeights(spec, *net);
    if (!initial)
        return fail(initial.error());
    // One forward pass over real samples before any agent is bothered: a program that accepts zeros but fails on
    // the job's data (a dtype, a range) is named here, not by every agent's first subtask.
    if (auto probe = ml::Evaluator::evaluate(*net, data->test().head(64)); !probe)
        return fail(QStringLiteral("model: the model cannot be evaluated on the job's test samples: %1").arg(probe.error()));
    auto weights = blobs.put(SafeTensors::serialize(*initial));
    if (!weights)
        return fail(weights.error());
    job.initialWeights = *weights;

    auto test = blobs.put(SafeTensors::serialize(data->test().bundle()));
    if (!test)
        return fail(test.error());
    job.testSet = *test;
    return job;
}

} // namespace gleaner::coordinator::JobImporter
