#include "aggregation/FedAsync.h"

#include "ml/WeightMath.h"

namespace gleaner::coordinator {

double FedAsync::mixingWeight(qint64 staleness) const
{
    return m_spec.alpha * m_spec.staleness.weight(staleness);
}

Status FedAsync::apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context)
{
    // WeightMath::blend keeps `alpha` of the server copy.
    return ml::WeightMath::blend(server, client, 1.0 - mixingWeight(context.staleness()));
}

} // namespace gleaner::coordinator
