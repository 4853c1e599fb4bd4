#pragma once
// What the rules that fold pseudo-gradients share. An update's pseudo-gradient is the change its agent made,
// d = client - base (its base being the published weights its lease handed out), damped by its staleness:
// w = s(t) (the job's StalenessSpec). The rule buffers the damped changes of K updates and, at every K-th,
// takes an outer step with their mean (flush()); what happens between is the concrete rule's choice
// (onUpdate()).
//
// Tensors are handled on purpose:
// - parameters go through the rule's arithmetic;
// - BatchNorm running statistics are not moved by gradients: each update moves them by w / K of its change at
//   once, with no server learning rate and no momentum, so they stay an average of what the agents measured;
// - integer buffers (num_batches_tracked) take the larger value, as in every rule.
// Every round also measures the job's gradient noise scale (NoiseScale) from the buffered changes' norms.

#include "aggregation/AggregationRule.h"

#include <algorithm>

namespace gleaner::coordinator {

class PseudoGradientRule : public AggregationRule
{
public:
    explicit PseudoGradientRule(const AggregationSpec& spec) : m_spec(spec) {}

    bool needsBase() const override { return true; }
    bool boundsFoldSteps() const override { return false; }
    Status apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context) final;
    TensorBundle saveState() const override;
    Status loadState(const TensorBundle& state, const TensorBundle& server) override;

    int buffered() const { return m_count; }
    const NoiseScale* noiseScale() const override { return &m_noise; }
    static constexpr int kMaxBuffer = 4096;

protected:
    // How many updates the buffer takes before a step: the spec's "buffer" (adaptive rules decide per update).
    virtual int bufferFor(const UpdateContext& context) const
    {
        (void)context;
        return std::max(1, m_spec.buffer);
    }
    // Every update, after it joined the buffer of `buffer` updates: `client - base` with weight `w` (parameters
    // only).
    virtual Status onUpdate(TensorBundle& server, const TensorBundle& client, const TensorBundle& base, double w,
                            int buffer);
    // Every K-th update: `sum` holds the sum of the K buffered damped changes (parameters only).
    virtual Status flush(TensorBundle& server, const TensorBundle& sum, int count) = 0;
    // Extra state of the concrete rule (saveState / loadState), with names of its own.
    virtual void saveExtra(TensorBundle& state) const { (void)state; }
    virtual Status loadExtra(const TensorBundle& state, const TensorBundle& server)
    {
        (void)state;
        (void)server;
        return {};
    }

    AggregationSpec m_spec;
    // The outer step's schedule factor at the update being folded (set before onUpdate() and flush()).
    double m_lrFactor = 1.0;

private:
    TensorBundle m_sum; // sum of the buffered damped changes (every tensor of the weights; parameters used)
    int m_count = 0;
    double m_squaredNorms = 0; // sum of the buffered damped changes' squared norms (parameters)
    bool m_roundMeasured =
        true; // false: the buffer came from state without its norms (the round is not measured)
    NoiseScale m_noise;        // measured over the rounds (a buffer's flush ends one)
};

// Copies the tensors of `from` whose names start with `prefix` into a bundle without the prefix; fails unless
// the result fits `like` (names, dtypes, shapes).
Result<TensorBundle> stateTensors(const TensorBundle& from, const QString& prefix, const TensorBundle& like);
// Adds every tensor of `bundle` to `to`, its name prefixed.
void addStateTensors(TensorBundle& to, const QString& prefix, const TensorBundle& bundle);

} // namespace gleaner::coordinator
