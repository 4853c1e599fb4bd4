// The arithmetic of every aggregation rule against hand-computed values, and what a rule refuses.

#include "aggregation/AggregationRule.h"
#include "aggregation/FedAsync.h"
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
    void rulesAreCreatedFromTheSpec();
    void vcAsgdKeepsAlphaOfTheServer();
    void stalenessFunctions_data();
    void stalenessFunctions();
    void fedAsyncDampsStaleUpdates();
    void integerBuffersTakeTheLargerValue();
    void mismatchedWeightsAreRefused();
    void nonFiniteFoldIsRefused();
};

void TestAggregationRules::rulesAreCreatedFromTheSpec()
{
    QCOMPARE(AggregationRule::create(AggregationSpec())->name(), QStringLiteral("vc-asgd"));
    QCOMPARE(AggregationRule::create(fedAsync(0.5, StalenessSpec::Function::Hinge))->name(), QStringLiteral("fedasync"));
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
            server, *rule, steps, weights({std::numeric_limits<float>::quiet_NaN(), 1.0f}), context(0, 0), false);
        QVERIFY(!folded.ok());
        QVERIFY2(folded.error().contains(u"NaN or infinite"), qPrintable(folded.error()));
        QCOMPARE(values(server), (std::vector<float>{1.0f, 1.0f}));
    }
}

QTEST_GUILESS_MAIN(TestAggregationRules)
#include "TestAggregationRules.moc"
