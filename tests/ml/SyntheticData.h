#pragma once
// A small, learnable synthetic problem shared by the training and evaluation tests: class k lights up the
// k-th block of an 8x8 image, plus noise.

#include "ml/data/Dataset.h"

#include <random>

namespace gleaner::test {

inline ml::Dataset syntheticSet(qint64 count, quint64 seed, int classes = 4)
{
    std::mt19937 rng(static_cast<quint32>(seed));
    QByteArray pixels(count * 64, '\0');
    std::vector<qint64> labels(static_cast<size_t>(count));
    for (qint64 i = 0; i < count; ++i) {
        const int label = int(rng() % quint32(classes));
        labels[size_t(i)] = label;
        for (int p = 0; p < 64; ++p) {
            const bool lit = (p * classes / 64) == label;
            pixels[i * 64 + p] = char(quint8((lit ? 150 : 0) + rng() % 100));
        }
    }
    return *ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("synthetic"));
}

} // namespace gleaner::test
