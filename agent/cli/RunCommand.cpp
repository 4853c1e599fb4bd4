#include "cli/RunCommand.h"

#include "AgentPaths.h"
#include "cli/CliErrors.h"
#include "control/ControlServer.h"
#include "daemon/AgentDaemon.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QSocketNotifier>
#include <QTextStream>

#include <csignal>
#include <sys/socket.h>
#include <unistd.h>

namespace gleaner::agent::cli {
namespace {

const QString kCommand = QStringLiteral("run");

int g_signalPipe[2] = {-1, -1};

void onSignal(int signal)
{
    const char byte = char(signal);
    [[maybe_unused]] const auto written = ::write(g_signalPipe[1], &byte, 1);
}

// "512M", "10G", "1048576": bytes.
bool parseBytes(const QString& text, qint64& out)
{
    QString t = text.trimmed().toUpper();
    if (t.endsWith(u'B'))
        t.chop(1);
    qint64 unit = 1;
    if (t.endsWith(u'K'))
        unit = 1LL << 10;
    else if (t.endsWith(u'M'))
        unit = 1LL << 20;
    else if (t.endsWith(u'G'))
        unit = 1LL << 30;
    else if (t.endsWith(u'T'))
        unit = 1LL << 40;
    if (unit != 1)
        t.chop(1);
    bool ok = false;
    const double value = t.toDouble(&ok);
    if (!ok || value < 0)
        return false;
    out = qint64(value * double(unit));
    return true;
}

} // namespace

int runCommand(const QStringList& arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Runs the agent in the foreground: leases subtasks from the coordinator it enrolled with, trains "
        "them in "
        "gleaner-worker processes at the lowest priority, and uploads the results. Logs go to stderr (the "
        "journal "
        "under systemd). `gleaner-agent status|pause|resume|finish` talk to it over its control socket. "
        "SIGTERM or "
        "Ctrl-C: the workers write a checkpoint and the agent exits; the next start resumes them."));
    parser.addHelpOption();
    const auto option = [&parser](const char* name, const char* help, const char* value = nullptr) {
        parser.addOption(value ? QCommandLineOption(QString::fromLatin1(name), QString::fromLatin1(help),
                                                    QString::fromLatin1(value))
                               : QCommandLineOption(QString::fromLatin1(name), QString::fromLatin1(help)));
    };
    option("data-dir", "The agent's folder (default: the per-user one).", "DIR");
    option("system", "Use the system service's folder, /var/lib/gleaner.");
    option(
        "dedicated",
        "Compute regardless of the user and the desktop policy (cloud and lab machines). Without it the "
        "preferences decide when to compute and how much (`gleaner-agent prefs`, docs/desktop.md), and the "
        "resource options below are refused: set the preferences instead.");
    option("idle-source",
           "Where the user's idle time comes from: auto, logind, mutter, screensaver, x11 or none "
           "(default auto: the first that answers).",
           "SOURCE");
    option("policy-file",
           "The organisation's policy (default /etc/gleaner/policy.json, or $GLEANER_POLICY_FILE).", "FILE");
    option("max-tasks", "Subtasks trained at once (default 1).", "T");
    option("threads", "Compute threads per worker (default: the cores divided among the subtasks).", "N");
    option("cpu-share", "Fraction of time the workers compute, (0, 1] (default 1).", "S");
    option("checkpoint-interval", "Seconds between a worker's checkpoints (default 60).", "SECONDS");
    option("memory-cap", "Stop a worker whose resident memory passes this, e.g. 2G (default: none).",
           "BYTES");
    option("cache-cap", "Disk space for cached files, e.g. 10G (default 10G).", "BYTES");
    option("upload-limit", "Upload rate cap in bytes per second, e.g. 1M (default: none).", "RATE");
    option("download-limit", "Download rate cap in bytes per second (default: none).", "RATE");
    option("device", "cpu, cuda, cuda:N or auto (default cpu).", "DEVICE");
    option("worker", "The gleaner-worker executable (default: next to gleaner-agent).", "PATH");
    option("progress-interval", "Seconds between progress reports to the coordinator (default 30).",
           "SECONDS");
    if (!parser.parse(arguments))
        return usageError(kCommand, parser.errorText());
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    if (!parser.positionalArguments().isEmpty())
        return usageError(
            kCommand, QStringLiteral("unexpected argument \"%1\"").arg(parser.positionalArguments().first()));

    DaemonOptions options;
    options.dataDir =
        parser.isSet(QStringLiteral("data-dir"))
            ? parser.value(QStringLiteral("data-dir"))
            : defaultDataDir(parser.isSet(QStringLiteral("system")) ? AgentScope::System : AgentScope::User);
    options.dedicated = parser.isSet(QStringLiteral("dedicated"));
    bool ok = true;
    const auto number = [&](const char* name, auto& out, double min, double max) {
        const QString key = QString::fromLatin1(name);
        if (!ok || !parser.isSet(key))
            return;
        const double value = parser.value(key).toDouble(&ok);
        if (!ok || value < min || value > max) {
            ok = false;
            usageError(kCommand, QStringLiteral("--%1 takes a number from %2 to %3, not \"%4\"")
                                     .arg(key)
                                     .arg(min)
                                     .arg(max)
                                     .arg(parser.value(key)));
            return;
        }
        out = static_cast<std::remove_reference_t<decltype(out)>>(value);
    };
    number("max-tasks", options.maxTasks, 1, 256);
    number("threads", options.threads, 1, 1024);
    number("cpu-share", options.cpuShare, 0.01, 1);
    number("checkpoint-interval", options.checkpointIntervalSeconds, 0, 86400);
    double progressSeconds = double(options.progressReportMs) / 1000.0;
    number("progress-interval", progressSeconds, 0.1, 3600);
    options.progressReportMs = qint64(progressSeconds * 1000);
    if (!ok)
        return 2;
    const std::pair<const char*, qint64*> sizes[] = {{"memory-cap", &options.memoryCapBytes},
                                                     {"cache-cap", &options.cacheCapBytes},
                                                     {"upload-limit", &options.uploadBytesPerSecond},
                                                     {"download-limit", &options.downloadBytesPerSecond}};
    for (const auto& [name, target] : sizes) {
        const QString key = QString::fromLatin1(name);
        if (parser.isSet(key) && !parseBytes(parser.value(key), *target))
            return usageError(kCommand, QStringLiteral("--%1 takes a size such as 512M or 2G, not \"%2\"")
                                            .arg(key, parser.value(key)));
    }
    if (!options.dedicated) {
        // One source of truth on a desktop: the preferences (which an organisation may lock).
        const std::pair<const char*, const char*> governed[] = {{"threads", "max_cores"},
                                                                {"cpu-share", "cpu_share_percent"},
                                                                {"checkpoint-interval", "checkpoint_seconds"},
                                                                {"memory-cap", "memory_idle_mb"},
                                                                {"cache-cap", "cache_mb"},
                                                                {"upload-limit", "upload_kib_per_s"},
                                                                {"download-limit", "download_kib_per_s"}};
        for (const auto& [flag, key] : governed)
            if (parser.isSet(QString::fromLatin1(flag)))
                return usageError(kCommand,
                                  QStringLiteral("--%1 is for --dedicated agents; on a desktop agent set the "
                                                 "preference %2 (`gleaner-agent prefs set %2=...`)")
                                      .arg(QString::fromLatin1(flag), QString::fromLatin1(key)));
    }
    if (parser.isSet(QStringLiteral("idle-source")))
        options.idleSource = parser.value(QStringLiteral("idle-source"));
    if (parser.isSet(QStringLiteral("policy-file")))
        options.policyFile = parser.value(QStringLiteral("policy-file"));
    if (parser.isSet(QStringLiteral("device")))
        options.device = parser.value(QStringLiteral("device"));
    if (parser.isSet(QStringLiteral("worker")))
        options.workerProgram = parser.value(QStringLiteral("worker"));

    auto daemon = AgentDaemon::create(options);
    if (!daemon) {
        QTextStream(stderr) << "gleaner-agent run: " << daemon.error() << "\n";
        return 1;
    }
    ControlServer control(**daemon);
    if (auto s = control.listen(options.dataDir); !s) {
        QTextStream(stderr) << "gleaner-agent run: " << s.error() << "\n";
        return 1;
    }
    QObject::connect(daemon->get(), &AgentDaemon::controlEvent, &control, &ControlServer::publish);

    // Signals reach the event loop through a pipe: the handler itself only writes one byte.
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g_signalPipe) != 0) {
        QTextStream(stderr) << "gleaner-agent run: cannot set up signal handling\n";
        return 1;
    }
    QSocketNotifier notifier(g_signalPipe[0], QSocketNotifier::Read);
    QObject::connect(&notifier, &QSocketNotifier::activated, daemon->get(), [&daemon] {
        char byte = 0;
        [[maybe_unused]] const auto got = ::read(g_signalPipe[0], &byte, 1);
        (*daemon)->shutdown();
    });
    struct sigaction action = {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGHUP, &action, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    int exitCode = 0;
    QObject::connect(daemon->get(), &AgentDaemon::stopped, qApp, [&exitCode](int code) {
        exitCode = code;
        QCoreApplication::quit();
    });
    (*daemon)->start();
    QCoreApplication::exec();
    control.close();
    return exitCode;
}

} // namespace gleaner::agent::cli
