// What sends agents where they help: the gradient noise scale measured from pseudo-gradients whose noise is
// known, the useful agents that follow, and the allocation of agents to jobs on scripted jobs.

#include "aggregation/AggregationRule.h"
#include "aggregation/NoiseScale.h"
#include "jobs/JobWidth.h"
#include "scheduling/JobAllocation.h"

#include <QTest>

#include <cmath>
#include <random>
#include <vector>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestGoodput : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void noiseScaleOfExactRounds();
    void noiseScaleOfSyntheticPseudoGradients_data();
    void noiseScaleOfSyntheticPseudoGradients();
    void noiseScaleSurvivesTheRulesState();
    void adaScaleGrowsTheStepByTheRoundsGain();
    void usefulAgentsFollowTheNoiseScale();
    void allocationSendsAgentsWhereTheyHelp();
};

void TestGoodput::noiseScaleOfExactRounds()
{
    // Rounds of K = 4 whose changes have |G|^2 = 1 and tr(Sigma) = 3 in expectation: S = |G|^2 + tr(Sigma) = 4 and
    // M = |G|^2 + tr(Sigma) / K = 1.75. The estimators give back 1 and 3: B = 3.
    NoiseScale noise;
    QVERIFY(!noise.value());
    noise.addRound(4.0, 1.75, 4);
    noise.addRound(4.0, 1.75, 4);
    QVERIFY(!noise.value()); // fewer than kMinRounds
    noise.addRound(4.0, 1.75, 4);
    QVERIFY(std::abs(*noise.value() - 3.0) < 1e-12);
    // A round of one change, or a non-finite one, tells nothing.
    noise.addRound(100.0, 100.0, 1);
    noise.addRound(NAN, 1.0, 4);
    QCOMPARE(noise.rounds(), 3);
    // Noise alone (the mean as small as the noise of a mean: |G|^2 estimated <= 0): as wide as it gets.
    NoiseScale flat;
    for (int i = 0; i < 3; ++i)
        flat.addRound(4.0, 1.0, 4);
    QCOMPARE(*flat.value(), NoiseScale::kMax);
}

void TestGoodput::noiseScaleOfSyntheticPseudoGradients_data()
{
    QTest::addColumn<double>("sigma");
    QTest::addColumn<int>("buffer");
    // D = 4000 values, G = 0.01 in each (|G|^2 = 0.4), noise sigma per value: B = D sigma^2 / |G|^2.
    QTest::newRow("B = 1, K = 4") << 0.01 << 4;
    QTest::newRow("B = 4, K = 4") << 0.02 << 4;
    QTest::newRow("B = 16, K = 8") << 0.04 << 8;
}

void TestGoodput::noiseScaleOfSyntheticPseudoGradients()
{
    QFETCH(double, sigma);
    QFETCH(int, buffer);
    constexpr int kValues = 4000;
    constexpr double kSignal = 0.01;
    const double expected = kValues * sigma * sigma / (kValues * kSignal * kSignal);

    AggregationSpec spec;
    spec.rule = AggregationSpec::Rule::FedBuff;
    spec.alphaPerEpoch = false;
    spec.buffer = buffer;
    spec.serverLr = 1.0;
    spec.staleness.function = StalenessSpec::Function::Constant;
    auto rule = AggregationRule::create(spec);
    QVERIFY(rule->noiseScale());

    const std::vector<float> zeros(kValues, 0.0f);
    TensorBundle base;
    QVERIFY(base.addValues<float>(QStringLiteral("w"), DType::F32, {kValues}, zeros).ok());
    TensorBundle server = base;
    std::mt19937 random(7);
    std::normal_distribution<double> noise(0.0, sigma);
    UpdateContext context;
    context.base = &base;
    // 400 rounds: the smoothed estimate keeps about the last ten, so it is read as the mean over the last 300.
    double sum = 0;
    int count = 0;
    for (int update = 0; update < 400 * buffer; ++update) {
        std::vector<float> change(kValues);
        for (float& value : change)
            value = float(kSignal + noise(random));
        TensorBundle client;
        QVERIFY(client.addValues<float>(QStringLiteral("w"), DType::F32, {kValues}, change).ok());
        QVERIFY(rule->apply(server, client, context).ok());
        if ((update + 1) % buffer == 0 && update >= 100 * buffer) {
            sum += *rule->noiseScale()->value();
            ++count;
        }
    }
    const double measured = sum / count;
    QVERIFY2(std::abs(measured - expected) < 0.2 * expected,
             qPrintable(QStringLiteral("measured %1, expected %2").arg(measured).arg(expected)));
}

