#include "spec/JobSpec.h"

#include "spec/JsonFields.h"
#include "tensor/TensorBundle.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonParseError>

#include <algorithm>
#include <cmath>

using namespace Qt::StringLiterals;

namespace gleaner {
namespace {

// In the order of DatasetSpec::Format and AggregationSpec::Rule, so readChoice() indexes convert directly.
const QStringList& formatNames()
{
    static const QStringList names{u"fashion-mnist"_s, u"idx"_s, u"cifar10"_s, u"safetensors"_s, u"npz"_s, u"csv"_s,
                                   u"images"_s};
    return names;
}

// In the order of DatasetSpec::stopOnBadFile (false, true).
const QStringList& badFileNames()
{
    static const QStringList names{u"skip"_s, u"stop"_s};
    return names;
}

const QStringList& ruleNames()
{
    static const QStringList names{u"vc-asgd"_s, u"fedasync"_s, u"fedbuff"_s, u"delayed-nesterov"_s,
                                   u"adaptive-nesterov"_s};
    return names;
}

constexpr int kMaxNameLength = 100;
constexpr IntRange kShards{1, 100000};
constexpr IntRange kLocalEpochs{1, 1000};
constexpr IntRange kBatchSize{1, 65536};
constexpr IntRange kMaxEpochs{1, 100000};
// At least 10 s, so a lease outlives the round trip of a slow link; at most a week.
constexpr IntRange kDeadlineSeconds{10, 604800};
constexpr IntRange kReplication{1, 16};
constexpr IntRange kLimitTrain{1, kMaxJsonInteger};
constexpr IntRange kSeed{0, kMaxJsonInteger};
const NumberRange kAlpha = NumberRange::above(0).below(1);
const NumberRange kMixingAlpha = NumberRange::above(0).atMost(1);
const NumberRange kPolynomialExponent = NumberRange::above(0).atMost(10);
const NumberRange kHingeSlope = NumberRange::above(0).atMost(1000);
constexpr IntRange kHingeStart{0, 1'000'000};
constexpr IntRange kBuffer{1, 4096};
const NumberRange kServerLr = NumberRange::above(0).atMost(10);
const NumberRange kMomentum = NumberRange::atLeast(0).below(1);
const NumberRange kEmaDecay = NumberRange::atLeast(0).below(1);

// In the order of StalenessSpec::Function.
const QStringList& stalenessNames()
{
    static const QStringList names{u"constant"_s, u"polynomial"_s, u"hinge"_s};
    return names;
}
const NumberRange kTargetAccuracy = NumberRange::above(0).atMost(1);
// One value per channel, or per feature of a table (CsvReader's column limit).
constexpr qsizetype kMaxNormalizeValues = 100000;

// "normalize": {"mean": [...], "std": [...]}, both required, each one value per channel or one for all; whether
// the count fits the samples' channels is known only once the data is loaded.
void readNormalize(JsonFields& fields, DatasetSpec& spec)
{
    QJsonObject object;
    if (!fields.readObject(u"normalize", object))
        return;
    JsonFields normalize(object, fields.fieldPath(u"normalize"));
    normalize.allowOnly({u"mean"_s, u"std"_s});
    normalize.readNumberList(u"mean", spec.normalizeMean, NumberRange{}, Need::Required, 1, kMaxNormalizeValues);
    normalize.readNumberList(u"std", spec.normalizeStd, NumberRange::above(0), Need::Required, 1,
                             kMaxNormalizeValues);
    const qsizetype means = spec.normalizeMean.size(), stds = spec.normalizeStd.size();
    if (normalize.ok() && means > 1 && stds > 1 && means != stds)
        normalize.fail(u"std", u"holds %1 values where mean holds %2; give one per channel in both, or one for all"_s
                                   .arg(stds)
                                   .arg(means));
    if (!normalize.ok())
        fields.failWith(normalize.failure().message);
}

} // namespace

Result<DatasetSpec> DatasetSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"format"_s, u"dir"_s, u"train_images"_s, u"train_labels"_s, u"test_images"_s,
                      u"test_labels"_s, u"train"_s, u"test"_s, u"file"_s, u"label"_s, u"test_fraction"_s,
                      u"split_seed"_s, u"on_bad_file"_s, u"normalize"_s});

    DatasetSpec spec;
    int format = 0;
    if (!fields.readChoice(u"format", format, formatNames(), Need::Required))
        return fields.failure();
    spec.format = Format(format);

    // A path of another format would be ignored: refuse it, the admin meant something else.
    const bool usesDir =
        spec.format == Format::FashionMnist || spec.format == Format::Cifar10 || spec.format == Format::Images;
    if (!usesDir)
        fields.refuse(u"dir", u"only used by formats \"fashion-mnist\", \"cifar10\" and \"images\""_s);
    if (spec.format != Format::Images)
        fields.refuse(u"on_bad_file", u"only used by format \"images\""_s);
    if (spec.format != Format::Idx) {
        for (const auto key : {u"train_images", u"train_labels", u"test_images", u"test_labels"})
            fields.refuse(key, u"only used by format \"idx\""_s);
    }
    if (spec.format != Format::SafeTensors && spec.format != Format::Npz && spec.format != Format::Csv) {
        for (const auto key : {u"train", u"test"})
            fields.refuse(key, u"only used by formats \"safetensors\", \"npz\" and \"csv\""_s);
    }
    if (spec.format != Format::Csv)
        fields.refuse(u"label", u"only used by format \"csv\""_s);
    // A held-out split instead of a test file.
    const bool holdsOut = fields.has(u"test_fraction");
    if (holdsOut) {
        if (spec.format != Format::SafeTensors && spec.format != Format::Npz && spec.format != Format::Csv &&
            spec.format != Format::Images)
            fields.refuse(u"test_fraction", u"only used by formats \"safetensors\", \"npz\", \"csv\" and \"images\""_s);
        else if (fields.has(u"file"))
            fields.refuse(u"test_fraction", u"not with \"file\", which holds its own test set"_s);
        fields.refuse(u"test", u"goes instead of \"test_fraction\": give one of them"_s);
        fields.readNumber(u"test_fraction", spec.testFraction, NumberRange::above(0).atMost(0.5), Need::Required);
        fields.readInt64(u"split_seed", spec.splitSeed, IntRange{0, kMaxJsonInteger});
    } else {
        fields.refuse(u"split_seed", u"goes with \"test_fraction\""_s);
    }
    const Need testNeed = holdsOut ? Need::Optional : Need::Required;
    if (spec.format != Format::Npz)
        fields.refuse(u"file", u"only used by format \"npz\""_s);

    // Paths are only checked for shape here; whether they exist is the coordinator's question at import.
    switch (spec.format) {
    case Format::FashionMnist:
        fields.readString(u"dir", spec.dir, Need::Optional);
        break;
    case Format::Idx:
        fields.readString(u"train_images", spec.trainImages, Need::Required);
        fields.readString(u"train_labels", spec.trainLabels, Need::Required);
        fields.readString(u"test_images", spec.testImages, Need::Required);
        fields.readString(u"test_labels", spec.testLabels, Need::Required);
        break;
    case Format::Cifar10:
        fields.readString(u"dir", spec.dir, Need::Required);
        break;
    case Format::Images: {
        // A test/ folder beside train/ or test_fraction: which one the folder holds is the loader's question.
        fields.readString(u"dir", spec.dir, Need::Required);
        int onBadFile = 0;
        if (fields.readChoice(u"on_bad_file", onBadFile, badFileNames()))
            spec.stopOnBadFile = onBadFile == 1;
        break;
    }
    case Format::SafeTensors:
    case Format::Npz:
    case Format::Csv:
        if (spec.format == Format::Npz && fields.has(u"file")) {
            fields.refuse(u"train", u"goes with \"test\" instead of \"file\""_s);
            fields.refuse(u"test", u"goes with \"train\" instead of \"file\""_s);
            fields.readString(u"file", spec.file, Need::Required);
        } else {
            fields.readString(u"train", spec.train, Need::Required);
            fields.readString(u"test", spec.test, testNeed);
        }
        if (spec.format == Format::Csv)
            fields.readString(u"label", spec.label, Need::Required);
        break;
    }
    readNormalize(fields, spec);
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject DatasetSpec::toJson() const
{
    QJsonObject json{{u"format"_s, formatNames().at(int(format))}};
    if (testFraction > 0) {
        json.insert(u"test_fraction"_s, testFraction);
        json.insert(u"split_seed"_s, splitSeed);
    }
    if (!normalizeMean.isEmpty() || !normalizeStd.isEmpty()) {
        const auto list = [](const QList<double>& values) {
            QJsonArray array;
            for (const double value : values)
                array.append(value);
            return array;
        };
        json.insert(u"normalize"_s, QJsonObject{{u"mean"_s, list(normalizeMean)}, {u"std"_s, list(normalizeStd)}});
    }
    switch (format) {
    case Format::FashionMnist:
    case Format::Cifar10:
        json.insert(u"dir"_s, dir);
        break;
    case Format::Images:
        json.insert(u"dir"_s, dir);
        json.insert(u"on_bad_file"_s, badFileNames().at(stopOnBadFile ? 1 : 0));
        break;
    case Format::Idx:
        json.insert(u"train_images"_s, trainImages);
        json.insert(u"train_labels"_s, trainLabels);
        json.insert(u"test_images"_s, testImages);
        json.insert(u"test_labels"_s, testLabels);
        break;
    case Format::SafeTensors:
    case Format::Npz:
    case Format::Csv:
        // fromJson sets only the fields of the format (and "test" only when no test_fraction holds it out).
        for (const auto& [key, value] :
             {std::pair{u"train"_s, train}, std::pair{u"test"_s, test}, std::pair{u"file"_s, file}, std::pair{u"label"_s, label}})
            if (!value.isEmpty())
                json.insert(key, value);
        break;
    }
    return json;
}

