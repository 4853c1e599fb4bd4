// What an idle gleaner-agent costs the volunteer's machine: a daemon enrolled with a coordinator that has no
// job, measured from outside over a window: resident memory (VmRSS, and the peak VmHWM) and CPU time (utime +
// stime) as a share of one core. Goals: under 40 MB and under 0.5 %.
//   bench_agent_idle [--seconds S] [--settle S] [--quick]
#include "E2eCluster.h"
#include "ProcessProbe.h"
#include "TestSupport.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTest>
#include <QTextStream>

using namespace gleaner;
using namespace gleaner::e2e;

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_agent_idle [--seconds S] [--settle S] [--quick]\n";
        return 0;
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int seconds = bench::intOption(args, "--seconds", quick ? 5 : 60);
    const int settle = bench::intOption(args, "--settle", quick ? 2 : 5);
    const char* name = "bench_agent_idle";

    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    if (auto s = cluster.initCoordinator(); !s)
        return bench::failBench(name, s.error());
    if (auto s = cluster.startCoordinator(); !s)
        return bench::failBench(name, s.error());
    auto agent = cluster.enrollAgent(QStringLiteral("idle"));
    if (!agent)
        return bench::failBench(name, agent.error());
    // As a volunteer runs it: the default options (not dedicated: the desktop policy samples its probes, the
    // idle time four times a second), with the user idle, so that the agent asks the coordinator for work.
    // Under an X server (tests/tools/with-xvfb.sh) the idle time comes from X11 and the threshold is cut to
    // 5 s; without one there is no idle source, so "only when idle" is turned off instead.
    const bool x11 = !qEnvironmentVariableIsEmpty("DISPLAY");
    {
        QFile prefs(cluster.agent(*agent).dir + QStringLiteral("/preferences.json"));
        // No CPU limit: the other tests of a suite keep the machine busy, and this measures waiting for work.
        QJsonObject values{{QStringLiteral("other_cpu_limit_percent"), 100}};
        if (x11)
            values.insert(QStringLiteral("idle_seconds"), 5);
        else
            values.insert(QStringLiteral("only_when_idle"), false);
        if (!prefs.open(QIODevice::WriteOnly) || prefs.write(QJsonDocument(values).toJson()) < 0)
            return bench::failBench(name, QStringLiteral("cannot write %1").arg(prefs.fileName()));
    }
    if (auto s = cluster.startAgent(
            *agent, {QStringLiteral("--idle-source"), x11 ? QStringLiteral("x11") : QStringLiteral("none")});
        !s)
        return bench::failBench(name, s.error());
    if (auto waiting =
            cluster.waitForAgentLog(*agent, QRegularExpression(QStringLiteral("Waiting for work")), 30'000);
        !waiting)
        return bench::failBench(name, waiting.error());
    QTest::qWait(settle * 1000); // start-up (libraries, the cache check) is not idling

    const qint64 pid = cluster.agentPid(*agent);
    const qint64 logFrom = cluster.agentLogSize(*agent);
    const auto before = sampleProcess(pid);
    QElapsedTimer window;
    window.start();
    QTest::qWait(seconds * 1000);
    const auto after = sampleProcess(pid);
    const double elapsed = double(window.elapsed()) / 1000.0;
    if (!before || !after)
        return bench::failBench(
            name, QStringLiteral("the agent (pid %1) ended during the measurement; its log:\n%2")
                      .arg(pid)
                      .arg(cluster.agentLog(*agent).right(3000)));
    const QString log = cluster.agentLog(*agent, logFrom);
    qint64 requests = 0;
    for (auto it = QRegularExpression(QStringLiteral("gleaner.agent.net: \"\\w+\"")).globalMatch(log);
         it.hasNext(); it.next())
        ++requests;

    const double cpuSeconds = double(after->cpuTicks - before->cpuTicks) / double(clockTicksPerSecond());
    QJsonObject out;
    out.insert(QStringLiteral("seconds"), elapsed);
    out.insert(QStringLiteral("rss_mb"), double(after->rssKb) / 1024.0);
    out.insert(QStringLiteral("hwm_mb"), double(after->hwmKb) / 1024.0);
    out.insert(QStringLiteral("cpu_seconds"), cpuSeconds);
    out.insert(QStringLiteral("cpu_percent_of_one_core"), 100.0 * cpuSeconds / elapsed);
    out.insert(QStringLiteral("clock_ticks_per_second"), clockTicksPerSecond());
    out.insert(QStringLiteral("requests_to_coordinator"), requests);
    out.insert(QStringLiteral("idle_source"), x11 ? QStringLiteral("x11") : QStringLiteral("none"));
    out.insert(QStringLiteral("goal_rss_mb"), 40);
    out.insert(QStringLiteral("goal_cpu_percent"), 0.5);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    cluster.stopAll();
    return 0;
}