void TestGoodput::noiseScaleSurvivesTheRulesState()
{
    AggregationSpec spec;
    spec.rule = AggregationSpec::Rule::AdaptiveNesterov;
    spec.alphaPerEpoch = false;
    spec.staleness.function = StalenessSpec::Function::Constant;
    auto rule = AggregationRule::create(spec);
    TensorBundle base;
    const std::vector<float> zeros(3, 0.0f);
    QVERIFY(base.addValues<float>(QStringLiteral("w"), DType::F32, {3}, zeros).ok());
    TensorBundle server = base;
    UpdateContext context;
    context.base = &base;
    context.concurrency = 2;
    for (int i = 0; i < 9; ++i) { // four rounds of two, and one buffered change
        const std::vector<float> change{1.0f, float(i % 2), 0.5f};
        TensorBundle client;
        QVERIFY(client.addValues<float>(QStringLiteral("w"), DType::F32, {3}, change).ok());
        QVERIFY(rule->apply(server, client, context).ok());
    }
    QCOMPARE(rule->noiseScale()->rounds(), 4);
    const TensorBundle state = rule->saveState();
    auto again = AggregationRule::create(spec);
    QVERIFY(again->loadState(state, server).ok());
    QCOMPARE(again->noiseScale()->rounds(), 4);
    QCOMPARE(*again->noiseScale()->value(), *rule->noiseScale()->value());
    // The buffered change's norm came back too: the next round measures what the first rule would have.
    const std::vector<float> last{1.0f, 1.0f, 0.5f};
    TensorBundle client;
    QVERIFY(client.addValues<float>(QStringLiteral("w"), DType::F32, {3}, last).ok());
    TensorBundle s1 = server, s2 = server;
    QVERIFY(rule->apply(s1, client, context).ok());
    QVERIFY(again->apply(s2, client, context).ok());
    QCOMPARE(*again->noiseScale()->value(), *rule->noiseScale()->value());
}

void TestGoodput::adaScaleGrowsTheStepByTheRoundsGain()
{
    // Momentum 0, server_lr 1, a measured noise scale of 3: a round of two gains (1 + 3) / (1 + 3 / 2) = 1.6,
    // so two changes of +1 move the weights by 1.6 (their mean times 1.6). Without adascale the step is
    // min(1, (1 - 0)(2 + 1) / 2) = 1: their mean.
    const auto roundOfTwo = [](bool adaScale) {
        AggregationSpec spec;
        spec.rule = AggregationSpec::Rule::AdaptiveNesterov;
        spec.alphaPerEpoch = false;
        spec.serverLr = 1.0;
        spec.momentum = 0.0;
        spec.staleness.function = StalenessSpec::Function::Constant;
        spec.adaScale = adaScale;
        auto rule = AggregationRule::create(spec);
        TensorBundle base;
        const std::vector<float> zero{0.0f};
        if (!base.addValues<float>(QStringLiteral("w"), DType::F32, {1}, zero).ok())
            return -1.0;
        TensorBundle state;
        const std::vector<qint64> count{0};
        const std::vector<double> noise{1.0, 3.0, 5.0}; // signal, noise, rounds: B = 3
        if (!state.addValues<qint64>(QStringLiteral("count"), DType::I64, {}, count).ok() ||
            !state.addValues<double>(NoiseScale::stateName(), DType::F64, {3}, noise).ok() ||
            !rule->loadState(state, base).ok())
            return -1.0;
        TensorBundle server = base;
        UpdateContext context;
        context.base = &base;
        context.concurrency = 2;
        const std::vector<float> one{1.0f};
        TensorBundle client;
        if (!client.addValues<float>(QStringLiteral("w"), DType::F32, {1}, one).ok())
            return -1.0;
        for (int i = 0; i < 2; ++i)
            if (!rule->apply(server, client, context).ok())
                return -1.0;
        return double(server.values<float>(*server.find(QStringLiteral("w")))[0]);
    };
    QVERIFY(std::abs(roundOfTwo(true) - 1.6) < 1e-6);
    QVERIFY(std::abs(roundOfTwo(false) - 1.0) < 1e-6);
}

