// gleaner-sim on a small slice of Fashion-MNIST: reproducible for a seed, the JSON the lab's scripts read,
// accuracy that rises, work lost to preemption re-issued, and options checked with messages naming them.

#include "sim/Simulation.h"

#include "TestSupport.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSet>
#include <QTemporaryDir>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator::sim;

class TestSimulation : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void sameSeedGivesIdenticalJson();
    void jsonHasItsShapeAndAccuracyRises();
    void baselineIsReportedTheSameWay();
    void widthIsMeasuredAndReported();
    void preemptedWorkIsReissuedAfterItsDeadline();
    void handedBackWorkIsResumedAtOnce();
    void jitterBreaksTheStep();
    void badOptionsAreNamed_data();
    void badOptionsAreNamed();
    void speedsAreDrawnReproducibly();

private:
    SimOptions options(int agents, const QStringList& extra = {}) const;
    QTemporaryDir m_dir;
    QString m_job;
};

void TestSimulation::initTestCase()
{
    if (!QFile::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
        QSKIP("Debian's dataset-fashion-mnist is not installed (installers/install-deps.sh installs it)");
    m_job = m_dir.filePath(QStringLiteral("job.json"));
    QFile file(m_job);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(R"({"name": "sim-test", "dataset": {"format": "fashion-mnist"}, "limit_train": 1000,
        "model": {"arch": "mlp", "input_shape": [1, 28, 28], "num_classes": 10, "hidden": [32]},
        "shards": 5, "local_epochs": 1, "batch_size": 20, "optimizer": {"name": "adam", "lr": 0.002},
        "aggregation": {"rule": "vc-asgd", "alpha": "epoch"}, "target_accuracy": 0.99, "max_epochs": 2,
        "deadline_seconds": 10, "seed": 3})");
}

SimOptions SimulationOptions(const QString& job, int agents, const QStringList& extra)
{
    auto parsed = SimOptions::parse(QStringList{job, QStringLiteral("--agents"), QString::number(agents)} + extra);
    if (!parsed)
        qFatal("%s", qPrintable(parsed.error()));
    return *parsed;
}

SimOptions TestSimulation::options(int agents, const QStringList& extra) const
{
    return SimulationOptions(m_job, agents, extra);
}

void TestSimulation::sameSeedGivesIdenticalJson()
{
    const SimOptions run = options(3, {QStringLiteral("--speeds"), QStringLiteral("lognormal:0.5"),
                                       QStringLiteral("--rule"), QStringLiteral("fedbuff"), QStringLiteral("--seed"),
                                       QStringLiteral("11")});
    auto first = Simulation::run(run);
    QVERIFY2(first.ok(), qPrintable(first.error()));
    auto second = Simulation::run(run);
    QVERIFY2(second.ok(), qPrintable(second.error()));
    QCOMPARE(QJsonDocument(second->toJson(run)).toJson(), QJsonDocument(first->toJson(run)).toJson());
    QCOMPARE(second->toCsv(), first->toCsv());
}

