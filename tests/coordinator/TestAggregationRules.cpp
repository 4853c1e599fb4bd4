// The arithmetic of every aggregation rule against hand-computed values, and what a rule refuses.

#include "aggregation/AggregationRule.h"
#include "aggregation/AveragedRule.h"
#include "aggregation/DelayedNesterov.h"
#include "aggregation/FedAsync.h"
#include "aggregation/FedBuff.h"
#include "aggregation/UpdateBound.h"
#include "aggregation/VcAsgd.h"
#include "aggregation/WeightsKeeper.h"

#include <QTest>

#include <cmath>
#include <limits>
#include <vector>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

TensorBundle weights(std::vector<float> values, qint64 counter = 0)
{
    TensorBundle bundle;
    if (!bundle.addValues<float>(QStringLiteral("w"), DType::F32, {qint64(values.size())}, values).ok())
        qFatal("cannot build weights");
    const std::vector<qint64> count{counter};
    if (!bundle.addValues<qint64>(QStringLiteral("bn.num_batches_tracked"), DType::I64, {}, count).ok())
        qFatal("cannot build weights");
    return bundle;
}

std::vector<float> values(const TensorBundle& bundle)
{
    const auto span = bundle.values<float>(*bundle.find(QStringLiteral("w")));
    return {span.begin(), span.end()};
}

AggregationSpec fedAsync(double alpha, StalenessSpec::Function function, double a = 0.5, int b = 4)
{
    AggregationSpec spec;
    spec.rule = AggregationSpec::Rule::FedAsync;
    spec.alphaPerEpoch = false;
    spec.alpha = alpha;
    spec.staleness.function = function;
    spec.staleness.a = a;
    spec.staleness.b = b;
    return spec;
}

AggregationSpec pseudo(AggregationSpec::Rule rule, int buffer, double lr, double momentum = 0.0,
                       StalenessSpec::Function function = StalenessSpec::Function::Constant)
{
    AggregationSpec spec;
    spec.rule = rule;
    spec.alphaPerEpoch = false;
    spec.buffer = buffer;
    spec.serverLr = lr;
    spec.momentum = momentum;
    spec.staleness.function = function;
    spec.staleness.a = 0.5;
    return spec;
}

// Weights with a running statistic beside the parameter "w" and the counter.
TensorBundle withStatistic(std::vector<float> values, float mean, qint64 counter = 0)
{
    TensorBundle bundle = weights(std::move(values), counter);
    const std::vector<float> stat{mean};
    if (!bundle.addValues<float>(QStringLiteral("bn.running_mean"), DType::F32, {1}, stat).ok())
        qFatal("cannot build weights");
    return bundle;
}

float statistic(const TensorBundle& bundle)
{
    return bundle.values<float>(*bundle.find(QStringLiteral("bn.running_mean")))[0];
}

qint64 counter(const TensorBundle& bundle)
{
    return bundle.values<qint64>(*bundle.find(QStringLiteral("bn.num_batches_tracked")))[0];
}

UpdateContext context(qint64 baseVersion, qint64 serverVersion, int epoch = 1)
{
    UpdateContext c;
    c.epoch = epoch;
    c.baseVersion = baseVersion;
    c.serverVersion = serverVersion;
    return c;
}

} // namespace

class TestAggregationRules : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void sparsePublicationMovesTheLargestGaps();
    void rulesAreCreatedFromTheSpec();
    void vcAsgdKeepsAlphaOfTheServer();
    void stalenessFunctions_data();
    void stalenessFunctions();
    void fedAsyncDampsStaleUpdates();
    void integerBuffersTakeTheLargerValue();
    void mismatchedWeightsAreRefused();
    void nonFiniteFoldIsRefused();
    void fedBuffStepsEveryKUpdates();
    void fedBuffDampsStaleUpdates();
    void delayedNesterovAppliesMomentumEveryK();
    void pseudoGradientRulesHandleStatisticsAndCounters();
    void pseudoGradientRulesRefuseWithoutFittingBase();
    void ruleStateSurvivesSaveAndLoad();
    void refusedFoldLeavesTheRuleStateAlone();
    void honestBufferedStepsPassTheFold();
    void adaptiveNesterovTakesItsPeriodFromTheAgentsTraining();
    void averageFollowsTheServerCopy();
    void averageSurvivesItsStateAndRefusedFolds();
};

