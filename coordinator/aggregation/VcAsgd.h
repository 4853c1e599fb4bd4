#pragma once
// VC-ASGD exactly as the paper ("Distributed Deep Learning Using Volunteer Computing-Like Paradigm", Atre, Jha,
// Rao): W_s <- a * W_s + (1 - a) * W_c, with a constant a or a_e = e / (e + 1) for the update's epoch e (1-based:
// the first epoch's updates weigh half, later epochs' less and less).
//
// Buffers: BatchNorm running means and variances are floating-point tensors and are blended with the same a as
// the parameters: they are statistics of the same data the parameters were fitted to, and blending keeps them
// consistent with the blended parameters (taking either side alone would pair one model's statistics with
// another's weights). Integer buffers (num_batches_tracked) count, so they take the larger value.

#include "aggregation/AggregationRule.h"

namespace gleaner::coordinator {

class VcAsgd final : public AggregationRule
{
public:
    explicit VcAsgd(const AggregationSpec& spec) : m_spec(spec) {}

    std::unique_ptr<AggregationRule> clone() const override { return std::make_unique<VcAsgd>(*this); }
    QString name() const override { return QStringLiteral("vc-asgd"); }
    double alphaFor(int epoch) const;
    Status apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context) override;

private:
    AggregationSpec m_spec;
};

} // namespace gleaner::coordinator
