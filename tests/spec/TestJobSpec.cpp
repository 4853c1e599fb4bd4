#include "spec/JobSpec.h"
#include "spec/JsonFields.h"

#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonParseError>
#include <QTest>

#include <cmath>
#include <numbers>

using namespace gleaner;
using namespace Qt::StringLiterals;

Q_DECLARE_METATYPE(gleaner::JobSpec)

namespace gleaner {
// QCOMPARE prints a spec that differs as its JSON.
char* toString(const JobSpec& spec)
{
    return test::jsonToString(spec);
}
} // namespace gleaner

namespace {

// Only the required fields: every invalid row changes one thing in it, so the error is about that thing.
constexpr auto kMinimalJob = R"({
    "name": "t",
    "dataset": {"format": "fashion-mnist"},
    "model": {"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10},
    "shards": 50,
    "optimizer": {"name": "adam", "lr": 0.001},
    "target_accuracy": 0.88
})";

// The minimal job with `patch`'s top-level fields replaced and `remove` taken out.
QJsonObject patchedJob(const QByteArray& patch, const QString& remove = QString())
{
    QJsonObject job = gleaner::test::jsonObject(kMinimalJob);
    const QJsonObject changes = gleaner::test::jsonObject(patch.isEmpty() ? "{}"_ba : patch);
    for (auto it = changes.begin(); it != changes.end(); ++it)
        job.insert(it.key(), it.value());
    if (!remove.isEmpty())
        job.remove(remove);
    return job;
}

// The JobSpec kMinimalJob parses to: its fields plus every default.
JobSpec minimalSpec()
{
    JobSpec spec;
    spec.name = u"t"_s;
    spec.model.inputShape = {1, 28, 28};
    spec.shards = 50;
    spec.targetAccuracy = 0.88;
    return spec;
}

} // namespace

class TestJobSpec : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void validJobs_data();
    void validJobs();
    void invalidJobs_data();
    void invalidJobs();
    void roundTrip_data();
    void roundTrip();
    void defaultSpecRoundTrips();
    void textErrors_data();
    void textErrors();
    void sampleJobsParse_data();
    void sampleJobsParse();
    void demoJobIsTheDocumentedOne();
    void jsonFieldHelpers();
    void scheduleFactorsAtHandComputedPoints();
};