void TestGoodput::usefulAgentsFollowTheNoiseScale()
{
    JobWidth width;
    QVERIFY(!width.usefulAgents());
    QVERIFY(width.toJson().isEmpty());
    width.measured(10, 5.6, 1000);
    QCOMPARE(*width.usefulAgents(), 6);
    width.measured(20, 0.3, 2000);
    QCOMPARE(*width.usefulAgents(), JobWidth::kMinAgents); // two keep the measurement going
    QCOMPARE(width.history.size(), size_t(2));
    for (int i = 0; i < int(JobWidth::kHistory) + 5; ++i)
        width.measured(30 + i, 3.0, 3000 + i);
    QCOMPARE(width.history.size(), JobWidth::kHistory);
    QCOMPARE(width.toJson().value(QStringLiteral("useful_agents")).toInt(), 3);
}

void TestGoodput::allocationSendsAgentsWhereTheyHelp()
{
    using JobAllocation::Candidate;
    // Gains by hand: B / ((n + B)(n + 1 + B)).
    QVERIFY(std::abs(JobAllocation::gain(Candidate{1, 1.0, 0, 4.0, {}}) - 4.0 / (4 * 5)) < 1e-12);
    QVERIFY(std::abs(JobAllocation::gain(Candidate{1, 2.0, 3, 1.0, {}}) - 2.0 * 1 / (4 * 5)) < 1e-12);
    QCOMPARE(JobAllocation::gain(Candidate{1, 1.0, 2, 4.0, 2}), 0.0); // at its cap

    // A narrow job (B = 1) with one agent and a wide one (B = 16) with three: the narrow job's second agent adds
    // 1 / (2 * 3) = 0.167, the wide job's fourth 16 / (19 * 20) = 0.042.
    std::vector<Candidate> jobs{{1, 1.0, 1, 1.0, {}}, {2, 1.0, 3, 16.0, {}}};
    QCOMPARE(JobAllocation::order(jobs), (std::vector<qint64>{1, 2}));
    // With five the narrow job's next agent adds 1 / (6 * 7) = 0.024, the wide one's 16 / (19 * 20) = 0.042.
    jobs[0].agents = 5;
    QCOMPARE(JobAllocation::order(jobs), (std::vector<qint64>{2, 1}));
    // Priority 4 turns it back.
    jobs[0].priority = 4.0;
    QCOMPARE(JobAllocation::order(jobs), (std::vector<qint64>{1, 2}));
    // A job at its cap is not offered; equal gains go to the older job; an unmeasured job counts as B = 4.
    jobs[0].cap = 5;
    QCOMPARE(JobAllocation::order(jobs), (std::vector<qint64>{2}));
    std::vector<Candidate> fresh{{7, 1.0, 0, {}, {}}, {3, 1.0, 0, 4.0, {}}};
    QCOMPARE(JobAllocation::order(fresh), (std::vector<qint64>{3, 7}));

    // Six agents arriving one by one at a job capped at 2 and an open one: two and four.
    std::vector<Candidate> two{{1, 1.0, 0, {}, 2}, {2, 1.0, 0, {}, {}}};
    for (int agent = 0; agent < 6; ++agent) {
        const std::vector<qint64> order = JobAllocation::order(two);
        QVERIFY(!order.empty());
        ++two[order.front() == 1 ? 0 : 1].agents;
    }
    QCOMPARE(two[0].agents, 2);
    QCOMPARE(two[1].agents, 4);
}

QTEST_GUILESS_MAIN(TestGoodput)
#include "TestGoodput.moc"
