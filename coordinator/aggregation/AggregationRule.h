#pragma once
// How an accepted upload is folded into the server weights. One file per rule; the coordinator (WeightsKeeper)
// and gleaner-sim pick the rule named in the job spec. A rule sees the server weights, the client's weights and
// what is known about the update (its epoch, its staleness, and for the rules that work on pseudo-gradients the
// weights it trained from), and changes the server weights in place.
//
// Pseudo-gradient rules (FedBuff, delayed Nesterov) keep state between updates (a buffer, a momentum). It is
// part of the server's state: saveState() writes it beside each snapshot of the weights and loadState() reads
// it back at a restart, so a replay continues exactly where the folds left off.

#include "Result.h"
#include "aggregation/NoiseScale.h"
#include "spec/JobSpec.h"
#include "tensor/TensorBundle.h"

#include <memory>

namespace gleaner::coordinator {

struct UpdateContext
{
    int epoch = 1;          // 1-based epoch of the workunit the update trained
    qint64 baseVersion = 0; // server version the agent started from
    qint64 serverVersion = 0;
    // The weights the update trained from (its lease's published version): set when the rule needsBase().
    const TensorBundle* base = nullptr;
    // Agents training the job when the update arrived (those holding open leases of it, and this update's):
    // recorded with the update, so a replay folds it as it was folded.
    int concurrency = 1;
    // The job's shards: an update is one shard's subtask, so serverVersion / updatesPerEpoch is the job's
    // progress in epochs, which the outer step's schedule follows (0: no progress known; a schedule's start).
    int updatesPerEpoch = 0;
    qint64 staleness() const { return serverVersion - baseVersion; }
    double progress() const { return updatesPerEpoch > 0 ? double(serverVersion) / updatesPerEpoch : 0.0; }
};

class AggregationRule
{
public:
    virtual ~AggregationRule() = default;
    virtual QString name() const = 0;
    // A copy with the same state (cheap: tensors are implicitly shared). WeightsKeeper folds with a copy and
    // keeps it only when the fold passes its checks, so a refused update leaves no trace in the rule's state.
    virtual std::unique_ptr<AggregationRule> clone() const = 0;
    virtual Status apply(TensorBundle& server, const TensorBundle& client, const UpdateContext& context) = 0;
    // The rule folds in pseudo-gradients (client - base): apply() needs context.base.
    virtual bool needsBase() const { return false; }
    // Whether WeightsKeeper bounds each fold's step by the job's recent fold steps. A rule that mixes the client
    // into the server moves it by a share of one upload each time, which such a bound describes well. A rule that
    // buffers or carries momentum moves it by nothing for K - 1 updates and then by a multiple of one upload's
    // change: the bound would refuse its honest steps. Its steps are linear in uploads that UpdateChecker bounded
    // one by one (each upload's step from its base), and the fold's result is still checked for finiteness.
    virtual bool boundsFoldSteps() const { return true; }
    // The rule's state between updates, as tensors (empty for stateless rules); loadState() refuses state that
    // does not fit `server` and changes nothing then.
    virtual TensorBundle saveState() const { return {}; }
    virtual Status loadState(const TensorBundle& state, const TensorBundle& server)
    {
        (void)server;
        return state.isEmpty() ? Status() : fail(QStringLiteral("rule %1 keeps no state").arg(name()));
    }

    // The job's gradient noise scale as the rule's rounds measured it (the rules that average
    // pseudo-gradients); null for rules that do not see them.
    virtual const NoiseScale* noiseScale() const { return nullptr; }
    // The average of the server weights that validation and export use (AveragedRule, the job's "ema_decay");
    // null when the rule keeps none.
    virtual const TensorBundle* averaged() const { return nullptr; }

    // The rule the spec names, wrapped in an AveragedRule when it asks for an average.
    static std::unique_ptr<AggregationRule> create(const AggregationSpec& spec);
};

} // namespace gleaner::coordinator