void TestJobSpec::validJobs_data()
{
    QTest::addColumn<QByteArray>("patch");
    QTest::addColumn<JobSpec>("expected");

    QTest::newRow("required fields only, the rest defaulted") << QByteArray() << minimalSpec();

    JobSpec full = minimalSpec();
    full.name = QString(100, u'x');
    full.dataset.format = DatasetSpec::Format::Idx;
    full.dataset.trainImages = u"/data/train-images-idx3-ubyte.gz"_s;
    full.dataset.trainLabels = u"/data/train-labels-idx1-ubyte.gz"_s;
    full.dataset.testImages = u"/data/t10k-images-idx3-ubyte"_s;
    full.dataset.testLabels = u"/data/t10k-labels-idx1-ubyte"_s;
    full.limitTrain = 2000;
    full.model.arch = Architecture::Mlp;
    full.model.inputShape = {784};
    full.model.hidden = {256, 128};
    full.shards = 2000;
    full.localEpochs = 1000;
    full.batchSize = 65536;
    full.optimizer.kind = OptimizerSpec::Kind::Sgd;
    full.optimizer.lr = 10;
    full.optimizer.momentum = 0.9;
    full.optimizer.nesterov = true;
    full.optimizer.weightDecay = 5e-4;
    full.aggregation.alphaPerEpoch = false;
    full.aggregation.alpha = 0.95;
    full.targetAccuracy = 1.0;
    full.maxEpochs = 100000;
    full.deadlineSeconds = 604800;
    full.replication = 16;
    full.seed = 0;
    QTest::newRow("idx, mlp, sgd, constant alpha, every field at a limit")
        << QByteArray(R"({"name": ")" + QByteArray(100, 'x') + R"(",
            "dataset": {"format": "idx", "train_images": "/data/train-images-idx3-ubyte.gz",
                        "train_labels": "/data/train-labels-idx1-ubyte.gz",
                        "test_images": "/data/t10k-images-idx3-ubyte", "test_labels": "/data/t10k-labels-idx1-ubyte"},
            "limit_train": 2000,
            "model": {"arch": "mlp", "input_shape": [784], "num_classes": 10, "hidden": [256, 128]},
            "shards": 2000, "local_epochs": 1000, "batch_size": 65536,
            "optimizer": {"name": "sgd", "lr": 10, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4},
            "aggregation": {"rule": "vc-asgd", "alpha": 0.95},
            "target_accuracy": 1, "max_epochs": 100000, "deadline_seconds": 604800, "replication": 16,
            "seed": 0})")
        << full;

    JobSpec cifar = minimalSpec();
    cifar.dataset.format = DatasetSpec::Format::Cifar10;
    cifar.dataset.dir = u"/srv/cifar-10-batches-bin"_s;
    cifar.model.arch = Architecture::ResNet;
    cifar.model.inputShape = {3, 32, 32};
    cifar.model.depth = 20;
    cifar.optimizer.beta1 = 0.8;
    cifar.optimizer.beta2 = 0.99;
    cifar.optimizer.eps = 1e-6;
    cifar.optimizer.lr = 0.01;
    cifar.shards = 1;
    cifar.deadlineSeconds = 10;
    cifar.seed = quint64(kMaxJsonInteger);
    QTest::newRow("cifar10, resnet, adam with its betas, seed 2^53")
        << R"({"dataset": {"format": "cifar10", "dir": "/srv/cifar-10-batches-bin"},
               "model": {"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 20},
               "optimizer": {"name": "adam", "lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
               "shards": 1, "deadline_seconds": 10, "seed": 9007199254740992})"_ba
        << cifar;

    JobSpec safetensors = minimalSpec();
    safetensors.dataset.format = DatasetSpec::Format::SafeTensors;
    safetensors.dataset.train = u"train.safetensors"_s;
    safetensors.dataset.test = u"test.safetensors"_s;
    safetensors.limitTrain = 50;
    safetensors.optimizer.kind = OptimizerSpec::Kind::Sgd;
    safetensors.optimizer.lr = 0.05;
    QTest::newRow("safetensors, plain sgd, limit_train equal to shards")
        << R"({"dataset": {"format": "safetensors", "train": "train.safetensors", "test": "test.safetensors"},
               "optimizer": {"name": "sgd", "lr": 0.05}, "limit_train": 50})"_ba
        << safetensors;

    JobSpec ownDir = minimalSpec();
    ownDir.dataset.dir = u"/home/me/fashion"_s;
    ownDir.aggregation.alpha = 0.5;
    ownDir.aggregation.alphaPerEpoch = false;
    QTest::newRow("fashion-mnist from its own folder, alpha 0.5")
        << R"({"dataset": {"format": "fashion-mnist", "dir": "/home/me/fashion"},
               "aggregation": {"rule": "vc-asgd", "alpha": 0.5}})"_ba
        << ownDir;

    JobSpec images = minimalSpec();
    images.dataset.format = DatasetSpec::Format::Images;
    images.dataset.dir = u"/srv/photos"_s;
    images.dataset.stopOnBadFile = true;
    images.dataset.testFraction = 0.2;
    images.model.inputShape = {3, 32, 32};
    images.dataset.normalizeMean = {0.49, 0.48, 0.45};
    images.dataset.normalizeStd = {0.25};
    QTest::newRow("images held out, stopping at a bad file, normalised per channel")
        << R"({"dataset": {"format": "images", "dir": "/srv/photos", "on_bad_file": "stop", "test_fraction": 0.2,
                           "normalize": {"mean": [0.49, 0.48, 0.45], "std": [0.25]}},
               "model": {"arch": "cnn", "input_shape": [3, 32, 32], "num_classes": 10}})"_ba
        << images;
    JobSpec grayImages = minimalSpec();
    grayImages.dataset.format = DatasetSpec::Format::Images;
    grayImages.dataset.dir = u"scans"_s;
    QTest::newRow("images with their own test folder, skipping bad files")
        << R"({"dataset": {"format": "images", "dir": "scans", "on_bad_file": "skip"}})"_ba << grayImages;
    JobSpec normalizedCsv = minimalSpec();
    normalizedCsv.dataset.format = DatasetSpec::Format::Csv;
    normalizedCsv.dataset.train = u"t.csv"_s;
    normalizedCsv.dataset.test = u"v.csv"_s;
    normalizedCsv.dataset.label = u"y"_s;
    normalizedCsv.dataset.normalizeMean = {-1.5};
    normalizedCsv.dataset.normalizeStd = {2, 0.5};
    QTest::newRow("csv normalised, one mean for all features")
        << R"({"dataset": {"format": "csv", "train": "t.csv", "test": "v.csv", "label": "y",
                           "normalize": {"mean": [-1.5], "std": [2, 0.5]}}})"_ba
        << normalizedCsv;

    QTest::newRow("aggregation without alpha means per-epoch")
        << R"({"aggregation": {"rule": "vc-asgd"}})"_ba << minimalSpec();

    JobSpec fedAsync = minimalSpec();
    fedAsync.aggregation.rule = AggregationSpec::Rule::FedAsync;
    fedAsync.aggregation.alphaPerEpoch = false;
    fedAsync.aggregation.alpha = 0.5;
    QTest::newRow("fedasync with its defaults") << R"({"aggregation": {"rule": "fedasync"}})"_ba << fedAsync;
    JobSpec hinge = fedAsync;
    hinge.aggregation.alpha = 0.9;
    hinge.aggregation.staleness.function = StalenessSpec::Function::Hinge;
    hinge.aggregation.staleness.a = 10.0;
    hinge.aggregation.staleness.b = 6;
    QTest::newRow("fedasync, hinge")
        << R"({"aggregation": {"rule": "fedasync", "alpha": 0.9, "staleness": {"function": "hinge", "b": 6}}})"_ba
        << hinge;
    JobSpec constant = fedAsync;
    constant.aggregation.alpha = 1.0;
    constant.aggregation.staleness.function = StalenessSpec::Function::Constant;
    JobSpec fedBuff = minimalSpec();
    fedBuff.aggregation.rule = AggregationSpec::Rule::FedBuff;
    fedBuff.aggregation.alphaPerEpoch = false;
    QTest::newRow("fedbuff with its defaults") << R"({"aggregation": {"rule": "fedbuff"}})"_ba << fedBuff;
    JobSpec nesterov = minimalSpec();
    nesterov.aggregation.rule = AggregationSpec::Rule::DelayedNesterov;
    nesterov.aggregation.alphaPerEpoch = false;
    nesterov.aggregation.staleness.function = StalenessSpec::Function::Constant;
    nesterov.aggregation.buffer = 8;
    nesterov.aggregation.serverLr = 0.7;
    nesterov.aggregation.momentum = 0.9;
    QTest::newRow("delayed-nesterov")
        << R"({"aggregation": {"rule": "delayed-nesterov", "buffer": 8, "server_lr": 0.7, "momentum": 0.9}})"_ba
        << nesterov;
    JobSpec adaptive = minimalSpec();
    adaptive.aggregation.rule = AggregationSpec::Rule::AdaptiveNesterov;
    adaptive.aggregation.alphaPerEpoch = false;
    adaptive.aggregation.staleness.function = StalenessSpec::Function::Constant;
    adaptive.aggregation.momentum = 0.6;
    QTest::newRow("adaptive-nesterov")
        << R"({"aggregation": {"rule": "adaptive-nesterov", "momentum": 0.6}})"_ba << adaptive;
    QTest::newRow("fedasync, constant, alpha 1")
        << R"({"aggregation": {"rule": "fedasync", "alpha": 1, "staleness": {"function": "constant"}}})"_ba
        << constant;
    JobSpec topk = minimalSpec();
    topk.upload.encoding = UploadSpec::Encoding::TopK;
    topk.upload.density = 0.02;
    topk.upload.zstd = false;
    QTest::newRow("topk upload, no zstd")
        << R"({"upload": {"encoding": "topk", "density": 0.02, "zstd": false}})"_ba << topk;
    JobSpec int8 = minimalSpec();
    int8.upload.encoding = UploadSpec::Encoding::Int8;
    int8.upload.errorFeedback = false;
    QTest::newRow("int8 upload without error feedback")
        << R"({"upload": {"encoding": "int8", "error_feedback": false}})"_ba << int8;
    QTest::newRow("fp32 upload said") << R"({"upload": {"encoding": "fp32"}})"_ba << minimalSpec();
    JobSpec sparse = minimalSpec();
    sparse.aggregation.rule = AggregationSpec::Rule::AdaptiveNesterov;
    sparse.aggregation.alphaPerEpoch = false;
    sparse.aggregation.staleness.function = StalenessSpec::Function::Constant;
    sparse.download.density = 0.05;
    QTest::newRow("sparse download with adaptive-nesterov")
        << R"({"aggregation": {"rule": "adaptive-nesterov"}, "download": {"density": 0.05}})"_ba << sparse;
    JobSpec augmented = minimalSpec();
    augmented.augment.cropPadding = 4;
    augmented.augment.flip = true;
    QTest::newRow("augment: crop and flip")
        << R"({"augment": {"crop_padding": 4, "flip": true}})"_ba << augmented;
    JobSpec flipped = minimalSpec();
    flipped.augment.flip = true;
    QTest::newRow("augment: flip alone") << R"({"augment": {"flip": true}})"_ba << flipped;
    JobSpec halfImage = minimalSpec();
    halfImage.augment.cropPadding = 14;
    QTest::newRow("augment: crop_padding half of 28")
        << R"({"augment": {"crop_padding": 14}})"_ba << halfImage;
    QTest::newRow("augment: both off said")
        << R"({"augment": {"crop_padding": 0, "flip": false}})"_ba << minimalSpec();
    QTest::newRow("augment: empty object") << R"({"augment": {}})"_ba << minimalSpec();

    JobSpec cosine = minimalSpec();
    cosine.optimizer.schedule.given = true;
    cosine.optimizer.schedule.warmupEpochs = 0.5;
    cosine.optimizer.schedule.decay = LrSchedule::Decay::Cosine;
    cosine.optimizer.schedule.epochs = 20; // the job's max_epochs, when not given
    QTest::newRow("optimizer schedule: cosine to max_epochs")
        << R"({"optimizer": {"name": "adam", "lr": 0.001, "schedule": {"warmup_epochs": 0.5, "decay": "cosine"}}})"_ba
        << cosine;
    JobSpec steps = minimalSpec();
    steps.aggregation.rule = AggregationSpec::Rule::AdaptiveNesterov;
    steps.aggregation.alphaPerEpoch = false;
    steps.aggregation.staleness.function = StalenessSpec::Function::Constant;
    steps.aggregation.schedule.given = true;
    steps.aggregation.schedule.decay = LrSchedule::Decay::Steps;
    steps.aggregation.schedule.milestones = {5, 8};
    steps.aggregation.schedule.gamma = 0.5;
    JobSpec ada = minimalSpec();
    ada.aggregation.rule = AggregationSpec::Rule::AdaptiveNesterov;
    ada.aggregation.alphaPerEpoch = false;
    ada.aggregation.staleness.function = StalenessSpec::Function::Constant;
    ada.aggregation.adaScale = true;
    QTest::newRow("aggregation: adascale")
        << R"({"aggregation": {"rule": "adaptive-nesterov", "adascale": true}})"_ba << ada;
    ada.aggregation.adaScale = false;
    ada.aggregation.emaDecay = 0.9;
    QTest::newRow("aggregation: ema_decay")
        << R"({"aggregation": {"rule": "adaptive-nesterov", "ema_decay": 0.9}})"_ba << ada;
    JobSpec averagedVcAsgd = minimalSpec();
    averagedVcAsgd.aggregation.emaDecay = 0.5;
    QTest::newRow("aggregation: ema_decay on vc-asgd")
        << R"({"aggregation": {"rule": "vc-asgd", "ema_decay": 0.5}})"_ba << averagedVcAsgd;
    QTest::newRow("aggregation schedule: steps")
        << R"({"aggregation": {"rule": "adaptive-nesterov", "schedule": {"decay": "steps", "milestones": [5, 8], "gamma": 0.5}}})"_ba
        << steps;
    JobSpec capped = minimalSpec();
    capped.maxAgents = 6;
    capped.capAtWidth = false;
    capped.priority = 2.5;
    QTest::newRow("width: max_agents, cap_at_width, priority")
        << R"({"max_agents": 6, "cap_at_width": false, "priority": 2.5})"_ba << capped;
}

