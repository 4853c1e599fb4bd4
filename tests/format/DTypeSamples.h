#pragma once
// Reference tensors of every dtype for the safetensors tests. Their values are written as text and turned
// into bytes, or compared with bytes, here without any code under test, so a round trip is checked against a
// truth of its own; the same text goes to and comes from the independent Python checker.

#include "tensor/TensorBundle.h"

#include <QStringList>

namespace gleaner::test {

struct DTypeSample
{
    QString name;
    DType dtype = DType::U8;
    QList<qint64> shape;
    QStringList values; // row-major, as text so 64-bit integers and non-finite floats are exact
};

// One sample per dtype with each type's extremes, plus a scalar and zero-sized tensors.
QList<DTypeSample> dtypeSamples();

// The dtype's little-endian bytes for `values`.
QByteArray encodeValues(DType dtype, const QStringList& values);

// Empty when `bundle` holds `sample` under its name with the same dtype, shape and values (compared as
// numbers: NaN equals NaN, -0.0 differs from 0.0); otherwise what differs.
QString compareSample(const TensorBundle& bundle, const DTypeSample& sample);

// All the samples in one bundle, in dtypeSamples() order, with metadata that needs escaping in JSON.
TensorBundle sampleBundle();

} // namespace gleaner::test