double StalenessSpec::weight(qint64 staleness) const
{
    const double t = double(std::max<qint64>(0, staleness));
    switch (function) {
    case Function::Constant:
        return 1.0;
    case Function::Polynomial:
        return std::pow(t + 1.0, -a);
    case Function::Hinge:
        return t <= b ? 1.0 : 1.0 / (a * (t - b) + 1.0);
    }
    return 1.0;
}

Result<StalenessSpec> StalenessSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"function"_s, u"a"_s, u"b"_s});
    StalenessSpec spec;
    int function = int(spec.function);
    if (fields.readChoice(u"function", function, stalenessNames(), Need::Required))
        spec.function = Function(function);
    if (fields.ok()) {
        switch (spec.function) {
        case Function::Constant:
            if (fields.has(u"a") || fields.has(u"b"))
                fields.fail(fields.has(u"a") ? u"a" : u"b", u"a constant staleness function takes no parameters"_s);
            break;
        case Function::Polynomial:
            if (fields.has(u"b"))
                fields.fail(u"b", u"only the hinge function takes \"b\""_s);
            fields.readNumber(u"a", spec.a, kPolynomialExponent);
            break;
        case Function::Hinge:
            spec.a = 10.0;
            fields.readNumber(u"a", spec.a, kHingeSlope);
            fields.readInt(u"b", spec.b, kHingeStart);
            break;
        }
    }
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject StalenessSpec::toJson() const
{
    QJsonObject json{{u"function"_s, stalenessNames().at(int(function))}};
    if (function != Function::Constant)
        json.insert(u"a"_s, a);
    if (function == Function::Hinge)
        json.insert(u"b"_s, b);
    return json;
}