void TestAggregationRules::rulesAreCreatedFromTheSpec()
{
    QCOMPARE(AggregationRule::create(AggregationSpec())->name(), QStringLiteral("vc-asgd"));
    QCOMPARE(AggregationRule::create(fedAsync(0.5, StalenessSpec::Function::Hinge))->name(), QStringLiteral("fedasync"));
    QCOMPARE(AggregationRule::create(pseudo(AggregationSpec::Rule::FedBuff, 4, 1.0))->name(), QStringLiteral("fedbuff"));
    QCOMPARE(AggregationRule::create(pseudo(AggregationSpec::Rule::DelayedNesterov, 4, 1.0))->name(),
             QStringLiteral("delayed-nesterov"));
    QCOMPARE(AggregationRule::create(pseudo(AggregationSpec::Rule::AdaptiveNesterov, 4, 1.0))->name(),
             QStringLiteral("adaptive-nesterov"));
}

void TestAggregationRules::vcAsgdKeepsAlphaOfTheServer()
{
    VcAsgd perEpoch{AggregationSpec()};
    QCOMPARE(perEpoch.alphaFor(1), 0.5);
    QCOMPARE(perEpoch.alphaFor(3), 0.75);
    TensorBundle server = weights({1.0f, 1.0f});
    QVERIFY(perEpoch.apply(server, weights({3.0f, 5.0f}), context(0, 0, 3)).ok());
    QCOMPARE(values(server), (std::vector<float>{1.5f, 2.0f})); // 0.75 w + 0.25 c
}

void TestAggregationRules::stalenessFunctions_data()
{
    QTest::addColumn<int>("function");
    QTest::addColumn<double>("a");
    QTest::addColumn<int>("b");
    QTest::addColumn<qint64>("staleness");
    QTest::addColumn<double>("weight");
    using F = StalenessSpec::Function;
    QTest::newRow("constant") << int(F::Constant) << 0.5 << 4 << qint64(100) << 1.0;
    QTest::newRow("polynomial t=0") << int(F::Polynomial) << 0.5 << 4 << qint64(0) << 1.0;
    QTest::newRow("polynomial t=3, a=0.5") << int(F::Polynomial) << 0.5 << 4 << qint64(3) << 0.5;   // 4^-1/2
    QTest::newRow("polynomial t=1, a=2") << int(F::Polynomial) << 2.0 << 4 << qint64(1) << 0.25;   // 2^-2
    QTest::newRow("hinge inside b") << int(F::Hinge) << 10.0 << 4 << qint64(4) << 1.0;
    QTest::newRow("hinge one past b") << int(F::Hinge) << 10.0 << 4 << qint64(5) << 1.0 / 11.0;
    QTest::newRow("hinge three past b") << int(F::Hinge) << 1.0 << 0 << qint64(3) << 0.25;
    QTest::newRow("negative staleness counts as 0") << int(F::Polynomial) << 0.5 << 4 << qint64(-2) << 1.0;
}

void TestAggregationRules::stalenessFunctions()
{
    QFETCH(int, function);
    QFETCH(double, a);
    QFETCH(int, b);
    QFETCH(qint64, staleness);
    QFETCH(double, weight);
    StalenessSpec spec;
    spec.function = StalenessSpec::Function(function);
    spec.a = a;
    spec.b = b;
    QCOMPARE(spec.weight(staleness), weight);
}

