#include "ml/data/Normalization.h"

#include <cmath>
#include <cstring>

using namespace Qt::StringLiterals;

namespace gleaner::ml {
namespace {

// The value per channel, a single value standing for every channel; the field's problem otherwise.
Result<std::vector<double>> perChannel(const QList<double>& values, qint64 channels, const QString& field,
                                       const QList<qint64>& sampleShape)
{
    if (values.size() != 1 && values.size() != channels)
        return fail(
            u"dataset.normalize.%1 holds %2 values but the samples have %3 channels (sample shape %4); give "
            u"%3 values, one per channel, or one for all"_s.arg(field)
                .arg(values.size())
                .arg(channels)
                .arg(shapeToString(sampleShape)));
    std::vector<double> out(static_cast<size_t>(channels));
    for (qint64 c = 0; c < channels; ++c)
        out[size_t(c)] = values[values.size() == 1 ? 0 : qsizetype(c)];
    return out;
}

} // namespace

Result<Normalizer> Normalizer::create(const QList<double>& mean, const QList<double>& stddev,
                                      const QList<qint64>& sampleShape)
{
    const qint64 channels = sampleShape.value(0, 1);
    auto means = perChannel(mean, channels, u"mean"_s, sampleShape);
    if (!means)
        return fail(means.error());
    auto stds = perChannel(stddev, channels, u"std"_s, sampleShape);
    if (!stds)
        return fail(stds.error());
    for (qsizetype i = 0; i < stddev.size(); ++i)
        if (!(stddev[i] > 0) || !std::isfinite(stddev[i]))
            return fail(
                u"dataset.normalize.std[%1] is %2; every std must be a finite number > 0"_s.arg(i).arg(
                    stddev[i]));
    for (qsizetype i = 0; i < mean.size(); ++i)
        if (!std::isfinite(mean[i]))
            return fail(u"dataset.normalize.mean[%1] is %2; every mean must be a finite number"_s.arg(i).arg(
                mean[i]));
    Normalizer normalizer;
    normalizer.m_means = std::move(*means);
    normalizer.m_stds = std::move(*stds);
    normalizer.m_values = shapeElementCount(sampleShape).value_or(0);
    normalizer.m_perChannel = normalizer.m_values / channels;
    return normalizer;
}

void Normalizer::apply(const char* sample, DType type, float* out) const
{
    const bool pixels = type == DType::U8;
    const auto* bytes = reinterpret_cast<const uchar*>(sample);
    // A file from another writer may hold a misaligned float tensor: read through memcpy, not a float
    // pointer.
    const auto sampleValue = [&](qint64 i) {
        if (pixels)
            return double(bytes[i]) / 255.0;
        float value;
        std::memcpy(&value, bytes + i * qint64(sizeof(float)), sizeof(float));
        return double(value);
    };
    for (size_t c = 0; c < m_means.size(); ++c) {
        // In double, then rounded once: the same float on every machine.
        const double m = m_means[c], s = m_stds[c];
        const qint64 begin = qint64(c) * m_perChannel;
        for (qint64 i = begin; i < begin + m_perChannel; ++i)
            out[i] = float((sampleValue(i) - m) / s);
    }
}

Result<Dataset> normalize(const Dataset& data, const QList<double>& mean, const QList<double>& stddev)
{
    const QList<qint64> sampleShape = data.sampleShape();
    if (sampleShape.isEmpty())
        return data; // an empty set: nothing to scale
    auto normalizer = Normalizer::create(mean, stddev, sampleShape);
    if (!normalizer)
        return fail(normalizer.error());

    const qint64 n = data.size();
    const qint64 values = normalizer->values();
    TensorBundle out;
    out.metadata() = data.bundle().metadata();
    QList<qint64> shape = data.x().shape;
    // Both tensors first: adding one may move the buffer, so the pointers are taken afterwards.
    out.addZeroed(u"x"_s, DType::F32, shape);
    out.addZeroed(u"y"_s, DType::I64, {n});
    auto* target = reinterpret_cast<float*>(out.mutableData(out.entries().at(0)));
    std::memcpy(out.mutableData(out.entries().at(1)), data.bundle().data(data.y()).data(),
                size_t(n) * sizeof(qint64));
    const char* bytes = data.bundle().data(data.x()).data();
    const qint64 stride = data.sampleBytes();
    for (qint64 sample = 0; sample < n; ++sample)
        normalizer->apply(bytes + sample * stride, data.sampleType(), target + sample * values);
    return Dataset::fromBundle(std::move(out), u"normalized samples"_s);
}

} // namespace gleaner::ml
