#include "spec/LrSchedule.h"

#include "spec/JsonFields.h"

#include <QJsonArray>

#include <algorithm>
#include <cmath>
#include <numbers>

using namespace Qt::StringLiterals;

namespace gleaner {
namespace {

// In the order of LrSchedule::Decay.
const QStringList& decayNames()
{
    static const QStringList names{u"constant"_s, u"cosine"_s, u"steps"_s};
    return names;
}

const NumberRange kEpochs = NumberRange::atLeast(0).atMost(100000);
const NumberRange kShare = NumberRange::above(0).atMost(1);

} // namespace

double LrSchedule::factor(double progress) const
{
    if (!given)
        return 1.0;
    const double p = std::max(0.0, progress);
    if (p < warmupEpochs)
        return warmupFrom + (1.0 - warmupFrom) * p / warmupEpochs;
    switch (decay) {
    case Decay::Constant:
        return 1.0;
    case Decay::Cosine: {
        const double span = epochs - warmupEpochs;
        if (span <= 0 || p >= epochs)
            return final;
        const double t = (p - warmupEpochs) / span;
        return final + (1.0 - final) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
    }
    case Decay::Steps: {
        double f = 1.0;
        for (const double milestone : milestones)
            if (p >= milestone)
                f *= gamma;
        return f;
    }
    }
    return 1.0;
}

Result<LrSchedule> LrSchedule::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"warmup_epochs"_s, u"warmup_from"_s, u"decay"_s, u"epochs"_s, u"final"_s, u"milestones"_s,
                      u"gamma"_s});
    LrSchedule spec;
    spec.given = true;
    fields.readNumber(u"warmup_epochs", spec.warmupEpochs, kEpochs);
    fields.readNumber(u"warmup_from", spec.warmupFrom, kShare);
    if (fields.ok() && fields.has(u"warmup_from") && spec.warmupEpochs <= 0)
        fields.fail(u"warmup_from", u"needs \"warmup_epochs\" > 0: without a warm-up it sets nothing"_s);
    int decay = 0;
    if (fields.readChoice(u"decay", decay, decayNames()))
        spec.decay = Decay(decay);
    if (!fields.ok())
        return fields.failure();
    const QString decayName = decayNames().at(decay);
    const auto onlyFor = [&](QStringView key, Decay used) {
        if (spec.decay != used)
            fields.refuse(key, u"only used by decay \"%1\", not \"%2\""_s.arg(decayNames().at(int(used)), decayName));
    };
    onlyFor(u"epochs", Decay::Cosine);
    onlyFor(u"final", Decay::Cosine);
    onlyFor(u"milestones", Decay::Steps);
    onlyFor(u"gamma", Decay::Steps);
    if (spec.decay == Decay::Cosine) {
        if (fields.readNumber(u"epochs", spec.epochs, NumberRange::above(0).atMost(100000)) &&
            spec.epochs <= spec.warmupEpochs)
            fields.fail(u"epochs", u"the decay must end after the warm-up (%1 epochs), got %2"_s.arg(spec.warmupEpochs)
                                       .arg(spec.epochs));
        fields.readNumber(u"final", spec.final, kShare);
    }
    if (spec.decay == Decay::Steps) {
        fields.readNumberList(u"milestones", spec.milestones, NumberRange::above(0).atMost(100000), Need::Required, 1,
                              64);
        for (qsizetype i = 1; fields.ok() && i < spec.milestones.size(); ++i)
            if (spec.milestones[i] <= spec.milestones[i - 1])
                fields.failElement(u"milestones", i, u"milestones must increase, got %1 after %2"_s
                                                         .arg(spec.milestones[i])
                                                         .arg(spec.milestones[i - 1]));
        fields.readNumber(u"gamma", spec.gamma, kShare);
    }
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject LrSchedule::toJson() const
{
    if (!given)
        return {};
    QJsonObject json{{u"warmup_epochs"_s, warmupEpochs}, {u"decay"_s, decayNames().at(int(decay))}};
    if (warmupEpochs > 0) // without a warm-up it means nothing (and is refused)
        json.insert(u"warmup_from"_s, warmupFrom);
    if (decay == Decay::Cosine) {
        json.insert(u"epochs"_s, epochs);
        json.insert(u"final"_s, final);
    }
    if (decay == Decay::Steps) {
        QJsonArray list;
        for (const double milestone : milestones)
            list.append(milestone);
        json.insert(u"milestones"_s, list);
        json.insert(u"gamma"_s, gamma);
    }
    return json;
}

} // namespace gleaner