void TestAggregationRules::fedAsyncDampsStaleUpdates()
{
    FedAsync rule(fedAsync(0.5, StalenessSpec::Function::Polynomial, 0.5));
    // Fresh (t = 0): half of the client.
    TensorBundle fresh = weights({1.0f, 1.0f});
    QVERIFY(rule.apply(fresh, weights({3.0f, 5.0f}), context(4, 4)).ok());
    QCOMPARE(values(fresh), (std::vector<float>{2.0f, 3.0f}));
    // Three versions stale: a s(t) = 0.5 x 4^-1/2 = 0.25 of the client.
    QCOMPARE(rule.mixingWeight(3), 0.25);
    TensorBundle stale = weights({1.0f, 1.0f});
    QVERIFY(rule.apply(stale, weights({3.0f, 5.0f}), context(1, 4)).ok());
    QCOMPARE(values(stale), (std::vector<float>{1.5f, 2.0f}));
    // alpha 1 with a constant function takes the client as it is.
    FedAsync replace(fedAsync(1.0, StalenessSpec::Function::Constant));
    TensorBundle replaced = weights({1.0f, 1.0f});
    QVERIFY(replace.apply(replaced, weights({3.0f, 5.0f}), context(0, 9)).ok());
    QCOMPARE(values(replaced), (std::vector<float>{3.0f, 5.0f}));
}

void TestAggregationRules::integerBuffersTakeTheLargerValue()
{
    FedAsync rule(fedAsync(0.5, StalenessSpec::Function::Constant));
    TensorBundle server = weights({1.0f}, 10);
    QVERIFY(rule.apply(server, weights({1.0f}, 14), context(0, 0)).ok());
    QCOMPARE(server.values<qint64>(*server.find(QStringLiteral("bn.num_batches_tracked")))[0], qint64(14));
}

void TestAggregationRules::mismatchedWeightsAreRefused()
{
    for (const AggregationSpec& spec : {AggregationSpec(), fedAsync(0.5, StalenessSpec::Function::Hinge)}) {
        auto rule = AggregationRule::create(spec);
        TensorBundle server = weights({1.0f, 1.0f});
        const TensorBundle before = server;
        QVERIFY(!rule->apply(server, weights({1.0f, 1.0f, 1.0f}), context(0, 0)).ok());
        QCOMPARE(values(server), values(before));
    }
}

void TestAggregationRules::nonFiniteFoldIsRefused()
{
    // A rule's result is checked before it replaces the server copy: NaN never gets in, whatever the rule.
    for (const AggregationSpec& spec : {AggregationSpec(), fedAsync(0.5, StalenessSpec::Function::Polynomial)}) {
        auto rule = AggregationRule::create(spec);
        TensorBundle server = weights({1.0f, 1.0f});
        UpdateBound steps;
        const Status folded = WeightsKeeper::fold(
            server, rule, steps, weights({std::numeric_limits<float>::quiet_NaN(), 1.0f}), context(0, 0), false);
        QVERIFY(!folded.ok());
        QVERIFY2(folded.error().contains(u"NaN or infinite"), qPrintable(folded.error()));
        QCOMPARE(values(server), (std::vector<float>{1.0f, 1.0f}));
    }
}

void TestAggregationRules::fedBuffStepsEveryKUpdates()
{
    // K = 2, lr 1: the first update waits in the buffer; the second moves the server by the mean change.
    auto rule = AggregationRule::create(pseudo(AggregationSpec::Rule::FedBuff, 2, 1.0));
    QCOMPARE(rule->name(), QStringLiteral("fedbuff"));
    QVERIFY(rule->needsBase());
    TensorBundle server = weights({1.0f, 1.0f});
    const TensorBundle base = weights({1.0f, 1.0f});
    UpdateContext c = context(0, 0);
    c.base = &base;
    QVERIFY(rule->apply(server, weights({3.0f, 1.0f}), c).ok()); // change (2, 0)
    QCOMPARE(values(server), (std::vector<float>{1.0f, 1.0f}));
    QVERIFY(rule->apply(server, weights({1.0f, 5.0f}), c).ok()); // change (0, 4)
    QCOMPARE(values(server), (std::vector<float>{2.0f, 3.0f}));
    // lr 0.5 halves the step: the buffer starts again empty.
    auto half = AggregationRule::create(pseudo(AggregationSpec::Rule::FedBuff, 1, 0.5));
    TensorBundle other = weights({1.0f, 1.0f});
    QVERIFY(half->apply(other, weights({3.0f, 5.0f}), c).ok());
    QCOMPARE(values(other), (std::vector<float>{2.0f, 3.0f}));
}

