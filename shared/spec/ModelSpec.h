#pragma once
// ModelSpec: which built-in architecture to build and its sizes, as the job spec and every task manifest
// carry it. No code travels to volunteers: an agent builds the model from this description alone.
//
// JSON:
//   {"arch": "mlp",    "input_shape": [1, 28, 28], "num_classes": 10, "hidden": [256, 128]}
//   {"arch": "cnn",    "input_shape": [1, 28, 28], "num_classes": 10, "channels": [32, 64], "hidden": [128]}
//   {"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10, "depth": 29, "width": 32}

#include "Result.h"

#include <QJsonObject>
#include <QList>

namespace gleaner {

enum class Architecture {
    Mlp,    // flatten, then fully connected layers with ReLU
    Cnn,    // two 3x3 conv + ReLU + 2x2 max-pool stages, then fully connected layers
    ResNet, // pre-activation ResNet v2 with bottleneck blocks (depth = 9n + 2), three stages
};

QString architectureName(Architecture arch);

struct ModelSpec
{
    Architecture arch = Architecture::Cnn;
    QList<qint64> inputShape{1, 28, 28}; // one sample: [channels, height, width] (mlp: any shape)
    int numClasses = 10;
    QList<int> hidden{128};              // mlp and cnn: widths of the hidden fully connected layers
    QList<int> channels{32, 64};         // cnn: output channels of the two conv stages
    int depth = 29;                      // resnet: 9n + 2 layers, n >= 1 bottleneck blocks per stage
    int width = 16;                      // resnet: channels of the first stage's bottleneck

    // Parses and validates; errors name the field ("model.hidden[1]: expected a positive integer, got -3").
    // `path` prefixes field names in messages ("model" inside a job spec).
    static Result<ModelSpec> fromJson(const QJsonObject& json, const QString& path = QStringLiteral("model"));
    // Only the fields the architecture uses, so fromJson(toJson()) gives the same spec.
    QJsonObject toJson() const;

    bool operator==(const ModelSpec&) const = default;
};

} // namespace gleaner
