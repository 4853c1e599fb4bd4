#include "aggregation/VcAsgd.h"

#include "ml/WeightMath.h"

namespace gleaner::coordinator {

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