void TestAggregationRules::fedBuffDampsStaleUpdates()
{
    // Polynomial staleness with a = 0.5: staleness 3 weighs (3 + 1)^-0.5 = 0.5.
    auto rule = AggregationRule::create(
        pseudo(AggregationSpec::Rule::FedBuff, 1, 1.0, 0.0, StalenessSpec::Function::Polynomial));
    TensorBundle server = weights({10.0f, 10.0f});
    const TensorBundle base = weights({0.0f, 0.0f});
    UpdateContext c = context(2, 5);
    c.base = &base;
    // Change (4, -2) from its own base, halved, lands on the server copy (which moved since that base).
    QVERIFY(rule->apply(server, weights({4.0f, -2.0f}), c).ok());
    QCOMPARE(values(server), (std::vector<float>{12.0f, 9.0f}));
}

void TestAggregationRules::delayedNesterovAppliesMomentumEveryK()
{
    // K = 2, lr 1, momentum 0.5, worked by hand:
    //   d1 = (2, 0): server (0, 0) + d1 / 2             = (1, 0)
    //   d2 = (0, 4): server + d2 / 2                     = (1, 2); m = mean(d1, d2) = (1, 2); server + 0.5 m = (1.5, 3)
    //   d3 = (2, 2): server + d3 / 2                     = (2.5, 4)
    //   d4 = (0, 0): m = 0.5 (1, 2) + mean(d3, d4) = (1.5, 2); server + 0.5 m = (3.25, 5)
    auto rule = AggregationRule::create(pseudo(AggregationSpec::Rule::DelayedNesterov, 2, 1.0, 0.5));
    QCOMPARE(rule->name(), QStringLiteral("delayed-nesterov"));
    TensorBundle server = weights({0.0f, 0.0f});
    const TensorBundle base = weights({0.0f, 0.0f});
    UpdateContext c = context(0, 0);
    c.base = &base;
    QVERIFY(rule->apply(server, weights({2.0f, 0.0f}), c).ok());
    QCOMPARE(values(server), (std::vector<float>{1.0f, 0.0f}));
    QVERIFY(rule->apply(server, weights({0.0f, 4.0f}), c).ok());
    QCOMPARE(values(server), (std::vector<float>{1.5f, 3.0f}));
    QVERIFY(rule->apply(server, weights({2.0f, 2.0f}), c).ok());
    QCOMPARE(values(server), (std::vector<float>{2.5f, 4.0f}));
    QVERIFY(rule->apply(server, weights({0.0f, 0.0f}), c).ok());
    QCOMPARE(values(server), (std::vector<float>{3.25f, 5.0f}));
}

void TestAggregationRules::pseudoGradientRulesHandleStatisticsAndCounters()
{
    for (auto which : {AggregationSpec::Rule::FedBuff, AggregationSpec::Rule::DelayedNesterov}) {
        // lr 2 and momentum 0.9 would move a statistic if it were treated as a parameter: it moves by its own
        // change / K at once, nothing else.
        auto rule = AggregationRule::create(pseudo(which, 2, 2.0, 0.9));
        TensorBundle server = withStatistic({0.0f, 0.0f}, 1.0f, 7);
        const TensorBundle base = withStatistic({0.0f, 0.0f}, 1.0f, 5);
        UpdateContext c = context(0, 0);
        c.base = &base;
        QVERIFY(rule->apply(server, withStatistic({0.0f, 0.0f}, 3.0f, 9), c).ok());
        QCOMPARE(statistic(server), 2.0f); // 1 + (3 - 1) / 2
        QCOMPARE(counter(server), qint64(9));
        QVERIFY(rule->apply(server, withStatistic({0.0f, 0.0f}, 1.0f, 6), c).ok());
        QCOMPARE(statistic(server), 2.0f); // no change, no momentum
        QCOMPARE(counter(server), qint64(9));
    }
}