void TestJobSpec::validJobs()
{
    QFETCH(QByteArray, patch);
    QFETCH(JobSpec, expected);
    const Result<JobSpec> spec = JobSpec::fromJson(patchedJob(patch));
    QVERIFY2(spec.ok(), qPrintable(spec.error()));
    QCOMPARE(*spec, expected);
}

void TestJobSpec::invalidJobs_data()
{
    QTest::addColumn<QByteArray>("patch");
    QTest::addColumn<QString>("remove");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("message");

    const auto change = [](const char* name, const char* patch, const char* path, const char* message) {
        QTest::newRow(name) << QByteArray(patch) << QString() << QString::fromUtf8(path)
                            << QString::fromUtf8(message);
    };
    const auto missing = [](const char* field, const char* path) {
        QTest::newRow(qPrintable(u"missing "_s + QString::fromUtf8(field)))
            << QByteArray() << QString::fromUtf8(field) << QString::fromUtf8(path)
            << u"required field is missing"_s;
    };

    // the job's own fields
    missing("name", "job.name");
    missing("dataset", "job.dataset");
    missing("model", "job.model");
    missing("optimizer", "job.optimizer");
    missing("shards", "job.shards");
    missing("target_accuracy", "job.target_accuracy");
    change("empty name", R"({"name": ""})", "job.name",
           R"(expected a string of 1 to 100 characters, got "")");
    change("name of 101 characters", qPrintable(u"{\"name\": \"%1\"}"_s.arg(QString(101, u'n'))), "job.name",
           "(101 characters)");
    change("name a number", R"({"name": 5})", "job.name", "got 5");
    change("shards zero", R"({"shards": 0})", "job.shards", "expected an integer from 1 to 100000, got 0");
    change("shards too many", R"({"shards": 100001})", "job.shards", "got 100001");
    change("shards fraction", R"({"shards": 3.5})", "job.shards", "got 3.5");
    change("shards a string", R"({"shards": "50"})", "job.shards", R"(got "50")");
    change("shards beyond int", R"({"shards": 1e12})", "job.shards", "got 1000000000000");
    change("local_epochs zero", R"({"local_epochs": 0})", "job.local_epochs",
           "expected an integer from 1 to 1000, got 0");
    change("batch_size too large", R"({"batch_size": 65537})", "job.batch_size",
           "expected an integer from 1 to 65536, got 65537");
    change("target_accuracy zero", R"({"target_accuracy": 0})", "job.target_accuracy",
           "expected a number > 0 and <= 1, got 0");
    change("target_accuracy as percent", R"({"target_accuracy": 88})", "job.target_accuracy", "got 88");
    change("target_accuracy a word", R"({"target_accuracy": "high"})", "job.target_accuracy",
           R"(got "high")");
    change("max_epochs zero", R"({"max_epochs": 0})", "job.max_epochs",
           "expected an integer from 1 to 100000");
    change("deadline too short", R"({"deadline_seconds": 5})", "job.deadline_seconds",
           "expected an integer from 10 to 604800, got 5");
    change("replication 17", R"({"replication": 17})", "job.replication", "expected an integer from 1 to 16");
    change("negative seed", R"({"seed": -1})", "job.seed", "expected a non-negative integer <= 2^53, got -1");
    change("seed beyond 2^53", R"({"seed": 9007199254740993})", "job.seed", "got 9007199254740993");
    change("seed fraction", R"({"seed": 4.2})", "job.seed", "got 4.2");
    change("limit_train zero", R"({"limit_train": 0})", "job.limit_train",
           "expected a positive integer <= 2^53, got 0");
    change("limit_train below shards", R"({"limit_train": 10})", "job.limit_train",
           "10 training samples cannot fill 50 shards");
    change("typo batchsize", R"({"batchsize": 64})", "job",
           R"(unknown field "batchsize" (did you mean "batch_size"?))");
    change("capitalised key", R"({"Seed": 1})", "job", R"(unknown field "Seed" (did you mean "seed"?))");
    change("unrelated unknown field", R"({"colour": "blue"})", "job",
           R"(unknown field "colour" (known fields: name, dataset, limit_train, model,)");
    change("dataset a string", R"({"dataset": "fashion"})", "job.dataset",
           R"(expected an object, got "fashion")");
    change("model a list", R"({"model": []})", "job.model", "expected an object, got an empty list");

    // dataset
    change("dataset without format", R"({"dataset": {}})", "dataset.format", "required field is missing");
    change("dataset format unknown", R"({"dataset": {"format": "mnist"}})", "dataset.format",
           R"(expected one of "fashion-mnist", "idx", "cifar10", "safetensors", "npz", "csv", "images", got "mnist")");
    change("idx without train_images",
           R"({"dataset": {"format": "idx", "train_labels": "a", "test_images": "b", "test_labels": "c"}})",
           "dataset.train_images", "required field is missing");
    change("idx with an empty path",
           R"({"dataset": {"format": "idx", "train_images": "a", "train_labels": "b", "test_images": "c",
                           "test_labels": ""}})",
           "dataset.test_labels", R"(expected a non-empty string, got "")");
    change("cifar10 without dir", R"({"dataset": {"format": "cifar10"}})", "dataset.dir",
           "required field is missing");
    change("safetensors without test", R"({"dataset": {"format": "safetensors", "train": "a"}})",
           "dataset.test", "required field is missing");
    change("safetensors with a dir",
           R"({"dataset": {"format": "safetensors", "train": "a", "test": "b", "dir": "c"}})", "dataset.dir",
           R"(only used by formats "fashion-mnist", "cifar10" and "images")");
    change("fashion-mnist with train", R"({"dataset": {"format": "fashion-mnist", "train": "a"}})",
           "dataset.train", R"(only used by formats "safetensors", "npz" and "csv")");
    change("cifar10 with idx paths", R"({"dataset": {"format": "cifar10", "dir": "d", "test_images": "a"}})",
           "dataset.test_images", R"(only used by format "idx")");
    change("dir a number", R"({"dataset": {"format": "fashion-mnist", "dir": 42}})", "dataset.dir", "got 42");
    change("dataset typo", R"({"dataset": {"format": "idx", "train_image": "a"}})", "dataset",
           R"(unknown field "train_image" (did you mean "train_images"?))");

    change("images without dir", R"({"dataset": {"format": "images"}})", "dataset.dir", "required field is missing");
    change("images with a test file", R"({"dataset": {"format": "images", "dir": "d", "test": "t"}})", "dataset.test",
           R"(only used by formats "safetensors", "npz" and "csv")");
    change("on_bad_file unknown", R"({"dataset": {"format": "images", "dir": "d", "on_bad_file": "ignore"}})",
           "dataset.on_bad_file", R"(expected one of "skip", "stop", got "ignore")");
    change("on_bad_file for csv",
           R"({"dataset": {"format": "csv", "train": "a", "test": "b", "label": "y", "on_bad_file": "stop"}})",
           "dataset.on_bad_file", R"(only used by format "images")");
    change("images for a flat input",
           R"({"dataset": {"format": "images", "dir": "d"},
               "model": {"arch": "mlp", "input_shape": [784], "num_classes": 10}})",
           "model.input_shape", R"(format "images" decodes every image to [C, H, W] with C 1 (grayscale) or 3 (RGB), got [784])");
    change("images with 4 channels",
           R"({"dataset": {"format": "images", "dir": "d"},
               "model": {"arch": "cnn", "input_shape": [4, 28, 28], "num_classes": 10}})",
           "model.input_shape", "got [4, 28, 28]");
    change("normalize std zero",
           R"({"dataset": {"format": "fashion-mnist", "normalize": {"mean": [0.286], "std": [0]}}})",
           "dataset.normalize.std[0]", "expected a number > 0, got 0");
    change("normalize without mean", R"({"dataset": {"format": "fashion-mnist", "normalize": {"std": [0.35]}}})",
           "dataset.normalize.mean", "required field is missing");

    // model, as one example of a nested model error
    change("model arch unknown",
           R"({"model": {"arch": "transformer", "input_shape": [8], "num_classes": 2}})", "model.arch",
           R"(got "transformer")");

    // optimizer
    change("optimizer without name", R"({"optimizer": {"lr": 0.1}})", "optimizer.name",
           "required field is missing");
    change("optimizer unknown", R"({"optimizer": {"name": "rmsprop", "lr": 0.1}})", "optimizer.name",
           R"(expected one of "sgd", "adam", got "rmsprop")");
    change("optimizer without lr", R"({"optimizer": {"name": "adam"}})", "optimizer.lr",
           "required field is missing");
    change("lr a word", R"({"optimizer": {"name": "adam", "lr": "fast"}})", "optimizer.lr",
           R"(expected a number > 0 and <= 10, got "fast")");
    change("lr zero", R"({"optimizer": {"name": "sgd", "lr": 0}})", "optimizer.lr", "got 0");
    change("lr above 10", R"({"optimizer": {"name": "sgd", "lr": 10.5}})", "optimizer.lr", "got 10.5");
    change("momentum 1", R"({"optimizer": {"name": "sgd", "lr": 0.1, "momentum": 1}})", "optimizer.momentum",
           "expected a number >= 0 and < 1, got 1");
    change("nesterov without momentum", R"({"optimizer": {"name": "sgd", "lr": 0.1, "nesterov": true}})",
           "optimizer.nesterov", "needs momentum > 0");
    change("nesterov a string",
           R"({"optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": "yes"}})",
           "optimizer.nesterov", R"(expected true or false, got "yes")");
    change("momentum on adam", R"({"optimizer": {"name": "adam", "lr": 0.1, "momentum": 0.9}})",
           "optimizer.momentum", R"(only used by optimizer "sgd")");
    change("beta1 on sgd", R"({"optimizer": {"name": "sgd", "lr": 0.1, "beta1": 0.9}})", "optimizer.beta1",
           R"(only used by optimizer "adam")");
    change("negative weight_decay", R"({"optimizer": {"name": "adam", "lr": 0.1, "weight_decay": -0.1}})",
           "optimizer.weight_decay", "expected a number >= 0, got -0.1");
    change("beta2 1", R"({"optimizer": {"name": "adam", "lr": 0.1, "beta2": 1}})", "optimizer.beta2",
           "expected a number >= 0 and < 1, got 1");
    change("eps zero", R"({"optimizer": {"name": "adam", "lr": 0.1, "eps": 0}})", "optimizer.eps",
           "expected a number > 0, got 0");
    change("optimizer typo", R"({"optimizer": {"name": "adam", "lr": 0.1, "weightdecay": 0.1}})", "optimizer",
           R"(unknown field "weightdecay" (did you mean "weight_decay"?))");

    // aggregation
    change("aggregation without rule", R"({"aggregation": {"alpha": 0.5}})", "aggregation.rule",
           "required field is missing");
    change("aggregation rule unknown", R"({"aggregation": {"rule": "fedavg"}})", "aggregation.rule",
           R"(expected one of "vc-asgd", "fedasync", "fedbuff", "delayed-nesterov", "adaptive-nesterov", got "fedavg")");
    change("alpha 1", R"({"aggregation": {"rule": "vc-asgd", "alpha": 1}})", "aggregation.alpha",
           R"(expected "epoch" or a number > 0 and < 1, got 1)");
    change("alpha 0", R"({"aggregation": {"rule": "vc-asgd", "alpha": 0}})", "aggregation.alpha", "got 0");
    change("alpha Epoch", R"({"aggregation": {"rule": "vc-asgd", "alpha": "Epoch"}})", "aggregation.alpha",
           R"(got "Epoch")");
    change("aggregation a string", R"({"aggregation": "vc-asgd"})", "job.aggregation",
           R"(expected an object, got "vc-asgd")");
    change("aggregation unknown field", R"({"aggregation": {"rule": "vc-asgd", "beta": 0.5}})", "aggregation",
           R"(unknown field "beta")");
    change("staleness on vc-asgd", R"({"aggregation": {"rule": "vc-asgd", "staleness": {"function": "hinge"}}})",
           "aggregation.staleness", "not used by the vc-asgd rule (only by fedasync, fedbuff and the nesterov rules)");
    change("buffer on fedasync", R"({"aggregation": {"rule": "fedasync", "buffer": 4}})", "aggregation.buffer",
           "not used by the fedasync rule (only by fedbuff and delayed-nesterov)");
    change("momentum on fedbuff", R"({"aggregation": {"rule": "fedbuff", "momentum": 0.9}})", "aggregation.momentum",
           "not used by the fedbuff rule (only by the nesterov rules)");
    change("alpha on fedbuff", R"({"aggregation": {"rule": "fedbuff", "alpha": 0.5}})", "aggregation.alpha",
           "not used by the fedbuff rule (only by vc-asgd and fedasync)");
    change("buffer on adaptive-nesterov", R"({"aggregation": {"rule": "adaptive-nesterov", "buffer": 4}})",
           "aggregation.buffer", "not used by the adaptive-nesterov rule (only by fedbuff and delayed-nesterov)");
    change("buffer 0", R"({"aggregation": {"rule": "fedbuff", "buffer": 0}})", "aggregation.buffer", "got 0");
    change("server_lr 0", R"({"aggregation": {"rule": "delayed-nesterov", "server_lr": 0}})", "aggregation.server_lr",
           "got 0");
    change("momentum 1", R"({"aggregation": {"rule": "delayed-nesterov", "momentum": 1}})", "aggregation.momentum",
           "got 1");
    change("fedasync alpha epoch", R"({"aggregation": {"rule": "fedasync", "alpha": "epoch"}})", "aggregation.alpha",
           R"(expected a number > 0 and <= 1, got "epoch")");
    change("fedasync alpha 0", R"({"aggregation": {"rule": "fedasync", "alpha": 0}})", "aggregation.alpha", "got 0");
    change("staleness function unknown",
           R"({"aggregation": {"rule": "fedasync", "staleness": {"function": "exponential"}}})",
           "aggregation.staleness.function", R"(expected one of "constant", "polynomial", "hinge")");
    change("polynomial with b", R"({"aggregation": {"rule": "fedasync", "staleness": {"function": "polynomial", "b": 2}}})",
           "aggregation.staleness.b", "only the hinge function");
    change("polynomial exponent 0",
           R"({"aggregation": {"rule": "fedasync", "staleness": {"function": "polynomial", "a": 0}}})",
           "aggregation.staleness.a", "got 0");
    change("constant with a", R"({"aggregation": {"rule": "fedasync", "staleness": {"function": "constant", "a": 1}}})",
           "aggregation.staleness.a", "takes no parameters");
    change("upload encoding unknown", R"({"upload": {"encoding": "int4"}})", "upload.encoding",
           R"(expected one of "fp32", "fp16", "int8", "topk")");
    change("upload without encoding", R"({"upload": {"zstd": true}})", "upload.encoding", "required field is missing");
    change("density for int8", R"({"upload": {"encoding": "int8", "density": 0.1}})", "upload.density",
           "only used by the topk encoding");
    change("density zero", R"({"upload": {"encoding": "topk", "density": 0}})", "upload.density", "got 0");
    change("density above one", R"({"upload": {"encoding": "topk", "density": 1.5}})", "upload.density", "got 1.5");
    change("zstd for fp32", R"({"upload": {"encoding": "fp32", "zstd": true}})", "upload.zstd",
           "only used by the update encodings");
    change("sparse download with vc-asgd", R"({"download": {"density": 0.1}})", "job.download",
           "needs a rule that folds pseudo-gradients");
    change("download density zero", R"({"aggregation": {"rule": "fedbuff"}, "download": {"density": 0}})",
           "download.density", "got 0");
    change("download without density", R"({"download": {}})", "download.density", "required field is missing");
    change("augment typo", R"({"augment": {"flips": true}})", "augment",
           R"(unknown field "flips" (did you mean "flip"?))");
    change("augment unknown field", R"({"augment": {"flip": true, "rotate": 15}})", "augment",
           R"(unknown field "rotate")");
    change("augment crop_padding negative", R"({"augment": {"crop_padding": -1}})", "augment.crop_padding",
           "expected an integer from 0 to 2048, got -1");
    change("augment crop_padding fraction", R"({"augment": {"crop_padding": 2.5}})", "augment.crop_padding",
           "got 2.5");
    change("augment crop_padding over half the image", R"({"augment": {"crop_padding": 15}})",
           "augment.crop_padding",
           "15 is more than half the image (input_shape [1, 28, 28] allows at most 14)");
    change("augment flip a string", R"({"augment": {"flip": "yes"}})", "augment.flip",
           R"(expected true or false, got "yes")");
    change("augment a bool", R"({"augment": true})", "job.augment", "expected an object, got true");
    change(
        "augment for flat samples",
        R"({"model": {"arch": "mlp", "input_shape": [784], "num_classes": 10}, "augment": {"flip": true}})",
        "augment", "augmentation is for images, a model input_shape [C, H, W]; this model's is [784]");
    change("schedule on vc-asgd", R"({"aggregation": {"rule": "vc-asgd", "schedule": {"warmup_epochs": 1}}})",
           "aggregation.schedule", "not used by the vc-asgd rule");
    change("adascale on fedbuff", R"({"aggregation": {"rule": "fedbuff", "adascale": true}})",
           "aggregation.adascale", "only by adaptive-nesterov");
    change("ema_decay of 1", R"({"aggregation": {"rule": "fedbuff", "ema_decay": 1}})",
           "aggregation.ema_decay", "got 1");
    change("ema_decay below 0", R"({"aggregation": {"rule": "vc-asgd", "ema_decay": -0.1}})",
           "aggregation.ema_decay", "got -0.1");
    change("schedule: warmup_from alone",
           R"({"optimizer": {"name": "adam", "lr": 0.1, "schedule": {"warmup_from": 0.5}}})",
           "optimizer.schedule.warmup_from", "needs \"warmup_epochs\" > 0");
    change("schedule: unknown decay",
           R"({"optimizer": {"name": "adam", "lr": 0.1, "schedule": {"decay": "linear"}}})",
           "optimizer.schedule.decay", "linear");
    change(
        "schedule: milestones of cosine",
        R"({"optimizer": {"name": "adam", "lr": 0.1, "schedule": {"decay": "cosine", "milestones": [2]}}})",
        "optimizer.schedule.milestones", "only used by decay \"steps\"");
    change(
        "schedule: milestones not increasing",
        R"({"optimizer": {"name": "adam", "lr": 0.1, "schedule": {"decay": "steps", "milestones": [4, 2]}}})",
        "optimizer.schedule.milestones[1]", "must increase");
    change("schedule: final 0",
           R"({"optimizer": {"name": "adam", "lr": 0.1, "schedule": {"decay": "cosine", "final": 0}}})",
           "optimizer.schedule.final", "got 0");
    change(
        "schedule: warm-up past max_epochs",
        R"({"max_epochs": 2, "optimizer": {"name": "adam", "lr": 0.1, "schedule": {"warmup_epochs": 3, "decay": "cosine"}}})",
        "optimizer.schedule.warmup_epochs", "must end before the job's max_epochs (2)");
    change("priority 0", R"({"priority": 0})", "job.priority", "got 0");
    change("max_agents negative", R"({"max_agents": -1})", "job.max_agents", "got -1");
    change("hinge start negative",
           R"({"aggregation": {"rule": "fedasync", "staleness": {"function": "hinge", "b": -1}}})",
           "aggregation.staleness.b", "got -1");
}

