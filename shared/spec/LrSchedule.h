#pragma once
// LrSchedule: how a learning rate changes over a job's progress, as a factor of the rate it is given with. A
// job may give one to its agents' optimizer ("optimizer.schedule") and one to its rule's outer step
// ("aggregation.schedule"; the rules with a "server_lr").
//
//   {"warmup_epochs": 0.5}                                           0.1 of the rate at the start, rising
//   linearly
//                                                                    to the whole rate after half an epoch
//   {"warmup_epochs": 0.5, "decay": "cosine", "epochs": 10, "final": 0.01}
//                                                                    then down along a half cosine to 0.01 of
//                                                                    the rate at epoch 10, and 0.01 after it
//   {"decay": "steps", "milestones": [5, 8], "gamma": 0.1}           0.1 of the rate from epoch 5, 0.01 from
//   8
//
// Progress is counted in epochs of folded updates: the server weights' version over the job's shards (an
// update is one shard's subtask), so every coordinator, a restart's replay and the lab compute the same
// factor for the same update. Updates refused at the fold do not count, so a job with many refusals runs
// through its schedule more slowly than through its data. An agent's lease trains at the factor of the
// weights it starts from (its base version), so a checkpoint handed back and resumed trains on at the rate it
// started with.
//
// Fields: "warmup_epochs" >= 0 (default 0), "warmup_from" in (0, 1] (default 0.1), "decay" "constant" (the
// default), "cosine" or "steps"; cosine: "epochs", the epoch where the decay ends (after the warm-up;
// default: the job's max_epochs, as the spec gives it: gleaner-sim's --epochs does not move it) and "final"
// in (0, 1] (default 0.01); steps: "milestones" (increasing epochs > 0, at least one) and "gamma" in (0, 1]
// (default 0.1). Another decay's fields are refused. The factor is never 0: an optimizer's rate must stay
// positive.

#include "Result.h"

#include <QJsonObject>
#include <QList>

namespace gleaner {

struct LrSchedule
{
    enum class Decay
    {
        Constant,
        Cosine,
        Steps
    };

    bool given = false; // false: no schedule (the factor is 1 throughout, and nothing is written)
    double warmupEpochs = 0;
    double warmupFrom = 0.1;
    Decay decay = Decay::Constant;
    double epochs = 0;   // cosine: where the decay ends; 0 until JobSpec fills in the job's max_epochs
    double final = 0.01; // cosine
    QList<double> milestones; // steps
    double gamma = 0.1;       // steps

    // The factor at `progress` epochs, in (0, 1].
    double factor(double progress) const;

    static Result<LrSchedule> fromJson(const QJsonObject& json, const QString& path);
    // Every field of the decay, defaults included; an empty object when not given.
    QJsonObject toJson() const;

    bool operator==(const LrSchedule&) const = default;
};

} // namespace gleaner