Result<AggregationSpec> AggregationSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"rule"_s, u"alpha"_s, u"staleness"_s, u"buffer"_s, u"server_lr"_s, u"momentum"_s,
                      u"schedule"_s, u"adascale"_s, u"ema_decay"_s});

    AggregationSpec spec;
    int rule = 0;
    // Required inside the object: with more rules to come, a default rule would be a silent guess.
    if (fields.readChoice(u"rule", rule, ruleNames(), Need::Required))
        spec.rule = Rule(rule);
    if (!fields.ok())
        return fields.failure();
    const QString ruleName = ruleNames().at(rule);
    const auto onlyFor = [&](QStringView key, bool used, const QString& which) {
        if (!used)
            fields.refuse(key, u"not used by the %1 rule (only by %2)"_s.arg(ruleName, which));
    };
    const bool pseudo = spec.usesPseudoGradients();
    onlyFor(u"staleness", spec.rule != Rule::VcAsgd, u"fedasync, fedbuff and the nesterov rules"_s);
    onlyFor(u"buffer", spec.rule == Rule::FedBuff || spec.rule == Rule::DelayedNesterov,
            u"fedbuff and delayed-nesterov"_s);
    onlyFor(u"server_lr", pseudo, u"fedbuff and the nesterov rules"_s);
    onlyFor(u"schedule", pseudo, u"fedbuff and the nesterov rules, whose server_lr it changes"_s);
    onlyFor(u"adascale", spec.rule == Rule::AdaptiveNesterov, u"adaptive-nesterov"_s);
    onlyFor(u"momentum", spec.usesMomentum(), u"the nesterov rules"_s);
    onlyFor(u"alpha", spec.rule == Rule::VcAsgd || spec.rule == Rule::FedAsync, u"vc-asgd and fedasync"_s);
    if (!fields.ok())
        return fields.failure();

    if (spec.usesMomentum())
        spec.staleness.function = StalenessSpec::Function::Constant;
    if (spec.rule != Rule::VcAsgd) {
        QJsonObject staleness;
        if (fields.readObject(u"staleness", staleness))
            fields.take(StalenessSpec::fromJson(staleness, path + u".staleness"_s), spec.staleness);
    }
    if (pseudo) {
        spec.alphaPerEpoch = false;
        if (spec.rule != Rule::AdaptiveNesterov)
            fields.readInt(u"buffer", spec.buffer, kBuffer);
        fields.readNumber(u"server_lr", spec.serverLr, kServerLr);
        if (spec.usesMomentum())
            fields.readNumber(u"momentum", spec.momentum, kMomentum);
        if (QJsonObject schedule; fields.readObject(u"schedule", schedule))
            fields.take(LrSchedule::fromJson(schedule, path + u".schedule"_s), spec.schedule);
        if (spec.rule == Rule::AdaptiveNesterov)
            fields.readBool(u"adascale", spec.adaScale);
    }
    if (spec.rule == Rule::FedAsync) {
        spec.alphaPerEpoch = false;
        spec.alpha = 0.5;
        fields.readNumber(u"alpha", spec.alpha, kMixingAlpha);
    }
    fields.readNumber(u"ema_decay", spec.emaDecay, kEmaDecay);
    if (spec.rule == Rule::VcAsgd && fields.ok() && fields.has(u"alpha")) {
        const QJsonValue alpha = fields.value(u"alpha");
        if (alpha.isString() && alpha.toString() == u"epoch") {
            spec.alphaPerEpoch = true;
        } else if (alpha.isDouble() && kAlpha.contains(alpha.toDouble())) {
            spec.alphaPerEpoch = false;
            spec.alpha = alpha.toDouble();
        } else {
            fields.fail(u"alpha", u"expected \"epoch\" or %1, got %2"_s.arg(kAlpha.describe(),
                                                                            describeJsonValue(alpha)));
        }
    }
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject AggregationSpec::toJson() const
{
    QJsonObject json{{u"rule"_s, ruleNames().at(int(rule))}};
    if (rule == Rule::VcAsgd || rule == Rule::FedAsync)
        json.insert(u"alpha"_s, alphaPerEpoch ? QJsonValue(u"epoch"_s) : QJsonValue(alpha));
    if (rule != Rule::VcAsgd)
        json.insert(u"staleness"_s, staleness.toJson());
    if (usesPseudoGradients()) {
        if (rule != Rule::AdaptiveNesterov)
            json.insert(u"buffer"_s, buffer);
        json.insert(u"server_lr"_s, serverLr);
    }
    if (usesMomentum())
        json.insert(u"momentum"_s, momentum);
    if (schedule.given)
        json.insert(u"schedule"_s, schedule.toJson());
    if (adaScale)
        json.insert(u"adascale"_s, true);
    if (emaDecay > 0)
        json.insert(u"ema_decay"_s, emaDecay);
    return json;
}