void TestJobSpec::invalidJobs()
{
    QFETCH(QByteArray, patch);
    QFETCH(QString, remove);
    QFETCH(QString, path);
    QFETCH(QString, message);
    const Result<JobSpec> spec = JobSpec::fromJson(patchedJob(patch, remove));
    QVERIFY(!spec.ok());
    QVERIFY2(spec.error().startsWith(path + u": "_s), qPrintable(u"wrong field in: "_s + spec.error()));
    QVERIFY2(spec.error().contains(message), qPrintable(u"unexpected message: "_s + spec.error()));
}

void TestJobSpec::roundTrip_data()
{
    validJobs_data();
}

void TestJobSpec::roundTrip()
{
    QFETCH(JobSpec, expected);
    const Result<JobSpec> again = JobSpec::fromJson(expected.toJson());
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(*again, expected);

    // Through text as well: the coordinator stores the job as text and must read back the same numbers.
    const Result<JobSpec> fromText = JobSpec::fromJsonText(QJsonDocument(expected.toJson()).toJson());
    QVERIFY2(fromText.ok(), qPrintable(fromText.error()));
    QCOMPARE(*fromText, expected);
}

void TestJobSpec::defaultSpecRoundTrips()
{
    // The struct's defaults are themselves a valid job once it has a name.
    JobSpec spec;
    spec.name = u"defaults"_s;
    const Result<JobSpec> again = JobSpec::fromJson(spec.toJson());
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(*again, spec);
    QCOMPARE(again->dataset.dir, DatasetSpec::defaultFashionMnistDir());
}

