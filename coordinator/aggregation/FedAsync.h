#pragma once
// FedAsync (Xie, Koyejo and Gupta, "Asynchronous Federated Optimization", 2019): each update is mixed into the
// server copy with a weight that shrinks with its staleness, so an update trained from old weights moves them
// less: server = (1 - a s(t)) server + a s(t) client, with t the server versions folded in since the update's
// base version and s the job's StalenessSpec (constant, polynomial (t + 1)^-a', or hinge). VC-ASGD computes the
// same staleness and ignores it.
//
// Every floating-point tensor (weights, and BatchNorm's running mean and variance) is mixed alike; integer
// buffers (BatchNorm's num_batches_tracked) take the larger value, as WeightMath::blend does for every rule.

#include "aggregation/AggregationRule.h"

namespace gleaner::coordinator {

class FedAsync final : public AggregationRule
{
public:
    explicit FedAsync(const AggregationSpec& spec) : m_spec(spec) {}

    std::unique_ptr<AggregationRule> clone() const override { return std::make_unique<FedAsync>(*this); }
    QString name() const override { return QStringLiteral("fedasync"); }
    // a s(t): the client's share of the mixed weights.
    double mixingWeight(qint64 staleness) const;
    Status apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context) override;

private:
    AggregationSpec m_spec;
};

} // namespace gleaner::coordinator
