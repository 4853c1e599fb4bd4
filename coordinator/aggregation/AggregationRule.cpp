#include "aggregation/AggregationRule.h"

#include "aggregation/AdaptiveNesterov.h"
#include "aggregation/AveragedRule.h"
#include "aggregation/DelayedNesterov.h"
#include "aggregation/FedAsync.h"
#include "aggregation/FedBuff.h"
#include "aggregation/VcAsgd.h"

namespace gleaner::coordinator {

namespace {

std::unique_ptr<AggregationRule> plain(const AggregationSpec& spec)
{
    switch (spec.rule) {
    case AggregationSpec::Rule::VcAsgd:
        return std::make_unique<VcAsgd>(spec);
    case AggregationSpec::Rule::FedAsync:
        return std::make_unique<FedAsync>(spec);
    case AggregationSpec::Rule::FedBuff:
        return std::make_unique<FedBuff>(spec);
    case AggregationSpec::Rule::DelayedNesterov:
        return std::make_unique<DelayedNesterov>(spec);
    case AggregationSpec::Rule::AdaptiveNesterov:
        return std::make_unique<AdaptiveNesterov>(spec);
    }
    return nullptr;
}

} // namespace

std::unique_ptr<AggregationRule> AggregationRule::create(const AggregationSpec& spec)
{
    auto rule = plain(spec);
    if (spec.emaDecay > 0 && rule)
        return std::make_unique<AveragedRule>(std::move(rule), spec.emaDecay);
    return rule;
}

} // namespace gleaner::coordinator