void TestJobSpec::textErrors_data()
{
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("message");
    QTest::newRow("truncated") << R"({"name": "t", "shards": )"_ba << u"job spec is not valid JSON: "_s;
    QTest::newRow("empty") << QByteArray() << u"job spec is not valid JSON: "_s;
    QTest::newRow("list") << "[1, 2]"_ba << u"job spec must be a JSON object"_s;
    QTest::newRow("valid JSON, invalid job")
        << R"({"name": "t"})"_ba << u"job.dataset: required field is missing"_s;
}

void TestJobSpec::textErrors()
{
    QFETCH(QByteArray, text);
    QFETCH(QString, message);
    const Result<JobSpec> spec = JobSpec::fromJsonText(text);
    QVERIFY(!spec.ok());
    QVERIFY2(spec.error().startsWith(message), qPrintable(spec.error()));
    if (message.contains(u"not valid JSON"))
        QVERIFY2(spec.error().contains(u" at offset "), qPrintable(spec.error()));
}

void TestJobSpec::sampleJobsParse_data()
{
    QTest::addColumn<QString>("file");
    const QDir jobs(test::sourceDir() + u"/resources/jobs"_s);
    const QStringList files = jobs.entryList({u"*.json"_s}, QDir::Files);
    QVERIFY2(!files.isEmpty(), qPrintable(jobs.path()));
    for (const QString& name : files)
        QTest::newRow(qPrintable(name)) << jobs.filePath(name);
}

