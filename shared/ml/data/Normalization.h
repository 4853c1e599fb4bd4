#pragma once
// Per-channel normalisation of a dataset's samples at import, the spec's "normalize": {"mean": [...], "std":
// [...]}: each value v of channel c becomes (v - mean[c]) / std[c], so training and validation see the same
// inputs and agents need not know about it. The channel is a sample's first dimension (C of [C, H, W], a
// feature of a table's [F]). U8 pixels are scaled to [0, 1] first, as training would scale them, so mean and
// std are on that scale. The result is F32: four times the bytes of U8 samples.

#include "Result.h"
#include "ml/data/Dataset.h"

#include <QList>

namespace gleaner::ml {

// `mean` and `stddev` hold one value per channel or one for all; every stddev must be > 0. Errors name the
// spec's fields (dataset.normalize.mean) and the samples' shape.
Result<Dataset> normalize(const Dataset& data, const QList<double>& mean, const QList<double>& stddev);

} // namespace gleaner::ml
