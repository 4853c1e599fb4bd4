#include "aggregation/PseudoGradientRule.h"

#include "ml/WeightMath.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace gleaner::coordinator {

using ml::WeightMath::Part;

Status PseudoGradientRule::apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context)
{
    if (!context.base)
        return fail(QStringLiteral("the %1 rule needs the weights the update trained from").arg(name()));
    if (auto s = ml::WeightMath::checkCompatible(server, client); !s)
        return fail(QStringLiteral("the update does not fit the server weights: %1").arg(s.error()));
    if (auto s = ml::WeightMath::checkCompatible(server, *context.base); !s)
        return fail(QStringLiteral("the weights the update trained from do not fit the server weights: %1")
                        .arg(s.error()));
    // A buffered change does not move the server copy yet, so the fold's check on the result cannot see it:
    // the rule refuses a non-finite update itself, before it enters the buffer.
    if (QString where; !ml::WeightMath::allFinite(client, &where))
        return fail(QStringLiteral("the update holds NaN or infinite values in tensor \"%1\"").arg(where));
    const int buffer = bufferFor(context);
    m_lrFactor = m_spec.schedule.factor(context.progress());
    const double w = m_spec.staleness.weight(context.staleness());
    if (m_sum.isEmpty())
        m_sum = ml::WeightMath::zerosLike(server);
    if (auto s = ml::WeightMath::addScaledDifference(m_sum, client, *context.base, w, Part::Parameters); !s)
        return s;
    const Result<double> change = ml::WeightMath::l2Distance(client, *context.base, Part::Parameters);
    if (!change)
        return fail(change.error());
    m_squaredNorms += w * w * *change * *change;
    if (auto s = ml::WeightMath::addScaledDifference(server, client, *context.base, w / buffer, Part::Statistics);
        !s)
        return s;
    if (auto s = ml::WeightMath::takeLargerCounters(server, client); !s)
        return s;
    if (auto s = onUpdate(server, client, *context.base, w, buffer); !s)
        return s;
    if (++m_count < buffer)
        return {};
    if (auto s = flush(server, m_sum, m_count); !s)
        return s;
    if (m_roundMeasured) {
        const double meanNorm = ml::WeightMath::l2Norm(m_sum, Part::Parameters) / m_count;
        m_noise.addRound(m_squaredNorms / m_count, meanNorm * meanNorm, m_count);
    }
    m_roundMeasured = true;
    m_sum = ml::WeightMath::zerosLike(server);
    m_count = 0;
    m_squaredNorms = 0;
    return {};
}

Status PseudoGradientRule::onUpdate(TensorBundle&, const TensorBundle&, const TensorBundle&, double, int)
{
    return {};
}

TensorBundle PseudoGradientRule::saveState() const
{
    TensorBundle state;
    const std::array<qint64, 1> count{m_count};
    (void)state.addValues<qint64>(QStringLiteral("count"), DType::I64, {}, count);
    if (!m_sum.isEmpty())
        addStateTensors(state, QStringLiteral("sum."), m_sum);
    if (m_count > 0) {
        const std::array<double, 1> norms{m_squaredNorms};
        (void)state.addValues<double>(QStringLiteral("squared_norms"), DType::F64, {}, norms);
    }
    m_noise.save(state, NoiseScale::stateName());
    saveExtra(state);
    return state;
}

Status PseudoGradientRule::loadState(const TensorBundle& state, const TensorBundle& server)
{
    if (state.isEmpty()) {
        m_sum = {};
        m_count = 0;
        m_squaredNorms = 0;
        m_roundMeasured = true;
        m_noise = NoiseScale();
        return loadExtra(state, server);
    }
    const TensorEntry* count = state.find(QStringLiteral("count"));
    if (!count || count->dtype != DType::I64 || count->byteSize != 8)
        return fail(QStringLiteral("the %1 rule's state has no count").arg(name()));
    qint64 value = 0;
    std::memcpy(&value, state.data(*count).data(), 8);
    if (value < 0 || value > kMaxBuffer)
        return fail(QStringLiteral("the %1 rule's state counts %2 buffered updates; a buffer holds at most %3")
                        .arg(name())
                        .arg(value)
                        .arg(kMaxBuffer));
    const bool anySum = std::any_of(state.entries().cbegin(), state.entries().cend(),
                                    [](const TensorEntry& e) { return e.name.startsWith(u"sum."); });
    Result<TensorBundle> sum = TensorBundle();
    if (anySum || value > 0)
        sum = stateTensors(state, QStringLiteral("sum."), server);
    if (!sum)
        return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), sum.error()));
    // State written before the noise scale was measured holds no squared_norms: the buffered round then
    // measures nothing (its norms are not known).
    double norms = 0;
    bool normsKnown = value == 0;
    if (const TensorEntry* entry = state.find(QStringLiteral("squared_norms"))) {
        if (entry->dtype != DType::F64 || entry->byteSize != 8)
            return fail(QStringLiteral("the %1 rule's state: squared_norms is not one float64").arg(name()));
        std::memcpy(&norms, state.data(*entry).data(), 8);
        if (!std::isfinite(norms) || norms < 0)
            return fail(QStringLiteral("the %1 rule's state: squared_norms is %2").arg(name()).arg(norms));
        normsKnown = true;
    }
    NoiseScale noise;
    if (auto s = noise.load(state, NoiseScale::stateName()); !s)
        return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), s.error()));
    if (auto s = loadExtra(state, server); !s)
        return s;
    m_sum = std::move(*sum);
    m_count = int(value);
    m_squaredNorms = norms;
    m_roundMeasured = normsKnown;
    m_noise = noise;
    return {};
}

Result<TensorBundle> stateTensors(const TensorBundle& from, const QString& prefix, const TensorBundle& like)
{
    TensorBundle out;
    for (const auto& entry : from.entries())
        if (entry.name.startsWith(prefix))
            if (auto s = out.add(entry.name.mid(prefix.size()), entry.dtype, entry.shape, from.data(entry)); !s)
                return fail(s.error());
    if (auto s = ml::WeightMath::checkCompatible(like, out); !s)
        return fail(QStringLiteral("%1*: %2").arg(prefix, s.error()));
    return out;
}

void addStateTensors(TensorBundle& to, const QString& prefix, const TensorBundle& bundle)
{
    for (const auto& entry : bundle.entries())
        (void)to.add(prefix + entry.name, entry.dtype, entry.shape, bundle.data(entry));
}

} // namespace gleaner::coordinator