void TestJobSpec::sampleJobsParse()
{
    // Every job shipped as an example must be one the coordinator accepts.
    QFETCH(QString, file);
    QFile json(file);
    QVERIFY2(json.open(QIODevice::ReadOnly), qPrintable(file));
    const Result<JobSpec> spec = JobSpec::fromJsonText(json.readAll());
    QVERIFY2(spec.ok(), qPrintable(file + u": "_s + spec.error()));
}

void TestJobSpec::demoJobIsTheDocumentedOne()
{
    QFile json(test::sourceDir() + u"/resources/jobs/fashion-mnist-cnn.json"_s);
    QVERIFY(json.open(QIODevice::ReadOnly));
    const Result<JobSpec> spec = JobSpec::fromJsonText(json.readAll());
    QVERIFY2(spec.ok(), qPrintable(spec.error()));

    JobSpec expected;
    expected.name = u"fashion-mnist-cnn"_s;
    expected.dataset.format = DatasetSpec::Format::FashionMnist;
    expected.dataset.dir = DatasetSpec::defaultFashionMnistDir();
    expected.model.arch = Architecture::Cnn;
    expected.model.inputShape = {1, 28, 28};
    expected.model.numClasses = 10;
    expected.shards = 50;
    expected.localEpochs = 1;
    expected.batchSize = 32;
    expected.optimizer.kind = OptimizerSpec::Kind::Adam;
    expected.optimizer.lr = 0.001;
    expected.aggregation.rule = AggregationSpec::Rule::AdaptiveNesterov;
    expected.aggregation.alphaPerEpoch = false;
    expected.aggregation.serverLr = 0.5;
    expected.aggregation.momentum = 0.7;
    expected.aggregation.staleness.function = StalenessSpec::Function::Constant; // outer momentum: no damping
    expected.aggregation.emaDecay = 0.9;
    expected.targetAccuracy = 0.88;
    expected.maxEpochs = 30;
    expected.deadlineSeconds = 600;
    expected.replication = 1;
    expected.seed = 42;
    QCOMPARE(*spec, expected);
}

