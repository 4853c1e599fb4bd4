#include "aggregation/VcAsgd.h"

#include "ml/WeightMath.h"

namespace gleaner::coordinator {

std::unique_ptr<AggregationRule> AggregationRule::create(const AggregationSpec& spec)
{
    switch (spec.rule) {
    case AggregationSpec::Rule::VcAsgd:
        return std::make_unique<VcAsgd>(spec);
    }
    return nullptr;
}

double VcAsgd::alphaFor(int epoch) const
{
    if (!m_spec.alphaPerEpoch)
        return m_spec.alpha;
    const double e = std::max(1, epoch);
    return e / (e + 1.0);
}

Status VcAsgd::apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context)
{
    return ml::WeightMath::blend(server, client, alphaFor(context.epoch));
}

} // namespace gleaner::coordinator
