#pragma once
// JobSpec: what an admin submits to the coordinator. Every field is checked at submit time and an invalid
// spec is refused with the field and the reason, so nothing half-valid reaches the scheduler.
//
// {
//   "name": "fashion-cnn",
//   "dataset": {"format": "fashion-mnist"},          // or "idx", "cifar10", "safetensors", "npz", "csv", ...
//   "limit_train": 2000,                             // optional: use the first N training samples
//   "model": {"arch": "cnn", "input_shape": [1, 28, 28], "num_classes": 10},
//   "shards": 50, "local_epochs": 1, "batch_size": 32,
//   "optimizer": {"name": "adam", "lr": 0.001},
//   "aggregation": {"rule": "vc-asgd", "alpha": "epoch"},   // or a constant "alpha": 0.95
//   "target_accuracy": 0.88, "max_epochs": 20, "deadline_seconds": 600, "replication": 1, "seed": 42,
//   "overlap_epochs": true,                          // optional; false waits for each epoch's validation
//   "speed_aware": false,                            // optional; true sizes subtasks to each agent's speed
//   "upload": {"encoding": "topk", "density": 0.01}, // optional; how agents send results, see UploadSpec
//   "download": {"density": 0.05},                   // optional; how publications change, see DownloadSpec
//   "augment": {"crop_padding": 4, "flip": true},    // optional; image models only, see AugmentSpec
//   "max_agents": 8,                                 // optional; at most this many agents train it at once
//   "cap_at_width": true,                            // optional; false: no cap at the measured useful width
//   "priority": 1                                    // optional; its weight when jobs share agents
// }
//
// Required: name, dataset, model, optimizer, shards, target_accuracy (they describe the job itself; a default
// would be a guess). Every other field defaults to the value below. Unknown fields are errors, so a typo such
// as "batchsize" is reported (`job: unknown field "batchsize" (did you mean "batch_size"?)`), never ignored.
// Errors name the field: `job.shards: ...` for the job's own fields, `dataset.`, `model.`, `optimizer.` and
// `aggregation.` (and `upload.`, `download.`, `augment.`) for the nested objects.
// resources/jobs/fashion-mnist-cnn.json is the demo job.

#include "Result.h"
#include "spec/AugmentSpec.h"
#include "spec/DownloadSpec.h"
#include "spec/ModelSpec.h"
#include "spec/OptimizerSpec.h"
#include "spec/UploadSpec.h"

#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>

namespace gleaner {

struct DatasetSpec
{
    enum class Format
    {
        FashionMnist, // {"format": "fashion-mnist", "dir"?: default /usr/share/datasets/fashion-mnist}
        Idx,          // {"format": "idx", "train_images", "train_labels", "test_images", "test_labels"}
        Cifar10,      // {"format": "cifar10", "dir": folder with data_batch_1..5.bin and test_batch.bin}
        SafeTensors,  // {"format": "safetensors", "train": file, "test": file}, each with tensors "x" and "y"
        Npz,          // {"format": "npz", "train": file, "test": file}, each with arrays "x" and "y", or
                      // {"format": "npz", "file": F} with x_train, y_train, x_test, y_test (Keras's layout)
        Csv,          // {"format": "csv", "train": file, "test": file, "label": column}: numeric features
        Images,       // {"format": "images", "dir": root}: root/<class>/*.png|jpg|..., or root/train/<class>/...
                      // and root/test/<class>/...; decoded and resized to the model's input_shape [C, H, W]
    };

