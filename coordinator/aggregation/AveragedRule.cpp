#include "aggregation/AveragedRule.h"

#include "aggregation/PseudoGradientRule.h"
#include "ml/WeightMath.h"

#include <algorithm>

namespace gleaner::coordinator {
namespace {

bool isAverageTensor(const TensorEntry& entry)
{
    return entry.name.startsWith(AveragedRule::statePrefix());
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
    return copy;
}

Status AveragedRule::apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context)
{
    if (m_average.isEmpty())
        m_average = server;
    if (auto s = m_inner->apply(server, client, context); !s)
        return s;
    return ml::WeightMath::blend(m_average, server, m_decay);
}

TensorBundle AveragedRule::saveState() const
{
    TensorBundle state;
    const TensorBundle inner = m_inner->saveState();
    for (const auto& entry : inner.entries())
        (void)state.add(entry.name, entry.dtype, entry.shape, inner.data(entry));
    if (!m_average.isEmpty())
        addStateTensors(state, statePrefix(), m_average);
    return state;
}

Status AveragedRule::loadState(const TensorBundle& state, const TensorBundle& server)
{
    auto average = averageIn(state, server);
    if (!average)
        return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), average.error()));
    TensorBundle inner;
    for (const auto& entry : state.entries())
        if (!isAverageTensor(entry))
            if (auto s = inner.add(entry.name, entry.dtype, entry.shape, state.data(entry)); !s)
                return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), s.error()));
    if (auto s = m_inner->loadState(inner, server); !s)
        return s;
    m_average = average->isEmpty() ? server : std::move(*average);
    return {};
}

Result<TensorBundle> AveragedRule::averageIn(const TensorBundle& state, const TensorBundle& server)
{
    if (std::none_of(state.entries().cbegin(), state.entries().cend(), isAverageTensor))
        return TensorBundle();
    return stateTensors(state, statePrefix(), server);
}

} // namespace gleaner::coordinator
