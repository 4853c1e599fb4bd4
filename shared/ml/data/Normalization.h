#pragma once
// Per-channel normalisation of a dataset's samples at import, the spec's "normalize": {"mean": [...], "std":
// [...]}: each value v of channel c becomes (v - mean[c]) / std[c], so training and validation see the same
// inputs and agents need not know about it. The channel is a sample's first dimension (C of [C, H, W], a
// feature of a table's [F]). U8 pixels are scaled to [0, 1] first, as training would scale them, so mean and
// std are on that scale. The result is F32: four times the bytes of U8 samples.

#include "Result.h"
#include "ml/data/Dataset.h"

#include <QList>

#include <vector>

namespace gleaner::ml {

// The same arithmetic one sample at a time, for an import that streams its samples.
class Normalizer
{
public:
    // Checks `mean` and `stddev` against the samples' shape, with normalize()'s messages.
    static Result<Normalizer> create(const QList<double>& mean, const QList<double>& stddev,
                                     const QList<qint64>& sampleShape);
    // Values per sample: `out` receives this many floats.
    qint64 values() const { return m_values; }
    // `sample` holds values() values of `type` (U8 or F32).
    void apply(const char* sample, DType type, float* out) const;

private:
    std::vector<double> m_means, m_stds;
    qint64 m_values = 0;
    qint64 m_perChannel = 0;
};

// `mean` and `stddev` hold one value per channel or one for all; every stddev must be > 0. Errors name the
// spec's fields (dataset.normalize.mean) and the samples' shape.
Result<Dataset> normalize(const Dataset& data, const QList<double>& mean, const QList<double>& stddev);

} // namespace gleaner::ml