    // "format" is required; the paths of the chosen format are required except fashion-mnist's "dir". Paths
    // must be non-empty; whether they exist is checked by the coordinator at import. Fields another format
    // uses are refused; in the struct they keep their defaults, so fromJson(toJson(x)) == x.
    Format format = Format::FashionMnist;
    QString dir = defaultFashionMnistDir(); // fashion-mnist, cifar10, images
    QString trainImages;                    // idx
    QString trainLabels;                    // idx
    QString testImages;                     // idx
    QString testLabels;                     // idx
    QString train;                          // safetensors, npz, csv
    QString test;                           // safetensors, npz, csv
    QString label;                          // csv: the label column's name
    // safetensors, npz (train/test), csv, images (without a test/ folder): instead of "test", hold out this
    // fraction of the training file, (0, 0.5], chosen by a permutation seeded with split_seed (the same file and
    // seed, the same split).
    double testFraction = 0;
    qint64 splitSeed = 1;
    QString file;                           // npz
    // images, "on_bad_file": "skip" (the default) leaves out a file Qt cannot decode, logging it by name;
    // "stop" fails the import at the first one.
    bool stopOnBadFile = false;
    // Any format, "normalize": {"mean": [...], "std": [...]}: each sample value v of channel c (the first
    // dimension of a sample) becomes (v - mean[c]) / std[c] at import, in train and test alike; U8 pixels are
    // scaled to [0, 1] first, as training would. Each list holds one value per channel or one for all; empty
    // when not given.
    QList<double> normalizeMean;
    QList<double> normalizeStd;

    static QString defaultFashionMnistDir() { return QStringLiteral("/usr/share/datasets/fashion-mnist"); }
    static Result<DatasetSpec> fromJson(const QJsonObject& json,
                                        const QString& path = QStringLiteral("dataset"));
    QJsonObject toJson() const;

    bool operator==(const DatasetSpec&) const = default;
};

// How an update's staleness (server versions folded in since its base version) damps its weight (FedAsync).
struct StalenessSpec
{
    enum class Function
    {
        Constant,   // s(t) = 1
        Polynomial, // s(t) = (t + 1)^-a
        Hinge       // s(t) = 1 for t <= b, else 1 / (a (t - b) + 1)
    };

    Function function = Function::Polynomial;
    double a = 0.5;
    int b = 4;

    double weight(qint64 staleness) const; // s(t), in (0, 1]
    static Result<StalenessSpec> fromJson(const QJsonObject& json, const QString& path);
    QJsonObject toJson() const;

    bool operator==(const StalenessSpec&) const = default;
};

struct AggregationSpec
{
    // The object is optional in a job (default: vc-asgd, alpha "epoch"); when given, "rule" is required.
    //   vc-asgd:  "alpha" is "epoch" (a_e = e / (e + 1), the default) or a constant in (0, 1): the
    //             share of the server copy kept, server = a server + (1 - a) client.
    //   fedasync: "alpha" is the mixing weight in (0, 1] (default 0.5), damped by "staleness" (default
    //             polynomial, a 0.5): server = (1 - a s(t)) server + a s(t) client.
    //   fedbuff:  "buffer" K updates (default 4), each damped by "staleness" (default polynomial, a
    //             0.5), then server += "server_lr" (default 1) times their mean change.
    //   delayed-nesterov: outer Nesterov momentum over the same pseudo-gradients, "buffer" K (default 4),
    //             "server_lr" (default 1), "momentum" (default 0.5), "staleness" (default constant).
    //   adaptive-nesterov: delayed Nesterov whose K is the number of agents training the job at the time
    //             (no "buffer"); "server_lr", "momentum", "staleness" as delayed-nesterov; "adascale" true
    //             scales its step by the gain the measured noise scale gives a round of K (AdaScale).
    // The rules with "server_lr" take a "schedule" for it (LrSchedule: warm-up, cosine or steps by the job's
    // progress). Fields another rule uses are refused.
    // Every rule takes "ema_decay" d in [0, 1) (default 0: off): the coordinator also keeps an exponential
    // moving average of the server weights, each folded update moving it by 1 - d toward them; validation and
    // the exported model use the average, agents train from the server weights themselves (AveragedRule).
    enum class Rule
    {
        VcAsgd,
        FedAsync,
        FedBuff,
        DelayedNesterov,
        AdaptiveNesterov,
    };

