#pragma once
// OptimizerSpec: the local optimizer an agent trains a subtask with.
//
// JSON: {"name": "adam", "lr": 0.001}   {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": false}
// optional for both: "weight_decay" (L2, default 0); adam only: "beta1", "beta2", "eps".
// optional for both: "schedule", how the rate changes over the job's progress (LrSchedule; the coordinator
// writes each lease's rate into its manifest, without the schedule).
// "name" and "lr" are required; the rest default to the values below. Another optimizer's fields are refused
// ("optimizer.momentum: only used by optimizer \"sgd\""), so a setting never silently does nothing.

#include "Result.h"
#include "spec/LrSchedule.h"

#include <QJsonObject>

namespace gleaner {

struct OptimizerSpec
{
    enum class Kind
    {
        Sgd,
        Adam
    };

    Kind kind = Kind::Adam;
    double lr = 1e-3;         // (0, 10]: above 10 is a typo, not a learning rate
    double momentum = 0.0;    // sgd: [0, 1)
    bool nesterov = false;    // sgd: needs momentum > 0
    double weightDecay = 0.0; // >= 0
    double beta1 = 0.9;       // adam: [0, 1)
    double beta2 = 0.999;     // adam: [0, 1)
    double eps = 1e-8;        // adam: > 0
    LrSchedule schedule;      // not given: the rate stays lr

    // The optimizer an agent trains with at `progress` epochs of the job: lr times the schedule's factor, and
    // no schedule (a manifest names the rate its lease trains at).
    OptimizerSpec at(double progress) const;

    static Result<OptimizerSpec> fromJson(const QJsonObject& json,
                                          const QString& path = QStringLiteral("optimizer"));
    QJsonObject toJson() const;

    bool operator==(const OptimizerSpec&) const = default;
};

} // namespace gleaner