void TestJobSpec::jsonFieldHelpers()
{
    // Integers must be exact: 3.0 and 1e3 are, 3.5 and numbers beyond qint64 are not.
    QCOMPARE(exactInteger(QJsonValue(3.0)), std::optional<qint64>(3));
    QCOMPARE(exactInteger(QJsonValue(1e3)), std::optional<qint64>(1000));
    QCOMPARE(exactInteger(QJsonValue(qint64(-7))), std::optional<qint64>(-7));
    QVERIFY(!exactInteger(QJsonValue(3.5)).has_value());
    QVERIFY(!exactInteger(QJsonValue(1e19)).has_value());
    QVERIFY(!exactInteger(QJsonValue(u"3"_s)).has_value());

    QCOMPARE(editDistance(u"nestreov", u"nesterov"), 1);
    QCOMPARE(editDistance(u"batchsize", u"batch_size"), 1);
    QCOMPARE(editDistance(u"LR", u"lr"), 0);
    QCOMPARE(editDistance(u"", u"abc"), 3);
    QCOMPARE(closestMatch(u"batchsize", {u"shards"_s, u"batch_size"_s}), u"batch_size"_s);
    QCOMPARE(closestMatch(u"xyz", {u"lr"_s, u"eps"_s}), QString());

    QCOMPARE(describeJsonValue(QJsonValue(0.1)), u"0.1"_s);
    QCOMPARE(describeJsonValue(QJsonValue(u"a\"b"_s)), uR"("a\"b")"_s);
    QVERIFY(describeJsonValue(QJsonValue(QString(50, u'a'))).endsWith(u"(50 characters)"));
    QCOMPARE(describeJsonValue(QJsonValue(QJsonValue::Null)), u"null"_s);
    QCOMPARE(describeJsonValue(QJsonObject()), u"an object"_s);

    QCOMPARE(NumberRange::above(0).atMost(10).describe(), u"a number > 0 and <= 10"_s);
    QVERIFY(!NumberRange::atLeast(0).contains(std::numeric_limits<double>::quiet_NaN()));
    QVERIFY(!NumberRange::atLeast(0).contains(std::numeric_limits<double>::infinity()));

    // Lists of numbers: the count, then each element by its index.
    const QJsonObject lists = test::jsonObject(R"({"ok": [1, 0.5, -2], "long": [1, 2, 3], "bad": [1, "x"]})");
    JsonFields fields(lists, u"spec"_s);
    QList<double> values;
    QVERIFY(fields.readNumberList(u"ok", values, NumberRange{}, Need::Required, 1, 3));
    QCOMPARE(values, (QList<double>{1, 0.5, -2}));
    QVERIFY(!fields.readNumberList(u"long", values, NumberRange::above(0), Need::Required, 1, 2));
    QCOMPARE(fields.failure().message, u"spec.long: expected a list of 1 to 2 numbers > 0, got a list of 3 items"_s);
    JsonFields element(lists, u"spec"_s);
    QVERIFY(!element.readNumberList(u"bad", values, NumberRange{}));
    QCOMPARE(element.failure().message, uR"(spec.bad[1]: expected a number, got "x")"_s);
    QCOMPARE(values, (QList<double>{1, 0.5, -2})); // a failed read leaves the list alone
}

