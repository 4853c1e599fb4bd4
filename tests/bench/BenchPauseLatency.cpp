// How fast `pause` takes effect: a daemon trains (two subtasks at once when the machine has two cores or
// more), a client subscribed to its control socket sends `pause` and times from the request sent to the
// `subtask` events showing every training worker paused; then `resume`, a second of training, and again.
// Prints the median and the maximum over N runs. Goal: under 1 s.
//   bench_pause_latency [--runs N] [--quick]
#include "DesktopSupport.h"
#include "E2eCluster.h"
#include "TestSupport.h"

#include "control/ControlConnection.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>
#include <QTest>
#include <QTextStream>
#include <QThread>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {

const char* const kName = "bench_pause_latency";

// The leases whose worker computes now (state training, past its first step).
QSet<QString> trainingLeases(const QJsonObject& status)
{
    QSet<QString> leases;
    for (const auto& value : status.value(QStringLiteral("subtasks")).toArray()) {
        const QJsonObject s = value.toObject();
        if (s.value(QStringLiteral("state")).toString() == u"training" &&
            s.value(QStringLiteral("step")).toInteger() > 0)
            leases.insert(s.value(QStringLiteral("lease_id")).toString());
    }
    return leases;
}

// Reads events until every lease in `leases` had a `subtask` event with `state`; false after `timeoutMs`.
bool awaitSubtaskState(agent::ControlConnection& control, QSet<QString> leases, const QString& state,
                       int timeoutMs)
{
    const QDeadlineTimer deadline(timeoutMs);
    while (!leases.isEmpty()) {
        if (deadline.hasExpired())
            return false;
        auto event = control.nextEvent(int(std::max<qint64>(1, deadline.remainingTime())));
        if (!event)
            return false;
        if (event->value(QStringLiteral("event")).toString() == u"subtask" &&
            event->value(QStringLiteral("state")).toString() == state)
            leases.remove(event->value(QStringLiteral("lease_id")).toString());
    }
    return true;
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_pause_latency [--runs N] [--quick]\n";
        return 0;
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int runs = bench::intOption(args, "--runs", quick ? 2 : 10);
    const int maxTasks = QThread::idealThreadCount() >= 2 ? 2 : 1;

    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    if (auto s = cluster.initCoordinator(); !s)
        return bench::failBench(kName, s.error());
    if (auto s = cluster.startCoordinator(); !s)
        return bench::failBench(kName, s.error());
    // CNN subtasks of many passes: the workers train for the whole measurement.
    QJsonObject job = E2eCluster::fashionJob();
    job.insert(QStringLiteral("name"), QStringLiteral("pause"));
    job.insert(QStringLiteral("model"), QJsonObject{{QStringLiteral("arch"), QStringLiteral("cnn")},
                                                    {QStringLiteral("input_shape"), QJsonArray{1, 28, 28}},
                                                    {QStringLiteral("num_classes"), 10}});
    job.insert(QStringLiteral("shards"), 4);
    job.insert(QStringLiteral("local_epochs"), 20);
    job.insert(QStringLiteral("deadline_seconds"), 600);
    if (auto id = cluster.submitJob(job); !id)
        return bench::failBench(kName, id.error());
    auto agent = cluster.enrollAgent(QStringLiteral("pausable"));
    if (!agent)
        return bench::failBench(kName, agent.error());
    if (auto s = cluster.startAgent(*agent, {QStringLiteral("--dedicated"), QStringLiteral("--max-tasks"),
                                             QString::number(maxTasks), QStringLiteral("--threads"),
                                             QStringLiteral("1")});
        !s)
        return bench::failBench(kName, s.error());

    auto connected = connectWhenUp(cluster.agent(*agent).dir, 30'000);
    if (!connected)
        return bench::failBench(kName, connected.error());
    std::unique_ptr<agent::ControlConnection> control = std::move(*connected);

    std::vector<double> latencies;
    for (int run = 0; run < runs; ++run) {
        // Every worker computing, past its start-up.
        QSet<QString> leases;
        const bool ready = waitUntil(
            [&] {
                auto status = control->call(QStringLiteral("status"));
                leases = status ? trainingLeases(*status) : QSet<QString>();
                return leases.size() == maxTasks;
            },
            180'000, 200);
        if (!ready)
            return bench::failBench(kName,
                                    QStringLiteral("%1 worker(s) never trained at once; the agent's log:\n%2")
                                        .arg(maxTasks)
                                        .arg(cluster.agentLog(*agent).right(3000)));
        while (control->nextEvent(0)) {
        } // what came before the request is not its effect

        QElapsedTimer timer;
        timer.start();
        if (auto s = control->call(QStringLiteral("pause")); !s)
            return bench::failBench(kName, s.error());
        const bool paused = awaitSubtaskState(*control, leases, QStringLiteral("paused"), 30'000);
        const double ms = double(timer.nsecsElapsed()) / 1e6;
        if (!paused)
            return bench::failBench(kName,
                                    QStringLiteral("the workers did not all report paused within 30 s"));
        latencies.push_back(ms);

        if (auto s = control->call(QStringLiteral("resume")); !s)
            return bench::failBench(kName, s.error());
        if (!awaitSubtaskState(*control, leases, QStringLiteral("training"), 30'000))
            return bench::failBench(kName, QStringLiteral("the workers did not all resume within 30 s"));
        QTest::qWait(1000);
    }

    QJsonArray all;
    for (const double ms : latencies)
        all.append(ms);
    QJsonObject out;
    out.insert(QStringLiteral("runs"), runs);
    out.insert(QStringLiteral("workers"), maxTasks);
    out.insert(QStringLiteral("median_ms"), bench::median(latencies));
    out.insert(QStringLiteral("max_ms"), *std::max_element(latencies.begin(), latencies.end()));
    out.insert(QStringLiteral("all_ms"), all);
    out.insert(QStringLiteral("goal_ms"), 1000);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    control.reset();
    cluster.stopAll();
    return 0;
}
