#pragma once
// Adaptive Nesterov, Gleaner's own rule, from what the lab showed on the default job (docs/aggregation.md):
// adding each agent's whole change diverges (the changes of agents that trained from the same weights add up),
// averaging them (FedBuff with K = C) throws away all but one agent's progress a round, and delayed Nesterov
// recovers that progress with outer momentum, but only when its period K matches the number of agents training
// at once, which a volunteer job does not know in advance and which changes as agents come and go.
//
// So the period follows the job: K is the number of agents training it when the update arrives (the agents
// holding its open leases, counted by the scheduler and recorded with the update). One agent alone makes K = 1:
// each update is applied whole, plus momentum; C agents in lockstep make it a Nesterov step per round of C
// updates, as DiLoCo takes per round. Otherwise it is delayed Nesterov ("server_lr", "momentum", "staleness").

#include "aggregation/DelayedNesterov.h"

namespace gleaner::coordinator {

class AdaptiveNesterov final : public DelayedNesterov
{
public:
    using DelayedNesterov::DelayedNesterov;

    std::unique_ptr<AggregationRule> clone() const override { return std::make_unique<AdaptiveNesterov>(*this); }
    QString name() const override { return QStringLiteral("adaptive-nesterov"); }

protected:
    int bufferFor(const UpdateContext& context) const override
    {
        return std::clamp(context.concurrency, 1, kMaxBuffer);
    }
};

} // namespace gleaner::coordinator
