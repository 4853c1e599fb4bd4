#pragma once
// How an accepted upload is folded into the server weights. One file per rule; the coordinator picks the rule
// named in the job spec. A rule sees the server weights, the client's weights and what is known about the
// update (its epoch, its staleness), and changes the server weights in place.

#include "Result.h"
#include "spec/JobSpec.h"
#include "tensor/TensorBundle.h"

#include <memory>

namespace gleaner::coordinator {

struct UpdateContext
{
    int epoch = 1;          // 1-based epoch of the workunit the update trained
    qint64 baseVersion = 0; // server version the agent started from
    qint64 serverVersion = 0;
    qint64 staleness() const { return serverVersion - baseVersion; }
};

class AggregationRule
{
public:
    virtual ~AggregationRule() = default;
    virtual QString name() const = 0;
    virtual Status apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context) = 0;

    static std::unique_ptr<AggregationRule> create(const AggregationSpec& spec);
};

} // namespace gleaner::coordinator