void TestAggregationRules::pseudoGradientRulesRefuseWithoutFittingBase()
{
    for (auto which : {AggregationSpec::Rule::FedBuff, AggregationSpec::Rule::DelayedNesterov}) {
        auto rule = AggregationRule::create(pseudo(which, 1, 1.0, 0.5));
        TensorBundle server = weights({1.0f, 1.0f});
        const TensorBundle before = server;
        const Status noBase = rule->apply(server, weights({2.0f, 2.0f}), context(0, 0));
        QVERIFY(!noBase.ok());
        QVERIFY2(noBase.error().contains(u"trained from"), qPrintable(noBase.error()));
        const TensorBundle wrongBase = weights({1.0f, 1.0f, 1.0f});
        UpdateContext c = context(0, 0);
        c.base = &wrongBase;
        const Status mismatched = rule->apply(server, weights({2.0f, 2.0f}), c);
        QVERIFY(!mismatched.ok());
        QVERIFY2(mismatched.error().contains(u"do not fit"), qPrintable(mismatched.error()));
        QCOMPARE(values(server), values(before));
    }
}

void TestAggregationRules::ruleStateSurvivesSaveAndLoad()
{
    // A restart between two updates of a buffer (and after a momentum step) continues exactly.
    const AggregationSpec spec = pseudo(AggregationSpec::Rule::DelayedNesterov, 2, 1.0, 0.5);
    auto first = AggregationRule::create(spec);
    TensorBundle server = weights({0.0f, 0.0f});
    const TensorBundle base = weights({0.0f, 0.0f});
    UpdateContext c = context(0, 0);
    c.base = &base;
    for (const auto& update : {weights({2.0f, 0.0f}), weights({0.0f, 4.0f}), weights({2.0f, 2.0f})})
        QVERIFY(first->apply(server, update, c).ok());
    auto second = AggregationRule::create(spec);
    QVERIFY(second->loadState(first->saveState(), server).ok());
    TensorBundle copy = server;
    QVERIFY(first->apply(server, weights({0.0f, 0.0f}), c).ok());
    QVERIFY(second->apply(copy, weights({0.0f, 0.0f}), c).ok());
    QCOMPARE(values(copy), values(server));
    QCOMPARE(values(copy), (std::vector<float>{3.25f, 5.0f}));
    // State that does not fit the weights is refused.
    auto third = AggregationRule::create(spec);
    QVERIFY(!third->loadState(first->saveState(), weights({0.0f, 0.0f, 0.0f})).ok());
}

void TestAggregationRules::refusedFoldLeavesTheRuleStateAlone()
{
    // FedBuff with K = 2: a NaN update refused at its fold must not sit in the buffer.
    std::unique_ptr<AggregationRule> rule = AggregationRule::create(pseudo(AggregationSpec::Rule::FedBuff, 2, 1.0));
    TensorBundle server = weights({1.0f, 1.0f});
    const TensorBundle base = weights({1.0f, 1.0f});
    UpdateContext c = context(0, 0);
    c.base = &base;
    UpdateBound steps;
    const Status refused =
        WeightsKeeper::fold(server, rule, steps, weights({std::numeric_limits<float>::quiet_NaN(), 1.0f}), c, false);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"NaN or infinite"), qPrintable(refused.error()));
    QCOMPARE(static_cast<FedBuff&>(*rule).buffered(), 0);
    QVERIFY(WeightsKeeper::fold(server, rule, steps, weights({3.0f, 1.0f}), c, false).ok());
    QCOMPARE(static_cast<FedBuff&>(*rule).buffered(), 1);
    QVERIFY(WeightsKeeper::fold(server, rule, steps, weights({1.0f, 5.0f}), c, false).ok());
    QCOMPARE(values(server), (std::vector<float>{2.0f, 3.0f}));
}

void TestAggregationRules::honestBufferedStepsPassTheFold()
{
    // A buffering rule moves the server by nothing, then by a whole mean change; with momentum 0.9 its steps grow
    // to several times one upload's. None of that is a reason to refuse: 40 honest updates all fold in.
    for (const AggregationSpec& spec : {pseudo(AggregationSpec::Rule::FedBuff, 4, 1.0),
                                        pseudo(AggregationSpec::Rule::DelayedNesterov, 4, 1.0, 0.9)}) {
        std::unique_ptr<AggregationRule> rule = AggregationRule::create(spec);
        TensorBundle server = weights({0.0f, 0.0f});
        UpdateBound steps;
        for (int i = 0; i < 40; ++i) {
            const TensorBundle base = server;
            UpdateContext c = context(i, i);
            c.base = &base;
            const float x = values(server)[0];
            const Status folded = WeightsKeeper::fold(server, rule, steps, weights({x + 0.1f, x - 0.1f}), c, false);
            QVERIFY2(folded.ok(), qPrintable(QStringLiteral("%1, update %2: %3").arg(rule->name()).arg(i).arg(folded.error())));
        }
    }
}

