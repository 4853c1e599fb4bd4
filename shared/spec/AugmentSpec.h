#pragma once
// AugmentSpec: the random changes an agent makes to each training mini-batch of an image model (the job's
// "augment" object, carried to agents in the signed manifest's "hyperparameters"):
//
//   {"crop_padding": 4, "flip": true}   pad each image with 4 rows and columns of zeros on every side, then
//                                       cut a window of the original height and width at a random place; and
//                                       mirror half of the images left to right
//
// Both fields are optional: "crop_padding" 0 (the default) crops nothing and "flip" false (the default) flips
// nothing; with both off the job trains on its samples as they are, and nothing about augmentation is written
// into manifests or checkpoints. Only image models take it: the model's input_shape must be [C, H, W] and
// crop_padding at most half the smaller of H and W (checkInput). Validation and evaluation never augment.

#include "Result.h"

#include <QJsonObject>
#include <QList>

namespace gleaner {

struct AugmentSpec
{
    int cropPadding = 0; // 0..2048 (half of the largest dimension a model takes); 0: no random crop
    bool flip = false;   // mirror each sample along W with probability 1/2

    bool enabled() const { return cropPadding > 0 || flip; }

    // Parses and validates on its own; whether it fits the model is checkInput's question. Errors name the
    // field under `path` ("augment.crop_padding: expected an integer from 0 to 2048, got -1").
    static Result<AugmentSpec> fromJson(const QJsonObject& json,
                                        const QString& path = QStringLiteral("augment"));
    // Both fields, defaults included.
    QJsonObject toJson() const;
    // Whether it can augment samples of the model input `inputShape`: always when off; otherwise the shape
    // must be [C, H, W] and crop_padding at most min(H, W) / 2. The error names `path` and the shape.
    Status checkInput(const QList<qint64>& inputShape, const QString& path = QStringLiteral("augment")) const;

    bool operator==(const AugmentSpec&) const = default;
};

} // namespace gleaner