void TestSimulation::jsonHasItsShapeAndAccuracyRises()
{
    const SimOptions run = options(2);
    auto report = Simulation::run(run);
    QVERIFY2(report.ok(), qPrintable(report.error()));
    const QJsonObject json = report->toJson(run);
    QCOMPARE(json.value(u"rule").toString(), QStringLiteral("vc-asgd"));
    QCOMPARE(json.value(u"agents").toInt(), 2);
    QCOMPARE(json.value(u"speeds").toArray(), (QJsonArray{1.0, 1.0}));
    const QJsonArray epochs = json.value(u"epochs").toArray();
    QCOMPARE(epochs.size(), 2);
    double lastSeconds = 0.0;
    for (int e = 0; e < epochs.size(); ++e) {
        const QJsonObject epoch = epochs.at(e).toObject();
        QCOMPARE(epoch.value(u"epoch").toInt(), e + 1);
        QVERIFY(epoch.value(u"sim_seconds").toDouble() > lastSeconds);
        lastSeconds = epoch.value(u"sim_seconds").toDouble();
        // Every shard of every epoch folded in once: 1000 samples an epoch.
        QCOMPARE(epoch.value(u"samples").toInteger(), qint64(1000) * (e + 1));
        QVERIFY(epoch.contains(u"accuracy") && epoch.contains(u"loss"));
    }
    // Two agents of speed 1 at 1000 samples a second: an epoch of 1000 samples takes about half a second.
    QVERIFY2(std::abs(epochs.at(0).toObject().value(u"sim_seconds").toDouble() - 0.6) < 0.25,
             qPrintable(QString::number(epochs.at(0).toObject().value(u"sim_seconds").toDouble())));
    const QJsonArray validations = json.value(u"validations").toArray();
    QVERIFY(validations.size() >= 4);
    const double first = validations.first().toObject().value(u"accuracy").toDouble();
    const double best = json.value(u"best_accuracy").toDouble();
    QVERIFY2(best > first + 0.05 && best > 0.5, qPrintable(QStringLiteral("first %1, best %2").arg(first).arg(best)));
    QCOMPARE(report->updates.size(), size_t(10));
    QVERIFY(report->toCsv().startsWith("sim_seconds,agent,staleness,folded,accuracy,upload_bytes\n"));
}

void TestSimulation::baselineIsReportedTheSameWay()
{
    SimOptions run = options(1, {QStringLiteral("--baseline")});
    auto report = Simulation::run(run);
    QVERIFY2(report.ok(), qPrintable(report.error()));
    const QJsonObject json = report->toJson(run);
    QCOMPARE(json.value(u"rule").toString(), QStringLiteral("baseline"));
    const QJsonArray epochs = json.value(u"epochs").toArray();
    QCOMPARE(epochs.size(), 2);
    // One agent of speed 1: an epoch of 1000 samples is one simulated second.
    QCOMPARE(epochs.at(0).toObject().value(u"samples").toInteger(), qint64(1000));
    QCOMPARE(epochs.at(0).toObject().value(u"sim_seconds").toDouble(), 1.0);
    QCOMPARE(epochs.at(1).toObject().value(u"samples").toInteger(), qint64(2000));
    QVERIFY(json.value(u"best_accuracy").toDouble() > 0.5);
}

void TestSimulation::widthIsMeasuredAndReported()
{
    // Rounds of two changes (fedbuff, buffer 2): ten updates make five rounds, enough for a measurement,
    // which the JSON reports with its history as job status does.
    const SimOptions run =
        options(4, {QStringLiteral("--rule"), QStringLiteral(R"({"rule":"fedbuff","buffer":2})")});
    auto report = Simulation::run(run);
    QVERIFY2(report.ok(), qPrintable(report.error()));
    const QJsonObject width = report->toJson(run).value(u"width").toObject();
    QVERIFY2(width.value(u"noise_scale").isDouble(), qPrintable(QJsonDocument(width).toJson()));
    QVERIFY(width.value(u"noise_scale").toDouble() >= 0);
    QVERIFY(width.value(u"useful_agents").toInt() >= 2);
    const QJsonArray history = width.value(u"history").toArray();
    QCOMPARE(history.size(), 5 - 2); // one a round from the third on
    QVERIFY(history.last().toObject().value(u"version").toInteger() <= 10);
    // A rule that does not average pseudo-gradients measures nothing.
    auto plain = Simulation::run(options(2));
    QVERIFY(plain.ok());
    QVERIFY(plain->toJson(options(2)).value(u"width").toObject().isEmpty());
}

void TestSimulation::preemptedWorkIsReissuedAfterItsDeadline()
{
    const SimOptions run = options(2, {QStringLiteral("--preemption"), QStringLiteral("0.4"), QStringLiteral("--seed"),
                                       QStringLiteral("5"), QStringLiteral("--on-preempt"), QStringLiteral("keep")});
    auto report = Simulation::run(run);
    QVERIFY2(report.ok(), qPrintable(report.error()));
    const QJsonArray epochs = report->toJson(run).value(u"epochs").toArray();
    QCOMPARE(epochs.size(), 2);
    QCOMPARE(epochs.at(1).toObject().value(u"samples").toInteger(), qint64(2000)); // nothing lost for good
    QVERIFY(report->toJson(run).value(u"preempted").toInteger() > 0);
    // A lost subtask waits for its lease's deadline (10 s) before another agent gets it.
    QVERIFY2(epochs.at(1).toObject().value(u"sim_seconds").toDouble() > 10.0,
             qPrintable(QString::number(epochs.at(1).toObject().value(u"sim_seconds").toDouble())));
}