void TestAggregationRules::adaptiveNesterovTakesItsPeriodFromTheAgentsTraining()
{
    // server_lr 1, momentum 0.5: the learning rate is min(1, 0.5 (K + 1) / 2).
    AggregationSpec spec = pseudo(AggregationSpec::Rule::AdaptiveNesterov, 4, 1.0, 0.5);
    // One agent: K = 1, lr 0.5. d = (2, 0): server + 0.5 d = (1, 0); m = d; server + 0.5 * 0.5 m = (1.5, 0).
    // At steady state (m = d) a round moves the weights by lr / (1 - b) = 1 times the change: the agent's own.
    auto alone = AggregationRule::create(spec);
    QCOMPARE(alone->name(), QStringLiteral("adaptive-nesterov"));
    TensorBundle server = weights({0.0f, 0.0f});
    const TensorBundle base = weights({0.0f, 0.0f});
    UpdateContext c = context(0, 0);
    c.base = &base;
    c.concurrency = 1;
    QVERIFY(alone->apply(server, weights({2.0f, 0.0f}), c).ok());
    QCOMPARE(values(server), (std::vector<float>{1.5f, 0.0f}));
    // Two agents: K = 2 whatever the spec's buffer says, lr 0.75. d1 = (2, 0): (0.75, 0); d2 = (0, 4):
    // (0.75, 1.5); m = mean = (1, 2); server + 0.75 * 0.5 m = (1.125, 2.25).
    auto pair = AggregationRule::create(spec);
    TensorBundle two = weights({0.0f, 0.0f});
    c.concurrency = 2;
    QVERIFY(pair->apply(two, weights({2.0f, 0.0f}), c).ok());
    QCOMPARE(values(two), (std::vector<float>{0.75f, 0.0f}));
    QVERIFY(pair->apply(two, weights({0.0f, 4.0f}), c).ok());
    QCOMPARE(values(two), (std::vector<float>{1.125f, 2.25f}));
    // Four agents: (1 - 0.5) 5 / 2 = 1.25 > server_lr: the spec's 1 holds, exactly delayed Nesterov with K = 4.
    auto four = AggregationRule::create(spec);
    auto delayed = AggregationRule::create(pseudo(AggregationSpec::Rule::DelayedNesterov, 4, 1.0, 0.5));
    TensorBundle a = weights({0.0f, 0.0f}), b = weights({0.0f, 0.0f});
    c.concurrency = 4;
    for (const auto& update : {weights({2.0f, 0.0f}), weights({0.0f, 4.0f}), weights({2.0f, 2.0f}), weights({1.0f, 1.0f})}) {
        QVERIFY(four->apply(a, update, c).ok());
        QVERIFY(delayed->apply(b, update, c).ok());
    }
    QCOMPARE(values(a), values(b));
}

