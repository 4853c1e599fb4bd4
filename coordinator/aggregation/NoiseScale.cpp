#include "aggregation/NoiseScale.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace gleaner::coordinator {

void NoiseScale::addRound(double meanSquaredNorm, double squaredNormOfMean, int count)
{
    if (count < 2 || !std::isfinite(meanSquaredNorm) || !std::isfinite(squaredNormOfMean))
        return;
    const double k = count;
    const double signal = (k * squaredNormOfMean - meanSquaredNorm) / (k - 1);
    const double noise = k * (meanSquaredNorm - squaredNormOfMean) / (k - 1);
    // The first round sets both; later ones move them by 1 - kKeep.
    const double keep = m_rounds == 0 ? 0.0 : kKeep;
    m_signal = keep * m_signal + (1 - keep) * signal;
    m_noise = keep * m_noise + (1 - keep) * noise;
    ++m_rounds;
}

std::optional<double> NoiseScale::value() const
{
    if (m_rounds < kMinRounds)
        return std::nullopt;
    if (m_signal <= 0)
        return kMax;
    return std::clamp(m_noise / m_signal, 0.0, kMax);
}

void NoiseScale::save(TensorBundle& state, const QString& prefix) const
{
    if (m_rounds == 0)
        return;
    const std::array<double, 3> values{m_signal, m_noise, double(m_rounds)};
    (void)state.addValues<double>(prefix, DType::F64, {3}, values);
}

Status NoiseScale::load(const TensorBundle& state, const QString& prefix)
{
    *this = NoiseScale();
    const TensorEntry* entry = state.find(prefix);
    if (!entry)
        return {};
    std::array<double, 3> values{};
    if (entry->dtype != DType::F64 || entry->byteSize != qint64(sizeof values))
        return fail(QStringLiteral("%1: expected 3 float64 values").arg(prefix));
    std::memcpy(values.data(), state.data(*entry).data(), sizeof values);
    if (!std::isfinite(values[0]) || !std::isfinite(values[1]) || values[2] < 0 || values[2] > 1e9)
        return fail(QStringLiteral("%1: values out of range").arg(prefix));
    m_signal = values[0];
    m_noise = values[1];
    m_rounds = int(values[2]);
    return {};
}

} // namespace gleaner::coordinator
