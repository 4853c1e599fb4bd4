#include "aggregation/FedBuff.h"

#include "ml/WeightMath.h"

namespace gleaner::coordinator {

Status FedBuff::flush(TensorBundle& server, const TensorBundle& sum, int count)
{
    return ml::WeightMath::scaleAdd(server, 1.0, sum, m_spec.serverLr * m_lrFactor / count,
                                    ml::WeightMath::Part::Parameters);
}

} // namespace gleaner::coordinator