void TestAggregationRules::sparsePublicationMovesTheLargestGaps()
{
    TensorBundle server;
    const std::vector<float> target{1, 2, 3, 4, 5, 6, 7, 8};
    const std::vector<qint64> counter{42};
    QVERIFY(server.addValues<float>(QStringLiteral("w"), DType::F32, {8}, target).ok());
    QVERIFY(server.addValues<qint64>(QStringLiteral("n"), DType::I64, {1}, counter).ok());
    TensorBundle published;
    const std::vector<float> held{1, 0, 3, 0, 5, 6.5f, 0, 8}; // lags by 2, 4, 0.5 and 7 at 1, 3, 5 and 6
    const std::vector<qint64> oldCounter{40};
    QVERIFY(published.addValues<float>(QStringLiteral("w"), DType::F32, {8}, held).ok());
    QVERIFY(published.addValues<qint64>(QStringLiteral("n"), DType::I64, {1}, oldCounter).ok());

    DownloadSpec quarter;
    quarter.density = 0.25; // two of eight values a publication
    WeightsKeeper::track(published, server, quarter);
    const auto w = published.values<float>(*published.find(QStringLiteral("w")));
    QCOMPARE(std::vector<float>(w.begin(), w.end()), (std::vector<float>{1, 0, 3, 4, 5, 6.5f, 7, 8}));
    QCOMPARE(published.values<qint64>(*published.find(QStringLiteral("n")))[0], 42); // other dtypes whole
    WeightsKeeper::track(published, server, quarter);
    const auto again = published.values<float>(*published.find(QStringLiteral("w")));
    QCOMPARE(std::vector<float>(again.begin(), again.end()), target); // the rest follows

    // Nothing published yet: every value, on bfloat16's grid (1 to 8 lie on it; 0.1 does not).
    TensorBundle none;
    WeightsKeeper::track(none, server, quarter);
    QCOMPARE(none.buffer(), server.buffer());
    TensorBundle tenth;
    QVERIFY(tenth.addValues<float>(QStringLiteral("w"), DType::F32, {1}, std::vector<float>{0.1f}).ok());
    TensorBundle rounded;
    WeightsKeeper::track(rounded, tenth, quarter);
    QCOMPARE(rounded.values<float>(rounded.entries().first())[0], 0.10009765625f);
    // Density 1: the server copy itself, not rounded.
    TensorBundle dense = published;
    WeightsKeeper::track(dense, tenth, DownloadSpec{});
    QCOMPARE(dense.buffer(), tenth.buffer());
}

void TestAggregationRules::averageFollowsTheServerCopy()
{
    // vc-asgd at alpha 0.5 with ema_decay 0.75: the server copy folds as always; the average is the
    // bias-corrected mean of the copies the folds left, sum 0.25 * 0.75^(t - i) w_i / (1 - 0.75^t), so the
    // weights before the first fold carry no weight in it.
    AggregationSpec spec;
    spec.alphaPerEpoch = false;
    spec.alpha = 0.5;
    spec.emaDecay = 0.75;
    std::unique_ptr<AggregationRule> rule = AggregationRule::create(spec);
    QCOMPARE(rule->name(), QStringLiteral("vc-asgd"));
    QVERIFY(!rule->averaged());
    QVERIFY(!AggregationRule::create(AggregationSpec())->averaged());
    const auto near = [](const TensorBundle& bundle, std::vector<float> expected) {
        const std::vector<float> got = values(bundle);
        for (size_t i = 0; i < expected.size(); ++i)
            if (std::abs(got[i] - expected[i]) > 1e-5f)
                return false;
        return got.size() == expected.size();
    };
    TensorBundle server = weights({0.0f, 0.0f}, 3);
    QVERIFY(rule->apply(server, weights({4.0f, 8.0f}, 5), context(0, 0)).ok());
    QCOMPARE(values(server), (std::vector<float>{2.0f, 4.0f}));
    QVERIFY(rule->averaged());
    QCOMPARE(values(*rule->averaged()), (std::vector<float>{2.0f, 4.0f})); // w_1 whole
    QCOMPARE(counter(*rule->averaged()), 5);
    QVERIFY(rule->apply(server, weights({6.0f, 12.0f}), context(1, 1)).ok());
    QCOMPARE(values(server), (std::vector<float>{4.0f, 8.0f}));
    // (0.25 * 0.75 * (2, 4) + 0.25 * (4, 8)) / (1 - 0.75^2) = (3.142857, 6.285714)
    QVERIFY(near(*rule->averaged(), {3.142857f, 6.285714f}));
    QVERIFY(rule->apply(server, weights({4.0f, 8.0f}), context(2, 2)).ok());
    // (0.25 * 0.5625 * (2, 4) + 0.25 * 0.75 * (4, 8) + 0.25 * (4, 8)) / (1 - 0.75^3) = (3.513514, 7.027027)
    QVERIFY(near(*rule->averaged(), {3.513514f, 7.027027f}));

    // Around a pseudo-gradient rule it answers as that rule does.
    AggregationSpec buffered = pseudo(AggregationSpec::Rule::FedBuff, 2, 1.0);
    buffered.emaDecay = 0.9;
    const auto fedBuff = AggregationRule::create(buffered);
    QCOMPARE(fedBuff->name(), QStringLiteral("fedbuff"));
    QVERIFY(fedBuff->needsBase());
    QVERIFY(!fedBuff->boundsFoldSteps());
    QVERIFY(fedBuff->noiseScale());
}

