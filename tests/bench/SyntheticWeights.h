#pragma once
// Weights for the aggregation benchmarks, shaped like a ResNet's: a few large tensors and many small ones
// (BatchNorm vectors), `params` float values in all, uniform in [-scale, scale], the same for the same seed.

#include "tensor/TensorBundle.h"

#include <algorithm>
#include <random>

namespace gleaner::bench {

inline TensorBundle makeWeights(qint64 params, quint32 seed, float scale = 0.1f)
{
    TensorBundle bundle;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-scale, scale);
    qint64 left = params;
    int index = 0;
    while (left > 0) {
        const qint64 size = std::min(left, index % 3 == 2 ? qint64(64) : std::max<qint64>(params / 40, 1));
        float* data = reinterpret_cast<float*>(
            bundle.addZeroed(QStringLiteral("layer%1.weight").arg(index++), DType::F32, {size}));
        for (qint64 i = 0; i < size; ++i)
            data[i] = value(rng);
        left -= size;
    }
    return bundle;
}

} // namespace gleaner::bench
