#pragma once
// Delayed Nesterov (Liu et al., "Asynchronous Local-SGD Training for Language Modeling", 2024): outer Nesterov
// momentum over pseudo-gradients, as DiLoCo's outer optimizer, made fit for updates that arrive one at a time.
// With d_i = s(t_i) (client_i - base_i) the damped change of update i, an outer learning rate lr, momentum b and a
// period K:
//   every update:    server += lr / K * d_i                     (the gradient part, applied at once)
//   every K-th:      m = b m + (1/K) sum of the last K d_i;  server += lr b m   (the momentum part, delayed)
// Over K updates that is exactly one Nesterov step, server += lr (mean d + b m), as PyTorch's SGD(nesterov=True)
// takes it with the gradient -mean d; yet no update waits for the buffer to fill. See PseudoGradientRule for
// statistics and counters.

#include "aggregation/PseudoGradientRule.h"

namespace gleaner::coordinator {

class DelayedNesterov : public PseudoGradientRule
{
public:
    using PseudoGradientRule::PseudoGradientRule;

    std::unique_ptr<AggregationRule> clone() const override { return std::make_unique<DelayedNesterov>(*this); }
    QString name() const override { return QStringLiteral("delayed-nesterov"); }

protected:
    Status onUpdate(TensorBundle& server, const TensorBundle& client, const TensorBundle& base, double w,
                    int buffer) override;
    Status flush(TensorBundle& server, const TensorBundle& sum, int count) override;
    void saveExtra(TensorBundle& state) const override;
    Status loadExtra(const TensorBundle& state, const TensorBundle& server) override;

    // The outer learning rate for a buffer of `buffer` updates (the spec's server_lr; adaptive rules cap it).
    virtual double outerLr(int buffer) const
    {
        (void)buffer;
        return m_spec.serverLr;
    }

private:
    int m_lastBuffer = 1;     // the buffer the current round runs with (flush() uses the same learning rate)
    TensorBundle m_momentum; // empty until the first flush
};

} // namespace gleaner::coordinator
