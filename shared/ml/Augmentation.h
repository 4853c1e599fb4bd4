#pragma once
// Random crops and flips of training mini-batches (AugmentSpec), as Run::execute applies them to every
// mini-batch it gathers; validation and evaluation never augment.
//
// What happens to a sample is drawn without torch's generators, from a counter-based hash of (the request's
// seed, the local epoch, the mini-batch, the sample's place in it): the same on every machine, device and
// libtorch version, and independent of anything else the process drew. A run resumed from a checkpoint at
// (epoch, mini-batch) therefore augments the rest exactly as an uninterrupted run does, and nothing about
// augmentation needs storing in the checkpoint. Changing the draw changes every augmented job's results: a
// test pins it.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "spec/AugmentSpec.h"

#include <QList>
#include <QString>

#include <vector>

namespace gleaner::ml {

class Augmentation
{
public:
    // One sample's augmentation: the window cut from the image padded by crop_padding on every side starts at
    // row `top`, column `left` (each 0..2 x crop_padding; crop_padding, crop_padding is the image itself),
    // and the window is mirrored along W when `flip`.
    struct Draw
    {
        bool flip = false;
        int top = 0;
        int left = 0;
        bool operator==(const Draw&) const = default;
    };

    // The draws for the `samples` samples of mini-batch `batch` (0-based) of local epoch `epoch` (0-based).
    static std::vector<Draw> draws(const AugmentSpec& spec, quint64 seed, int epoch, qint64 batch,
                                   qint64 samples);

    // `data` augmented as mini-batch `batch` of local epoch `epoch` of a run seeded `seed`, computed on
    // `device`: the samples ("x") changed, the labels as they were. Each sample is taken as `inputShape`
    // ([C, H, W], checked with AugmentSpec::checkInput; the samples may be stored flat). Padding is zero in
    // the stored type (black for U8 pixels).
    static Result<Dataset> apply(const AugmentSpec& spec, const QList<qint64>& inputShape,
                                 const Dataset& data, quint64 seed, int epoch, qint64 batch,
                                 const QString& device = QStringLiteral("cpu"));
};

} // namespace gleaner::ml
