#include "aggregation/DelayedNesterov.h"

#include "ml/WeightMath.h"

namespace gleaner::coordinator {

using ml::WeightMath::Part;

Status DelayedNesterov::onUpdate(TensorBundle& server, const TensorBundle& client, const TensorBundle& base,
                                 double w, int buffer)
{
    m_lastBuffer = buffer;
    const double scale = outerLr(buffer) * m_lrFactor * w / buffer;
    return ml::WeightMath::addScaledDifference(server, client, base, scale, Part::Parameters);
}

Status DelayedNesterov::flush(TensorBundle& server, const TensorBundle& sum, int count)
{
    if (m_momentum.isEmpty())
        m_momentum = ml::WeightMath::zerosLike(server);
    if (auto s = ml::WeightMath::scaleAdd(m_momentum, m_spec.momentum, sum, 1.0 / count, Part::Parameters); !s)
        return s;
    return ml::WeightMath::scaleAdd(server, 1.0, m_momentum,
                                    outerLr(m_lastBuffer) * m_lrFactor * m_spec.momentum, Part::Parameters);
}

void DelayedNesterov::saveExtra(TensorBundle& state) const
{
    if (!m_momentum.isEmpty())
        addStateTensors(state, QStringLiteral("momentum."), m_momentum);
}

Status DelayedNesterov::loadExtra(const TensorBundle& state, const TensorBundle& server)
{
    const bool any = std::any_of(state.entries().cbegin(), state.entries().cend(), [](const TensorEntry& e) {
        return e.name.startsWith(u"momentum.");
    });
    if (!any) {
        m_momentum = {};
        return {};
    }
    auto momentum = stateTensors(state, QStringLiteral("momentum."), server);
    if (!momentum)
        return fail(QStringLiteral("the %1 rule's state: %2").arg(name(), momentum.error()));
    m_momentum = std::move(*momentum);
    return {};
}

} // namespace gleaner::coordinator
