#pragma once
// ModelSpec: which built-in architecture to build and its sizes, or which TorchScript program to load, as the
// job spec and every task manifest carry it. A zoo model is built from this description alone; a TorchScript
// model is an archive that travels as the subtask's signed "model" file and is checked, operator by operator,
// before it runs (ml/ScriptModel.h).
//
// JSON:
//   {"arch": "mlp",    "input_shape": [1, 28, 28], "num_classes": 10, "hidden": [256, 128]}
//   {"arch": "cnn",    "input_shape": [1, 28, 28], "num_classes": 10, "channels": [32, 64], "hidden": [128]}
//   {"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 29, "width": 32}
//   {"torchscript": "model.pt", "input_shape": [1, 28, 28], "num_classes": 10}    ("arch": "torchscript" optional)
//
// A job spec names the archive by its path on the coordinator; once imported, the coordinator names it by content,
// "sha256:<64 hex digits>", which is what manifests carry and what an agent checks its model file against.
//
// Required: arch, input_shape and num_classes (they must match the dataset; a default would hide a mismatch).
// The sizes default to the values below. input_shape holds 1 to 4 dimensions of 1..4096; cnn and resnet need
// [C, H, W] with C 1..64, cnn H and W divisible by 4 and >= 8 (two 2x2 max-pools), resnet H and W >= 8.
// Fields of another architecture are refused ("model.depth: only used by arch \"resnet\""); in the struct
// they keep their defaults, so fromJson(toJson(x)) == x.

#include "Result.h"

#include <QJsonObject>
#include <QList>

namespace gleaner {

enum class Architecture
{
    Mlp,    // flatten, then fully connected layers with ReLU
    Cnn,    // two 3x3 conv + ReLU + 2x2 max-pool stages, then fully connected layers
    ResNet, // pre-activation ResNet v2 with bottleneck blocks (depth = 9n + 2), three stages
    TorchScript, // a program saved with torch.jit.save: the admin's own model
};

QString architectureName(Architecture arch);

struct ModelSpec
{
    Architecture arch = Architecture::Cnn;
    QList<qint64> inputShape{1, 28, 28}; // one sample: [channels, height, width] (mlp: any shape)
    int numClasses = 10;                 // 2..100000
    QList<int> hidden{128};              // mlp and cnn: hidden fully connected widths, 1..65536; may be empty
    QList<int> channels{32, 64};         // cnn: output channels (1..1024) of the two conv stages
    int depth = 29;                      // resnet: 9n + 2 layers, n >= 1 blocks per stage, at most 1001
    int width = 16;                      // resnet: channels (1..1024) of the first stage's bottleneck
    QString torchscript;                 // torchscript: the archive's path, or "sha256:<hex>" once imported
    // torchscript: where this process finds the archive (the coordinator's blob, an agent's task folder). Not
    // part of the JSON and not compared: the same model may lie in different places. Empty: `torchscript` is
    // the path.
    QString archivePath;

    // Parses and validates; errors name the field: "model.hidden[1]: expected a positive integer <= 65536,
    // got -3". `path` prefixes field names in messages ("model" inside a job spec).
    static Result<ModelSpec> fromJson(const QJsonObject& json, const QString& path = QStringLiteral("model"));
    // Only the fields the architecture uses, so fromJson(toJson()) gives the same spec.
    QJsonObject toJson() const;

    // The archive's content hash when `torchscript` names one ("sha256:<hex>"), else empty.
    QString archiveSha256() const;
    // Where to read the archive from: archivePath, else the path in `torchscript`.
    QString archiveFile() const;

    bool operator==(const ModelSpec& other) const;
};

} // namespace gleaner
