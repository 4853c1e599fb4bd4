#pragma once
// A rule that also keeps an exponential moving average of the server weights (the job's "ema_decay" d). The
// rule it wraps decides the fold; agents keep training from the server copy; validation and the exported
// model take the average (averaged()), which smooths out what asynchronous updates and the last steps' noise
// leave in the server copy. In the lab, at d = 0.9 (a time constant of ten updates) the default job's average
// reached accuracies its server copy never did (docs/aggregation.md, "An average for validation").
//
// The average is bias-corrected, as Adam's moments are: after t folds it is the weighted mean
// sum_i (1 - d) d^(t - i) w_i / (1 - d^t) of the server copies w_1..w_t the folds left, so the weights the
// job started from (random, or a checkpoint) carry no weight in it, and a short job's average is not held
// back by them. Folded in one step: a <- a + (1 - d) / (1 - d^t) (w_t - a), which takes w_1 whole at the
// first fold and tends to a <- d a + (1 - d) w.
//
// The average is part of the rule's state, beside the wrapped rule's own tensors (names prefixed "average.",
// and the fold count "average_folds"), so it survives a restart, a refused fold (WeightsKeeper folds with a
// clone) and travels through Redis with the rest of the state. State without an average (written before one
// was asked for) starts it afresh at the next fold.

#include "aggregation/AggregationRule.h"

namespace gleaner::coordinator {

class AveragedRule final : public AggregationRule
{
public:
    AveragedRule(std::unique_ptr<AggregationRule> inner, double decay);

    QString name() const override { return m_inner->name(); }
    std::unique_ptr<AggregationRule> clone() const override;
    Status apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context) override;
    bool needsBase() const override { return m_inner->needsBase(); }
    bool boundsFoldSteps() const override { return m_inner->boundsFoldSteps(); }
    TensorBundle saveState() const override;
    Status loadState(const TensorBundle& state, const TensorBundle& server) override;
    const NoiseScale* noiseScale() const override { return m_inner->noiseScale(); }
    const TensorBundle* averaged() const override { return m_average.isEmpty() ? nullptr : &m_average; }

    // One fold's step of the average `average` over `folds` folds toward `weights` (the first fold takes them
    // whole). Also what gleaner-sim's baseline keeps per update's worth of samples.
    static Status follow(TensorBundle& average, qint64& folds, const TensorBundle& weights, double decay);
    static QString statePrefix() { return QStringLiteral("average."); }
    // The average a rule state holds (the server copy's names, dtypes and shapes); empty when it holds none.
    static Result<TensorBundle> averageIn(const TensorBundle& state, const TensorBundle& server);

private:
    std::unique_ptr<AggregationRule> m_inner;
    double m_decay;
    TensorBundle m_average; // empty until the first fold
    qint64 m_folds = 0;     // folds into the average
};

} // namespace gleaner::coordinator
