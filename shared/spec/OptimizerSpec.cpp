#include "spec/OptimizerSpec.h"

#include "spec/JsonFields.h"

using namespace Qt::StringLiterals;

namespace gleaner {
namespace {

// In the order of OptimizerSpec::Kind, so an index from readChoice() converts directly.
const QStringList& kindNames()
{
    static const QStringList names{u"sgd"_s, u"adam"_s};
    return names;
}

// Above 10 a learning rate diverges for every model we build; such a value is a typo (1e1 for 1e-1).
const NumberRange kLearningRate = NumberRange::above(0).atMost(10);
const NumberRange kUnitInterval = NumberRange::atLeast(0).below(1);

} // namespace

Result<OptimizerSpec> OptimizerSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"name"_s, u"lr"_s, u"momentum"_s, u"nesterov"_s, u"weight_decay"_s, u"beta1"_s,
                      u"beta2"_s, u"eps"_s, u"schedule"_s});

    OptimizerSpec spec;
    int kind = 0;
    if (!fields.readChoice(u"name", kind, kindNames(), Need::Required))
        return fields.failure();
    spec.kind = Kind(kind);

    // Another optimizer's settings would be ignored by this one: refuse them so the admin notices.
    if (spec.kind == Kind::Sgd) {
        for (const auto key : {u"beta1", u"beta2", u"eps"})
            fields.refuse(key, u"only used by optimizer \"adam\""_s);
    } else {
        for (const auto key : {u"momentum", u"nesterov"})
            fields.refuse(key, u"only used by optimizer \"sgd\""_s);
    }

    fields.readNumber(u"lr", spec.lr, kLearningRate, Need::Required);
    fields.readNumber(u"weight_decay", spec.weightDecay, NumberRange::atLeast(0));
    if (spec.kind == Kind::Sgd) {
        fields.readNumber(u"momentum", spec.momentum, kUnitInterval);
        fields.readBool(u"nesterov", spec.nesterov);
        if (fields.ok() && spec.nesterov && spec.momentum == 0.0)
            fields.fail(u"nesterov", u"needs momentum > 0 (Nesterov without momentum is plain SGD); "
                                     u"set \"momentum\", e.g. 0.9"_s);
    } else {
        fields.readNumber(u"beta1", spec.beta1, kUnitInterval);
        fields.readNumber(u"beta2", spec.beta2, kUnitInterval);
        fields.readNumber(u"eps", spec.eps, NumberRange::above(0));
    }
    if (QJsonObject schedule; fields.readObject(u"schedule", schedule))
        fields.take(LrSchedule::fromJson(schedule, path + u".schedule"_s), spec.schedule);
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject OptimizerSpec::toJson() const
{
    QJsonObject json{
        {u"name"_s, kindNames().at(int(kind))},
        {u"lr"_s, lr},
        {u"weight_decay"_s, weightDecay},
    };
    if (kind == Kind::Sgd) {
        json.insert(u"momentum"_s, momentum);
        json.insert(u"nesterov"_s, nesterov);
    } else {
        json.insert(u"beta1"_s, beta1);
        json.insert(u"beta2"_s, beta2);
        json.insert(u"eps"_s, eps);
    }
    if (schedule.given)
        json.insert(u"schedule"_s, schedule.toJson());
    return json;
}

OptimizerSpec OptimizerSpec::at(double progress) const
{
    OptimizerSpec now = *this;
    now.lr = lr * schedule.factor(progress);
    now.schedule = LrSchedule();
    return now;
}

} // namespace gleaner
