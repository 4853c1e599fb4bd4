#pragma once
// How far one step may move a job's weights: the bound that keeps a hostile or broken agent's finite but huge
// upload (x1e6, negated weights, 3e38) out of the server copy. Steps are Euclidean distances between two weight
// sets of the same job (an upload against the version it trained from; the server copy after a fold against the
// copy before it). The bound follows what honest steps of this job look like: a multiple of the median of the
// last accepted ones. A median, not a mean: a minority of hostile steps cannot drag it. Before enough steps are
// known, the bound is a fraction of the weights' own norm, so the first updates of a job are bounded too.
//
// Not thread-safe: each instance belongs to one thread (the state thread bounds uploads, the weights thread
// bounds folds).

#include <QString>

#include <deque>
#include <vector>

namespace gleaner::coordinator {

class UpdateBound
{
public:
    // Honest steps of one job vary by a small factor (shard, epoch, staleness); an attack that must stay within
    // five medians to pass is bounded to what a few honest updates would do.
    static constexpr double kMedianMultiple = 5.0;
    // Accepted steps the median is taken over, and how many it needs before it is trusted.
    static constexpr int kWindow = 64;
    static constexpr int kMinHistory = 8;
    // Until then a step may be at most four times as long as the weights it starts from: a first local epoch
    // from random weights can move them further than their own norm (1.4 x seen on Fashion-MNIST), a rescaled
    // or 3e38 model moves far more. A negated model (2 x) passes this and is caught once the median is known.
    static constexpr double kStartFraction = 4.0;
    // Whatever the median says, a step of 1% of the weights' norm is always allowed: a run of tiny (or zero)
    // steps cannot shut honest agents out.
    static constexpr double kFloorFraction = 0.01;

    // The longest step allowed from weights whose norm is `fromNorm`.
    double limit(double fromNorm) const;
    // Whether the limit depends on `fromNorm` at all (callers skip computing a norm they will not need).
    bool needsNorm() const { return int(m_recent.size()) < kMinHistory; }
    // Why `limit(fromNorm)` is what it is, for the refusal's message.
    QString describe(double fromNorm) const;
    // An accepted step joins the window (the oldest leaves it). Non-finite or negative values are ignored.
    void accept(double step);
    int count() const { return int(m_recent.size()); }
    double median() const;
    // The accepted steps the bound follows, oldest first, and a bound that follows exactly these (the window
    // of a job whose folds several coordinators share travels with its weights: aggregation/SharedWeights).
    std::vector<double> window() const { return {m_recent.begin(), m_recent.end()}; }
    static UpdateBound fromWindow(const std::vector<double>& steps);

private:
    std::deque<double> m_recent;
};

} // namespace gleaner::coordinator