Result<JobSpec> JobSpec::fromJson(const QJsonObject& json)
{
    JsonFields fields(json, u"job"_s);
    fields.allowOnly({u"name"_s,
                      u"dataset"_s,
                      u"limit_train"_s,
                      u"model"_s,
                      u"shards"_s,
                      u"local_epochs"_s,
                      u"batch_size"_s,
                      u"optimizer"_s,
                      u"aggregation"_s,
                      u"target_accuracy"_s,
                      u"max_epochs"_s,
                      u"deadline_seconds"_s,
                      u"replication"_s,
                      u"seed"_s,
                      u"overlap_epochs"_s,
                      u"speed_aware"_s,
                      u"upload"_s,
                      u"download"_s,
                      u"initial_weights"_s,
                      u"augment"_s,
                      u"max_agents"_s,
                      u"cap_at_width"_s,
                      u"priority"_s});

    JobSpec spec;
    fields.readString(u"name", spec.name, Need::Required, kMaxNameLength);
    QJsonObject object;
    if (fields.readObject(u"dataset", object, Need::Required))
        fields.take(DatasetSpec::fromJson(object), spec.dataset);
    qint64 limitTrain = 0;
    if (fields.readInt64(u"limit_train", limitTrain, kLimitTrain))
        spec.limitTrain = limitTrain;
    if (fields.readObject(u"model", object, Need::Required))
        fields.take(ModelSpec::fromJson(object), spec.model);
    fields.readInt(u"shards", spec.shards, kShards, Need::Required);
    fields.readInt(u"local_epochs", spec.localEpochs, kLocalEpochs);
    fields.readInt(u"batch_size", spec.batchSize, kBatchSize);
    if (fields.readObject(u"optimizer", object, Need::Required))
        fields.take(OptimizerSpec::fromJson(object), spec.optimizer);
    if (fields.readObject(u"aggregation", object))
        fields.take(AggregationSpec::fromJson(object), spec.aggregation);
    fields.readNumber(u"target_accuracy", spec.targetAccuracy, kTargetAccuracy, Need::Required);
    fields.readInt(u"max_epochs", spec.maxEpochs, kMaxEpochs);
    fields.readInt(u"deadline_seconds", spec.deadlineSeconds, kDeadlineSeconds);
    fields.readInt(u"replication", spec.replication, kReplication);
    fields.readBool(u"overlap_epochs", spec.overlapEpochs);
    fields.readBool(u"speed_aware", spec.speedAware);
    if (fields.readObject(u"upload", object))
        fields.take(UploadSpec::fromJson(object), spec.upload);
    if (fields.readObject(u"download", object))
        fields.take(DownloadSpec::fromJson(object), spec.download);
    qint64 seed = 0;
    if (fields.readInt64(u"seed", seed, kSeed))
        spec.seed = quint64(seed);
    fields.readString(u"initial_weights", spec.initialWeights);
    if (fields.readObject(u"augment", object))
        fields.take(AugmentSpec::fromJson(object), spec.augment);
    fields.readInt(u"max_agents", spec.maxAgents, IntRange{0, 100000});
    fields.readBool(u"cap_at_width", spec.capAtWidth);
    fields.readNumber(u"priority", spec.priority, NumberRange::above(0).atMost(1000));
    // A cosine decay without "epochs" ends at the job's last epoch.
    for (auto [schedule, key] : {std::pair{&spec.optimizer.schedule, u"optimizer.schedule"_s},
                                 std::pair{&spec.aggregation.schedule, u"aggregation.schedule"_s}}) {
        if (!fields.ok() || !schedule->given || schedule->decay != LrSchedule::Decay::Cosine ||
            schedule->epochs > 0)
            continue;
        schedule->epochs = spec.maxEpochs;
        if (schedule->epochs <= schedule->warmupEpochs)
            fields.failWith(
                u"%1.warmup_epochs: the warm-up (%2 epochs) must end before the job's max_epochs (%3), "
                u"where its cosine decay ends; give \"epochs\""_s.arg(key)
                    .arg(schedule->warmupEpochs)
                    .arg(spec.maxEpochs));
    }

    if (fields.ok() && spec.download.sparse() && !spec.aggregation.usesPseudoGradients())
        fields.fail(u"download", u"a density below 1 needs a rule that folds pseudo-gradients (fedbuff, "
                                 u"delayed-nesterov or adaptive-nesterov); the %1 rule would pull the server copy "
                                 u"back toward the weights agents hold"_s.arg(spec.aggregation.toJson().value(u"rule"_s).toString()));
    // Images are decoded into the model's input, so it must be a shape an image becomes.
    if (fields.ok() && spec.dataset.format == DatasetSpec::Format::Images) {
        const QList<qint64>& shape = spec.model.inputShape;
        if (shape.size() != 3 || (shape[0] != 1 && shape[0] != 3))
            fields.failWith(u"model.input_shape: format \"images\" decodes every image to [C, H, W] with C 1 "
                            u"(grayscale) or 3 (RGB), got %1"_s.arg(shapeToString(shape)));
    }
    if (fields.ok())
        if (auto fits = spec.augment.checkInput(spec.model.inputShape); !fits)
            fields.failWith(fits.error());
    // Every shard needs at least one sample, or the scheduler would hand out empty workunits.
    if (fields.ok() && spec.limitTrain && *spec.limitTrain < spec.shards) {
        const QString problem =
            u"%1 training samples cannot fill %2 shards"_s.arg(*spec.limitTrain).arg(spec.shards);
        fields.fail(u"limit_train", problem + u"; use at least as many samples as shards, or fewer shards"_s);
    }
    if (!fields.ok())
        return fields.failure();
    return spec;
}