// The same preemptions, handed back by the leaving agents: with their checkpoints nothing but the mini-batch in
// progress is redone and nothing waits for a deadline; bare, the work is redone at once.
void TestSimulation::handedBackWorkIsResumedAtOnce()
{
    const auto run = [&](const QString& onPreempt) {
        const SimOptions o = options(2, {QStringLiteral("--preemption"), QStringLiteral("0.4"), QStringLiteral("--seed"),
                                         QStringLiteral("5"), QStringLiteral("--on-preempt"), onPreempt});
        auto report = Simulation::run(o);
        return report ? report->toJson(o) : QJsonObject{{QStringLiteral("error"), report.error()}};
    };
    const QJsonObject keep = run(QStringLiteral("keep"));
    const QJsonObject bare = run(QStringLiteral("bare"));
    const QJsonObject handBack = run(QStringLiteral("hand-back"));
    for (const QJsonObject* report : {&keep, &bare, &handBack}) {
        QVERIFY2(!report->contains(u"error"), qPrintable(report->value(u"error").toString()));
        QCOMPARE(report->value(u"epochs").toArray().at(1).toObject().value(u"samples").toInteger(), qint64(2000));
        QCOMPARE(report->value(u"preempted").toInteger(), keep.value(u"preempted").toInteger()); // the same draws
    }
    QVERIFY(keep.value(u"preempted").toInteger() > 0);
    QCOMPARE(handBack.value(u"handed_back").toInteger(), handBack.value(u"preempted").toInteger());
    QVERIFY(handBack.value(u"resumed_leases").toInteger() > 0);
    QCOMPARE(bare.value(u"resumed_leases").toInteger(), 0);
    QCOMPARE(keep.value(u"handed_back").toInteger(), 0);
    const auto lost = [](const QJsonObject& r) { return r.value(u"lost_train_seconds").toDouble(); };
    QVERIFY2(lost(handBack) < lost(bare) / 5, qPrintable(QStringLiteral("%1 %2").arg(lost(handBack)).arg(lost(bare))));
    QCOMPARE(lost(bare), lost(keep));
    const auto end = [](const QJsonObject& r) {
        return r.value(u"epochs").toArray().at(1).toObject().value(u"sim_seconds").toDouble();
    };
    QVERIFY2(end(handBack) < 10.0 && end(bare) < 10.0 && end(keep) > 10.0,
             qPrintable(QStringLiteral("%1 %2 %3").arg(end(handBack)).arg(end(bare)).arg(end(keep))));
}

// Agents of one speed without jitter finish their subtasks at the same simulated moments; a pace that varies
// per subtask, as real machines' does, makes their uploads interleave.
void TestSimulation::jitterBreaksTheStep()
{
    const auto distinctTimes = [](const SimReport& report) {
        QSet<qint64> times;
        for (const SimUpdate& update : report.updates)
            times.insert(qRound64(update.seconds * 1000));
        return times.size();
    };
    auto inStep = Simulation::run(options(2, {QStringLiteral("--jitter"), QStringLiteral("0")}));
    QVERIFY2(inStep.ok(), qPrintable(inStep.error()));
    QCOMPARE(inStep->updates.size(), size_t(10));
    QCOMPARE(distinctTimes(*inStep), 5);
    auto jittered = Simulation::run(options(2, {QStringLiteral("--jitter"), QStringLiteral("0.2")}));
    QVERIFY2(jittered.ok(), qPrintable(jittered.error()));
    QCOMPARE(jittered->updates.size(), size_t(10));
    // (Subtasks of 0.2 simulated seconds, counted in milliseconds: two may still coincide by chance.)
    QVERIFY2(distinctTimes(*jittered) >= 8, qPrintable(QString::number(distinctTimes(*jittered))));
}