QTEST_GUILESS_MAIN(TestJobSpec)
void TestJobSpec::scheduleFactorsAtHandComputedPoints()
{
    LrSchedule none;
    QCOMPARE(none.factor(3.0), 1.0);

    // Warm-up from 0.2 over 2 epochs, cosine to 0.1 at epoch 10.
    LrSchedule cosine;
    cosine.given = true;
    cosine.warmupEpochs = 2;
    cosine.warmupFrom = 0.2;
    cosine.decay = LrSchedule::Decay::Cosine;
    cosine.epochs = 10;
    cosine.final = 0.1;
    const auto near = [](double a, double b) { return std::abs(a - b) < 1e-12; };
    QVERIFY(near(cosine.factor(0), 0.2));
    QVERIFY(near(cosine.factor(1), 0.6));             // halfway up
    QVERIFY(near(cosine.factor(2), 1.0));             // the decay starts at its top
    QVERIFY(near(cosine.factor(6), 0.1 + 0.9 * 0.5)); // halfway down: cos(pi / 2) = 0
    QVERIFY(near(cosine.factor(4), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
    QVERIFY(near(cosine.factor(10), 0.1));
    QVERIFY(near(cosine.factor(50), 0.1));
    QVERIFY(near(cosine.factor(-1), 0.2)); // before any progress: the start

    LrSchedule steps;
    steps.given = true;
    steps.decay = LrSchedule::Decay::Steps;
    steps.milestones = {5, 8};
    steps.gamma = 0.1;
    QVERIFY(near(steps.factor(4.99), 1.0));
    QVERIFY(near(steps.factor(5), 0.1));
    QVERIFY(near(steps.factor(9), 0.01));

    // A job's optimizer at a version: progress is version / shards.
    JobSpec spec = minimalSpec(); // 50 shards, adam 0.001
    spec.optimizer.schedule = cosine;
    QVERIFY(near(spec.optimizerAt(50).lr, 0.001 * 0.6)); // one epoch in
    QVERIFY(!spec.optimizerAt(50).schedule.given);       // a manifest names its rate, not the schedule
    QVERIFY(!spec.optimizerAt(50).toJson().contains(u"schedule"_s));
}

#include "TestJobSpec.moc"