Result<JobSpec> JobSpec::fromJsonText(const QByteArray& text)
{
    QJsonParseError error;
    const QJsonDocument document = QJsonDocument::fromJson(text, &error);
    if (error.error != QJsonParseError::NoError)
        return fail(
            u"job spec is not valid JSON: %1 at offset %2"_s.arg(error.errorString()).arg(error.offset));
    if (!document.isObject())
        return fail(u"job spec must be a JSON object"_s);
    return fromJson(document.object());
}

QJsonObject JobSpec::toJson() const
{
    // Every field is written, defaults included, so a stored job says exactly what ran.
    QJsonObject json{
        {u"name"_s, name},
        {u"dataset"_s, dataset.toJson()},
        {u"model"_s, model.toJson()},
        {u"shards"_s, shards},
        {u"local_epochs"_s, localEpochs},
        {u"batch_size"_s, batchSize},
        {u"optimizer"_s, optimizer.toJson()},
        {u"aggregation"_s, aggregation.toJson()},
        {u"target_accuracy"_s, targetAccuracy},
        {u"max_epochs"_s, maxEpochs},
        {u"deadline_seconds"_s, deadlineSeconds},
        {u"replication"_s, replication},
        {u"seed"_s, qint64(seed)},
        {u"overlap_epochs"_s, overlapEpochs},
        {u"speed_aware"_s, speedAware},
        {u"upload"_s, upload.toJson()},
        {u"download"_s, download.toJson()},
    };
    if (limitTrain)
        json.insert(u"limit_train"_s, *limitTrain);
    if (!initialWeights.isEmpty())
        json.insert(u"initial_weights"_s, initialWeights);
    if (augment.enabled()) // absent when off, as in the specs written before it existed
        json.insert(u"augment"_s, augment.toJson());
    if (maxAgents > 0)
        json.insert(u"max_agents"_s, maxAgents);
    if (!capAtWidth)
        json.insert(u"cap_at_width"_s, false);
    if (priority != 1.0)
        json.insert(u"priority"_s, priority);
    return json;
}

} // namespace gleaner