void TestSimulation::badOptionsAreNamed_data()
{
    QTest::addColumn<QStringList>("arguments");
    QTest::addColumn<QString>("message");
    QTest::newRow("no job") << QStringList{QStringLiteral("--agents"), QStringLiteral("2")} << QStringLiteral("no job file");
    QTest::newRow("zero agents") << QStringList{QStringLiteral("j.json"), QStringLiteral("--agents"), QStringLiteral("0")}
                                 << QStringLiteral("--agents: expected an integer from 1");
    QTest::newRow("speeds text") << QStringList{QStringLiteral("j.json"), QStringLiteral("--speeds"), QStringLiteral("fast")}
                                 << QStringLiteral("--speeds \"fast\"");
    QTest::newRow("too many speeds")
        << QStringList{QStringLiteral("j.json"), QStringLiteral("--agents"), QStringLiteral("1"), QStringLiteral("--speeds"),
                       QStringLiteral("1,2")}
        << QStringLiteral("2 speeds for 1 agents");
    QTest::newRow("unknown rule") << QStringList{QStringLiteral("j.json"), QStringLiteral("--rule"), QStringLiteral("fedavg")}
                                  << QStringLiteral("--rule.rule: expected one of");
    QTest::newRow("rule field") << QStringList{QStringLiteral("j.json"), QStringLiteral("--rule"),
                                               QStringLiteral(R"({"rule": "fedbuff", "momentum": 0.9})")}
                                << QStringLiteral("--rule.momentum: not used by the fedbuff rule");
    QTest::newRow("preemption 1") << QStringList{QStringLiteral("j.json"), QStringLiteral("--preemption"), QStringLiteral("1")}
                                  << QStringLiteral("--preemption: expected a number from 0 to 0.95");
    QTest::newRow("on-preempt") << QStringList{QStringLiteral("j.json"), QStringLiteral("--on-preempt"), QStringLiteral("wait")}
                                << QStringLiteral("--on-preempt: expected hand-back, bare or keep, got \"wait\"");
    QTest::newRow("jitter 1") << QStringList{QStringLiteral("j.json"), QStringLiteral("--jitter"), QStringLiteral("1")}
                              << QStringLiteral("--jitter: expected a number from 0 to 0.9");
    QTest::newRow("unknown option") << QStringList{QStringLiteral("j.json"), QStringLiteral("--fast")}
                                    << QStringLiteral("unknown option --fast");
    QTest::newRow("missing value") << QStringList{QStringLiteral("j.json"), QStringLiteral("--seed")}
                                   << QStringLiteral("--seed: expected a value");
}

void TestSimulation::badOptionsAreNamed()
{
    QFETCH(QStringList, arguments);
    QFETCH(QString, message);
    auto parsed = SimOptions::parse(arguments);
    QVERIFY(!parsed.ok());
    QVERIFY2(parsed.error().contains(message), qPrintable(parsed.error()));
}

void TestSimulation::speedsAreDrawnReproducibly()
{
    SimOptions run = options(8, {QStringLiteral("--speeds"), QStringLiteral("lognormal:1")});
    auto first = run.resolveSpeeds();
    QVERIFY(first.ok());
    QCOMPARE(first->size(), size_t(8));
    QCOMPARE(*run.resolveSpeeds(), *first);
    QVERIFY(*std::max_element(first->begin(), first->end()) > *std::min_element(first->begin(), first->end()));
    run.seed = 2;
    QVERIFY(*run.resolveSpeeds() != *first);
    SimOptions listed = options(4, {QStringLiteral("--speeds"), QStringLiteral("1,2")});
    QCOMPARE(*listed.resolveSpeeds(), (std::vector<double>{1, 2, 2, 2}));
}

QTEST_GUILESS_MAIN(TestSimulation)
#include "TestSimulation.moc"