void TestAggregationRules::averageSurvivesItsStateAndRefusedFolds()
{
    AggregationSpec spec = pseudo(AggregationSpec::Rule::FedBuff, 2, 1.0);
    spec.emaDecay = 0.5;
    std::unique_ptr<AggregationRule> first = AggregationRule::create(spec);
    TensorBundle server = weights({0.0f, 0.0f});
    const TensorBundle base = weights({0.0f, 0.0f});
    UpdateContext c = context(0, 0);
    c.base = &base;
    UpdateBound steps;
    // K = 2: the first update is buffered (the server copy, and so the average, stay at 0); the second steps
    // by the mean (1, 2), and the average moves by (1 - 0.5) / (1 - 0.5^2) = 2/3 of the way to it.
    QVERIFY(WeightsKeeper::fold(server, first, steps, weights({2.0f, 0.0f}), c, false).ok());
    QVERIFY(WeightsKeeper::fold(server, first, steps, weights({0.0f, 4.0f}), c, false).ok());
    QCOMPARE(values(server), (std::vector<float>{1.0f, 2.0f}));
    const std::vector<float> twoThirds = values(*first->averaged());
    QVERIFY(std::abs(twoThirds[0] - 2.0f / 3) < 1e-6f && std::abs(twoThirds[1] - 4.0f / 3) < 1e-6f);
    // A refused fold leaves the average as it was.
    QVERIFY(!WeightsKeeper::fold(server, first, steps,
                                 weights({std::numeric_limits<float>::quiet_NaN(), 0.0f}), c, false)
                 .ok());
    QCOMPARE(values(*first->averaged()), twoThirds);

    // The state holds the rule's own tensors and the average; a restart continues exactly.
    const TensorBundle state = first->saveState();
    QVERIFY(state.find(QStringLiteral("count")));
    QVERIFY(state.find(QStringLiteral("average.w")));
    QVERIFY(state.find(QStringLiteral("average_folds")));
    QCOMPARE(AveragedRule::averageIn(state, server)->size(), server.size());
    auto second = AggregationRule::create(spec);
    QVERIFY(second->loadState(state, server).ok());
    QCOMPARE(values(*second->averaged()), twoThirds);
    TensorBundle copy = server;
    for (const auto& update : {weights({3.0f, 2.0f}), weights({1.0f, 4.0f})}) {
        QVERIFY(WeightsKeeper::fold(server, first, steps, update, c, false).ok());
        QVERIFY(WeightsKeeper::fold(copy, second, steps, update, c, false).ok());
    }
    QCOMPARE(values(copy), values(server));
    QCOMPARE(values(*second->averaged()), values(*first->averaged()));

    // State written without an average starts it afresh at the next fold; an average that does not fit, or
    // comes without its fold count, is refused and changes nothing.
    auto fresh = AggregationRule::create(spec);
    QVERIFY(
        fresh
            ->loadState(AggregationRule::create(pseudo(AggregationSpec::Rule::FedBuff, 2, 1.0))->saveState(),
                        server)
            .ok());
    QVERIFY(!fresh->averaged());
    const Status misfit = fresh->loadState(state, weights({0.0f, 0.0f, 0.0f}));
    QVERIFY(!misfit.ok());
    QVERIFY2(misfit.error().contains(u"average."), qPrintable(misfit.error()));
    TensorBundle uncounted;
    for (const auto& entry : state.entries())
        if (entry.name != u"average_folds")
            QVERIFY(uncounted.add(entry.name, entry.dtype, entry.shape, state.data(entry)).ok());
    const Status noCount = fresh->loadState(uncounted, server);
    QVERIFY(!noCount.ok());
    QVERIFY2(noCount.error().contains(u"average_folds"), qPrintable(noCount.error()));
    QVERIFY(!fresh->averaged());
}

QTEST_GUILESS_MAIN(TestAggregationRules)
#include "TestAggregationRules.moc"
