#pragma once
// FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", 2022): the server buffers
// the pseudo-gradients of K updates, each damped by its staleness, and every K-th update moves the server copy
// by their mean times a server learning rate: server += lr * (1/K) sum_i s(t_i) (client_i - base_i). Between two
// steps the parameters stay as they are (see PseudoGradientRule for statistics and counters).

#include "aggregation/PseudoGradientRule.h"

namespace gleaner::coordinator {

class FedBuff final : public PseudoGradientRule
{
public:
    using PseudoGradientRule::PseudoGradientRule;

    std::unique_ptr<AggregationRule> clone() const override { return std::make_unique<FedBuff>(*this); }
    QString name() const override { return QStringLiteral("fedbuff"); }

protected:
    Status flush(TensorBundle& server, const TensorBundle& sum, int count) override;
};

} // namespace gleaner::coordinator
