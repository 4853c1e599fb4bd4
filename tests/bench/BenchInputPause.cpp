// How fast user input pauses a desktop agent: under a private X server (tests/tools/with-xvfb.sh), a real
// agent in desktop mode (idle threshold 5 s, idle time from X11) trains; xdotool moves the pointer, and the
// benchmark times from the move to (a) the agent's state event "paused" with reason user_active, and (b) the
// worker's own "paused" (it stops between two mini-batches). Then the pointer rests until training resumes,
// and again. Prints the medians and maxima over N runs. Goal: under 1 s.
//   bench_input_pause [--runs N] [--quick]
#include "DesktopSupport.h"
#include "TestSupport.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>
#include <QTextStream>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {
const char* const kName = "bench_input_pause";
}

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout)
            << "usage: bench_input_pause [--runs N] [--quick]   (under tests/tools/with-xvfb.sh)\n";
        return 0;
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int runs = bench::intOption(args, "--runs", quick ? 1 : 10);

    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    if (auto s = moveThePointer(); !s)
        return bench::failBench(kName, s.error());
    auto desktop = startDesktopAgent(cluster, QJsonObject{{QStringLiteral("idle_seconds"), 5},
                                                          {QStringLiteral("max_cores"), 1},
                                                          {QStringLiteral("other_cpu_limit_percent"), 100}});
    if (!desktop)
        return bench::failBench(kName, desktop.error());
    auto& control = *desktop->control;

    std::vector<double> decided, workerPaused;
    for (int run = 0; run < runs; ++run) {
        // Training, past the worker's start-up (a progress event).
        auto training = waitForEvent(
            control,
            [](const QJsonObject& e) {
                return e.value(QStringLiteral("event")).toString() == u"progress" &&
                       e.value(QStringLiteral("step")).toInteger() > 0;
            },
            180'000, QStringLiteral("progress"));
        if (!training)
            return bench::failBench(kName, training.error() + cluster.logTails());
        drainEvents(control);
        if (auto s = moveThePointer(); !s)
            return bench::failBench(kName, s.error());
        QElapsedTimer timer;
        timer.start();
        auto paused = waitForEvent(
            control,
            [](const QJsonObject& e) {
                return isStateEvent(e, QStringLiteral("paused"), QStringLiteral("user_active"));
            },
            30'000, QStringLiteral("state paused (user_active)"));
        if (!paused)
            return bench::failBench(kName, paused.error());
        decided.push_back(double(timer.nsecsElapsed()) / 1e6);
        auto worker = waitForEvent(
            control, [](const QJsonObject& e) { return isSubtaskEvent(e, QStringLiteral("paused")); }, 30'000,
            QStringLiteral("subtask paused"));
        if (!worker)
            return bench::failBench(kName, worker.error());
        workerPaused.push_back(double(timer.nsecsElapsed()) / 1e6);
        // Resting: the agent resumes by itself after the threshold.
        auto resumed = waitForEvent(
            control, [](const QJsonObject& e) { return isStateEvent(e, QStringLiteral("training")); }, 60'000,
            QStringLiteral("training again"));
        if (!resumed)
            return bench::failBench(kName, resumed.error());
    }

    const auto list = [](const std::vector<double>& values) {
        QJsonArray all;
        for (const double v : values)
            all.append(v);
        return all;
    };
    QJsonObject out;
    out.insert(QStringLiteral("runs"), runs);
    out.insert(QStringLiteral("idle_source"), QStringLiteral("x11"));
    out.insert(QStringLiteral("decided_median_ms"), bench::median(decided));
    out.insert(QStringLiteral("decided_max_ms"), *std::max_element(decided.begin(), decided.end()));
    out.insert(QStringLiteral("worker_paused_median_ms"), bench::median(workerPaused));
    out.insert(QStringLiteral("worker_paused_max_ms"),
               *std::max_element(workerPaused.begin(), workerPaused.end()));
    out.insert(QStringLiteral("decided_all_ms"), list(decided));
    out.insert(QStringLiteral("worker_paused_all_ms"), list(workerPaused));
    out.insert(QStringLiteral("goal_ms"), 1000);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    desktop->control.reset();
    cluster.stopAll();
    return 0;
}
