// What Gleaner costs a volunteer's desktop in memory while it waits: the tray app `gleaner` started as a
// volunteer starts it (it starts the per-user agent itself), on an X server without a system tray (so its
// window is open: the larger case), and the agent it started, waiting for the user to go idle. Reads VmRSS
// and the peak VmHWM of both after a settling time, and their CPU time over a window.
//   bench_desktop_memory [--settle S] [--seconds S] [--quick]   (under tests/tools/with-xvfb.sh)
#include "DesktopSupport.h"
#include "E2eCluster.h"
#include "ProcessProbe.h"
#include "TestSupport.h"

#include "control/ControlConnection.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTest>
#include <QTextStream>

#include <csignal>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {
const char* const kName = "bench_desktop_memory";
}

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_desktop_memory [--settle S] [--seconds S] [--quick]   (under "
                               "tests/tools/with-xvfb.sh)\n";
        return 0;
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int settle = bench::intOption(args, "--settle", quick ? 2 : 10);
    const int seconds = bench::intOption(args, "--seconds", quick ? 2 : 30);
    if (qEnvironmentVariableIsEmpty("DISPLAY"))
        return bench::failBench(kName, QStringLiteral("no DISPLAY: run it under tests/tools/with-xvfb.sh"));

    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    if (auto s = cluster.initCoordinator(); !s)
        return bench::failBench(kName, s.error());
    if (auto s = cluster.startCoordinator(); !s)
        return bench::failBench(kName, s.error());
    auto agent = cluster.enrollAgent(QStringLiteral("desktop"));
    if (!agent)
        return bench::failBench(kName, agent.error());
    const QString dir = cluster.agent(*agent).dir;

    QProcess tray;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("xcb"));
    // Its own home and runtime folders: the benchmark never meets a real user's tray app or settings.
    for (const char* name : {"HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME"}) {
        const QString path = scratch->path() + u'/' + QString::fromLatin1(name).toLower();
        QDir().mkpath(path);
        QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
        env.insert(QString::fromLatin1(name), path);
    }
    tray.setProcessEnvironment(env);
    tray.setProcessChannelMode(QProcess::MergedChannels);
    tray.setStandardOutputFile(scratch->path() + QStringLiteral("/gleaner.log"));
    tray.start(QStringLiteral(GLEANER_GUI_BIN), {QStringLiteral("--data-dir"), dir});
    if (!tray.waitForStarted(10'000))
        return bench::failBench(kName, QStringLiteral("gleaner did not start: %1").arg(tray.errorString()));

    // The tray app starts the agent; its hello names its pid.
    auto connection = connectWhenUp(dir, 30'000, false);
    if (!connection)
        return bench::failBench(
            kName,
            QStringLiteral("the tray app did not start an agent (%1); its log:\n%2")
                .arg(connection.error(),
                     QString::fromUtf8(test::readFile(scratch->path() + QStringLiteral("/gleaner.log")))));
    const qint64 agentPid = (*connection)->hello().value(QStringLiteral("pid")).toInteger();
    connection->reset();
    QTest::qWait(settle * 1000);

    const auto before = std::make_pair(sampleProcess(tray.processId()), sampleProcess(agentPid));
    QElapsedTimer window;
    window.start();
    QTest::qWait(seconds * 1000);
    const auto trayAfter = sampleProcess(tray.processId());
    const auto agentAfter = sampleProcess(agentPid);
    const double elapsed = double(window.elapsed()) / 1000.0;
    if (!before.first || !before.second || !trayAfter || !agentAfter)
        return bench::failBench(kName,
                                QStringLiteral("the tray app or the agent ended during the measurement"));
    const auto figures = [&](const ProcessSample& start, const ProcessSample& end) {
        const double cpu = double(end.cpuTicks - start.cpuTicks) / double(clockTicksPerSecond());
        return QJsonObject{{QStringLiteral("rss_mb"), double(end.rssKb) / 1024.0},
                           {QStringLiteral("hwm_mb"), double(end.hwmKb) / 1024.0},
                           {QStringLiteral("cpu_percent_of_one_core"), 100.0 * cpu / elapsed}};
    };
    QJsonObject out;
    out.insert(QStringLiteral("seconds"), elapsed);
    out.insert(QStringLiteral("tray_app"), figures(*before.first, *trayAfter));
    out.insert(QStringLiteral("agent"), figures(*before.second, *agentAfter));
    out.insert(QStringLiteral("tray_window_open"), true);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);

    tray.terminate();
    tray.waitForFinished(10'000);
    if (tray.state() != QProcess::NotRunning)
        tray.kill();
    ::kill(pid_t(agentPid), SIGTERM); // the tray app never stops the agent: the benchmark does
    waitUntil([&] { return !processAlive(agentPid); }, 15'000, 100);
    cluster.stopAll();
    return 0;
}
