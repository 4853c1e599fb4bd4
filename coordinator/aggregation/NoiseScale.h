#pragma once
// The job's gradient noise scale, measured from the changes its agents send: how many agents' changes a round
// can average before more of them stop paying. McCandlish et al. ("An Empirical Model of Large-Batch
// Training", 2018) show that training with batch B takes S = S_min (1 + B_noise / B) steps and E = E_min (1 +
// B / B_noise) samples, with B_noise = tr(Sigma) / |G|^2, the noise of one sample's gradient over the squared
// true gradient.
//
// Here the "samples" are updates: each agent's change d_i (client - base, damped by staleness) is one draw of
// the job's pseudo-gradient, and a round of K of them is averaged (the rules' buffer). Their appendix A gives
// unbiased estimates from two batch sizes, here 1 and K: with S the mean of |d_i|^2 and M = |mean d_i|^2,
//   |G|^2 ~ (K M - S) / (K - 1)        tr(Sigma) ~ K (S - M) / (K - 1)
// Each is smoothed over rounds on its own (an exponential mean, weight kKeep for the old value) and the noise
// scale is their ratio, in updates. A round of B_noise agents makes progress at half the rate infinitely many
// would; the agent after it buys about a quarter of what the first did, and each further one less. The
// changes of agents that trained from older weights differ by more than sampling noise: the estimate includes
// what staleness adds, which is what averaging them can and cannot buy.
//
// Part of the rule's state (saved with every snapshot), so a restart and a replay measure the same value.

#include "Result.h"
#include "tensor/TensorBundle.h"

#include <optional>

namespace gleaner::coordinator {

class NoiseScale
{
public:
    // One round of `count` >= 2 changes: the mean of their squared norms and the squared norm of their mean.
    // A round of one change, or with non-finite figures, tells nothing and is ignored.
    void addRound(double meanSquaredNorm, double squaredNormOfMean, int count);
    // B_noise in updates, within [0, kMax]; kMax when the smoothed signal is not positive (noise dominates);
    // nullopt before kMinRounds rounds.
    std::optional<double> value() const;
    int rounds() const { return m_rounds; }

    void save(TensorBundle& state, const QString& prefix) const;
    // Reads what save() wrote; absent tensors leave it empty (state written before it existed).
    Status load(const TensorBundle& state, const QString& prefix);

    // The name of its tensor in a rule's state.
    static QString stateName() { return QStringLiteral("noise_scale"); }

    static constexpr double kKeep = 0.9;
    static constexpr int kMinRounds = 3;
    static constexpr double kMax = 4096;

private:
    double m_signal = 0; // smoothed |G|^2 estimates
    double m_noise = 0;  // smoothed tr(Sigma) estimates
    int m_rounds = 0;
};

} // namespace gleaner::coordinator
