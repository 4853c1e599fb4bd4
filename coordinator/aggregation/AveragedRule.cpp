#include "aggregation/AveragedRule.h"

#include "aggregation/PseudoGradientRule.h"
#include "ml/WeightMath.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace gleaner::coordinator {
namespace {

const QString kFolds = QStringLiteral("average_folds");

bool isAverageTensor(const TensorEntry& entry)
{
    return entry.name.startsWith(AveragedRule::statePrefix()) || entry.name == kFolds;
}

} // namespace

AveragedRule::AveragedRule(std::unique_ptr<AggregationRule> inner, double decay)
    : m_inner(std::move(inner)), m_decay(decay)
{
}

std::unique_ptr<AggregationRule> AveragedRule::clone() const
{
    auto copy = std::make_unique<AveragedRule>(m_inner->clone(), m_decay);
    copy->m_average = m_average; // shares the buffers: the copy's next fold writes into its own
    copy->m_folds = m_folds;
    return copy;
}

Status AveragedRule::apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context)
{
    if (auto s = m_inner->apply(server, client, context); !s)
        return s;
    return follow(m_average, m_folds, server, m_decay);
}

Status AveragedRule::follow(TensorBundle& average, qint64& folds, const TensorBundle& weights, double decay)
{
    if (average.isEmpty() || folds < 1) {
        average = weights;
        folds = 1;
        return {};
    }
    folds += 1;
    // The share of the new copy, (1 - d) / (1 - d^t): toward 1 - d as d^t underflows to 0.
    const double share = (1.0 - decay) / (1.0 - std::pow(decay, double(std::min<qint64>(folds, 1000000))));
    return ml::WeightMath::blend(average, weights, 1.0 - std::min(1.0, share));
}

TensorBundle AveragedRule::saveState() const
{
    TensorBundle state;
    const TensorBundle inner = m_inner->saveState();
    for (const auto& entry : inner.entries())
        (void)state.add(entry.name, entry.dtype, entry.shape, inner.data(entry));
    if (!m_average.isEmpty()) {
        addStateTensors(state, statePrefix(), m_average);
        const std::array<qint64, 1> folds{m_folds};
        (void)state.addValues<qint64>(kFolds, DType::I64, {}, folds);
    }
    return state;
}

Status AveragedRule::loadState(const TensorBundle& state, const TensorBundle& server)
{
    auto average = averageIn(state, server);
    if (!average)
        return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), average.error()));
    qint64 folds = 0;
    if (!average->isEmpty()) {
        const TensorEntry* entry = state.find(kFolds);
        if (!entry || entry->dtype != DType::I64 || entry->byteSize != 8)
            return fail(
                QStringLiteral("the %1 rule's state holds an average without %2").arg(name(), kFolds));
        std::memcpy(&folds, state.data(*entry).data(), 8);
        if (folds < 1)
            return fail(QStringLiteral("the %1 rule's state: %2 is %3").arg(name(), kFolds).arg(folds));
    }
    TensorBundle inner;
    for (const auto& entry : state.entries())
        if (!isAverageTensor(entry))
            if (auto s = inner.add(entry.name, entry.dtype, entry.shape, state.data(entry)); !s)
                return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), s.error()));
    if (auto s = m_inner->loadState(inner, server); !s)
        return s;
    m_average = std::move(*average);
    m_folds = folds;
    return {};
}

Result<TensorBundle> AveragedRule::averageIn(const TensorBundle& state, const TensorBundle& server)
{
    if (std::none_of(state.entries().cbegin(), state.entries().cend(),
                     [](const TensorEntry& e) { return e.name.startsWith(statePrefix()); }))
        return TensorBundle();
    return stateTensors(state, statePrefix(), server);
}

} // namespace gleaner::coordinator
