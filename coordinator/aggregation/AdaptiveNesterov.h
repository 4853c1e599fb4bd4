#pragma once
// Adaptive Nesterov, Gleaner's own rule, from what the lab showed on the default job (docs/aggregation.md):
// adding each agent's whole change diverges (the changes of agents that trained from the same weights add
// up), averaging them (FedBuff with K = C) throws away all but one agent's progress a round, and delayed
// Nesterov recovers that progress with outer momentum, but only when its period K matches the number of
// agents training at once, which a volunteer job does not know in advance and which changes as agents come
// and go.
//
// So the period follows the job: K is the number of agents training it when the update arrives (the agents
// holding its open leases, counted by the scheduler and recorded with the update). One agent alone makes K =
// 1: each update is applied whole; C agents in lockstep make it a Nesterov step per round of C updates, as
// DiLoCo takes per round. Otherwise it is delayed Nesterov ("server_lr", "momentum", "staleness").
//
// Its step is capped too. At steady state outer momentum b multiplies a round's mean change by lr / (1 - b);
// with lr 1 and b 0.5 that is twice the mean, which at K = 2 is the whole sum of the two agents' changes: the
// regime that diverged in the lab at C = 4, and that did on the real system at C = 2, where leases trained
// from weights one or two updates older than the simulator's. So the learning rate is min(server_lr, (1 -
// b)(K + 1) / 2): a round moves the weights by at most (K + 1) / 2 times its mean change, one agent's change
// whole when it trains alone. With "adascale" the step follows the measured noise scale instead (outerLr()).

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
    double outerLr(int buffer) const override
    {
        const double capped = std::min(m_spec.serverLr, (1.0 - m_spec.momentum) * (buffer + 1) / 2.0);
        if (!m_spec.adaScale)
            return capped;
        // AdaScale (Johnson et al., ICML 2020): a round of K changes whose noise scale is B carries the
        // progress of r = (1 + B) / (1 + B / K) changes: K when noise dominates, 1 when the changes agree.
        // The step grows by r from the rule's own (the same until a measurement exists), and a round moves
        // the weights by at most the sum of its changes.
        const std::optional<double> b = noiseScale()->value();
        const double gain = b ? (1.0 + *b) / (1.0 + *b / buffer) : 1.0;
        return std::min(capped * gain, (1.0 - m_spec.momentum) * buffer);
    }
};

} // namespace gleaner::coordinator