    Rule rule = Rule::VcAsgd;
    bool alphaPerEpoch = true; // "alpha": "epoch" gives a_e = e / (e + 1) (vc-asgd only)
    double alpha = 0.95;       // constant alpha when alphaPerEpoch is false
    StalenessSpec staleness;   // fedasync, fedbuff, delayed-nesterov
    int buffer = 4;            // fedbuff, delayed-nesterov: 1..4096
    double serverLr = 1.0;     // fedbuff, delayed-nesterov: (0, 10]
    double momentum = 0.5;     // delayed-nesterov: [0, 1)
    LrSchedule schedule;       // fedbuff, the nesterov rules: server_lr times its factor
    bool adaScale = false;     // adaptive-nesterov: the step times the round's gain (AdaptiveNesterov)
    double emaDecay = 0;       // every rule: [0, 1); 0 keeps no average

    bool usesPseudoGradients() const
    {
        return rule == Rule::FedBuff || rule == Rule::DelayedNesterov || rule == Rule::AdaptiveNesterov;
    }
    bool usesMomentum() const { return rule == Rule::DelayedNesterov || rule == Rule::AdaptiveNesterov; }
    static Result<AggregationSpec> fromJson(const QJsonObject& json,
                                            const QString& path = QStringLiteral("aggregation"));
    QJsonObject toJson() const;

    bool operator==(const AggregationSpec&) const = default;
};

struct JobSpec
{
    QString name; // 1..100 characters
    DatasetSpec dataset;
    std::optional<qint64> limitTrain; // 1..2^53 when present, and >= shards
    ModelSpec model;
    int shards = 10;     // 1..100000
    int localEpochs = 1; // 1..1000
    int batchSize = 32;  // 1..65536
    OptimizerSpec optimizer;
    AggregationSpec aggregation;
    double targetAccuracy = 0.9; // (0, 1]
    int maxEpochs = 20;          // 1..100000
    int deadlineSeconds = 600;   // 10..604800
    bool overlapEpochs = true;   // the next epoch's workunits may be leased while this epoch's last are out
    // Subtasks sized to each agent's measured speed (in mini-batches: a fast agent trains more of its shard's
    // passes, a slow one part of a pass), so agents report at a similar cadence and slow ones are not stale.
    bool speedAware = false;
    UploadSpec upload;           // default: full fp32 weights
    DownloadSpec download;       // default: every publication changes every value
    int replication = 1;         // 1..16
    quint64 seed = 42;           // 0..2^53, the largest integer a JSON number holds exactly
    // A safetensors file the training starts from (fine-tuning, transfer learning) instead of seeded random
    // weights; the coordinator checks it against the model's names, shapes and types at import.
    QString initialWeights;
    // Random crops and flips of each training mini-batch on the agents (image models only: checked against
    // model.input_shape at submit). Default: off.
    AugmentSpec augment;
    // At most this many agents hold its leases at once (0: no cap of the admin's). The coordinator also caps
    // a job at the width it measures (JobWidth), and gives agents beyond it other jobs' work.
    int maxAgents = 0; // 0..100000
    // Cap it also at the useful agents the coordinator measures (the rules that average pseudo-gradients).
    bool capAtWidth = true;
    // The job's weight when running jobs share agents (JobAllocation): a job of priority 2 is worth twice the
    // progress of one of priority 1.
    double priority = 1.0; // (0, 1000]

    // The job's progress at server version `version`, in epochs of folded updates (LrSchedule).
    double progressAt(qint64 version) const { return shards > 0 ? double(version) / shards : 0.0; }
    // The optimizer a lease from the weights of `version` trains with (its schedule applied).
    OptimizerSpec optimizerAt(qint64 version) const { return optimizer.at(progressAt(version)); }

    static Result<JobSpec> fromJson(const QJsonObject& json);
    // Parses JSON text, naming the offset of a syntax error ("job spec is not valid JSON: ... at offset 17").
    static Result<JobSpec> fromJsonText(const QByteArray& text);
    QJsonObject toJson() const;

    bool operator==(const JobSpec&) const = default;
};

} // namespace gleaner
