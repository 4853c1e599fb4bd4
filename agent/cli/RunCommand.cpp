#include "cli/RunCommand.h"

#include "AgentPaths.h"
#include "cli/CliErrors.h"
#include "config/AgentConfig.h"
#include "config/Enroller.h"
#include "config/PresentedCertificate.h"
#include "control/ControlServer.h"
#include "daemon/AgentDaemon.h"
#include "daemon/SessionDesk.h"
#include "idle/SessionIdleSource.h"
#include "policy/PolicyEnrollment.h"
#include "policy/PolicyLocks.h"
#include "policy/PreferenceStore.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSocketNotifier>
#include <QSysInfo>
#include <QTemporaryFile>
#include <QUrl>
#include <QTextStream>

#include <cmath>
#include <csignal>
#include <optional>
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

// "3600", "90s", "90m", "4h", "2d": seconds.
std::optional<double> parseDuration(const QString& text)
{
    QString t = text.trimmed().toLower();
    double unit = 1;
    if (t.endsWith(u's'))
        t.chop(1);
    else if (t.endsWith(u'm'))
        unit = 60, t.chop(1);
    else if (t.endsWith(u'h'))
        unit = 3600, t.chop(1);
    else if (t.endsWith(u'd'))
        unit = 86400, t.chop(1);
    bool ok = false;
    const double value = t.toDouble(&ok);
    if (!ok || !std::isfinite(value) || value <= 0 || value * unit > 365.0 * 86400)
        return std::nullopt;
    return value * unit;
}

// Enrolls a data folder that holds no agent yet; `source` says who asked (--enroll or the policy file).
int enrollFirst(const EnrollOptions& enroll, const QString& source)
{
    auto enrolled = enrollAgent(enroll);
    if (!enrolled) {
        QTextStream(stderr) << "gleaner-agent run: enrolling with " << enroll.url << " (" << source
                            << "): " << enrolled.error() << "\n";
        return 1;
    }
    QTextStream(stderr) << "gleaner-agent run: enrolled as \"" << enrolled->name << "\" (agent " << enrolled->agentId
                        << ") with " << enrolled->coordinatorUrl << " (" << source << ")\n";
    return 0;
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
        "SIGHUP re-reads the organisation's policy file (so does a change to it). SIGTERM or Ctrl-C: within --grace seconds each subtask is finished and uploaded, or checkpointed and "
        "handed back to the coordinator, which gives it to the next agent to resume; then the agent exits 0 "
        "(with --keep-on-stop the subtasks stay and the next start resumes them). Batch systems and preemptible "
        "instances: --dedicated --until-empty [--max-runtime D] [--enroll URL --token-file F] (docs/clusters.md)."));
    parser.addHelpOption();
    const auto option = [&parser](const char* name, const char* help, const char* value = nullptr) {
        parser.addOption(value ? QCommandLineOption(QString::fromLatin1(name), QString::fromLatin1(help),
                                                    QString::fromLatin1(value))
                               : QCommandLineOption(QString::fromLatin1(name), QString::fromLatin1(help)));
    };
    option("data-dir", "The agent's folder (default: the per-user one).", "DIR");
    option("system", "The system service of a managed or shared machine: the folder /var/lib/gleaner, and the "
                     "session socket (below) at $RUNTIME_DIRECTORY/sessions.sock (/run/gleaner/sessions.sock).");
    option("session-socket",
           "Listen here for the idle time of every session on the machine (`gleaner-agent session-report` in each "
           "one) and take the most active (--idle-source sessions, the default with it). Every local user may "
           "connect; the socket only reads status and takes idle reports.",
           "PATH");
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
    option("worker", "The gleaner-worker executable (default: next to gleaner-agent, else in "
                     "../libexec/gleaner/ from it, where the package installs it).",
           "PATH");
    option("progress-interval", "Seconds between progress reports to the coordinator (default 30).",
           "SECONDS");
    option("grace", "Seconds the agent has after SIGTERM to hand its work back before it must exit (default 25; "
                    "GCE preemption gives 30, AWS spot 120, Slurm what --signal asks).",
           "SECONDS");
    option("keep-on-stop", "On SIGTERM keep the leases instead of handing them back: the next start resumes them "
                           "(a quick restart, an upgrade).");
    option("until-empty", "Batch mode: exit 0 once the coordinator has had no work for this agent for --idle-exit "
                          "seconds and it holds none.");
    option("idle-exit", "With --until-empty: how long without work before exiting (default 120).", "SECONDS");
    option("max-runtime", "Exit 0 after this long (e.g. 3600, 90m, 4h), handing back what is held --grace seconds "
                          "before the end.",
           "DURATION");
    option("kind", "What this agent is, shown to the coordinator's admin: desktop, dedicated, batch or cloud "
                   "(default: desktop, or dedicated with --dedicated).",
           "KIND");
    option("enroll", "Enroll with the coordinator at URL first when the data folder holds no enrolled agent (with "
                     "--token-file; for batch jobs and cloud instances).",
           "URL");
    option("token-file", "With --enroll: the file holding the enrollment token.", "FILE");
    option("ca", "With --enroll: the coordinator's certificate (PEM) to pin.", "FILE");
    option("name", "With --enroll: this agent's name for the admin (default: the host name).", "NAME");
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
    number("grace", options.graceSeconds, 1, 3600);
    number("idle-exit", options.idleExitSeconds, 1, 7 * 86400);
    if (!ok)
        return 2;
    options.handBackOnStop = !parser.isSet(QStringLiteral("keep-on-stop"));
    options.untilEmpty = parser.isSet(QStringLiteral("until-empty"));
    if (parser.isSet(QStringLiteral("idle-exit")) && !options.untilEmpty)
        return usageError(kCommand, QStringLiteral("--idle-exit goes with --until-empty"));
    if (parser.isSet(QStringLiteral("max-runtime"))) {
        const auto runtime = parseDuration(parser.value(QStringLiteral("max-runtime")));
        if (!runtime || *runtime <= options.graceSeconds)
            return usageError(kCommand, QStringLiteral("--max-runtime takes a duration longer than --grace (%1 s), "
                                                       "such as 3600, 90m or 4h, not \"%2\"")
                                            .arg(options.graceSeconds)
                                            .arg(parser.value(QStringLiteral("max-runtime"))));
        options.maxRuntimeSeconds = *runtime;
    }
    if (parser.isSet(QStringLiteral("kind"))) {
        options.kind = parser.value(QStringLiteral("kind"));
        if (!QStringList{QStringLiteral("desktop"), QStringLiteral("dedicated"), QStringLiteral("batch"), QStringLiteral("cloud")}.contains(options.kind))
            return usageError(kCommand, QStringLiteral("--kind takes desktop, dedicated, batch or cloud, not \"%1\"")
                                            .arg(options.kind));
    }
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
    QString sessionSocket = parser.value(QStringLiteral("session-socket"));
    if (sessionSocket.isEmpty() && parser.isSet(QStringLiteral("system")) && !parser.isSet(QStringLiteral("data-dir"))) {
        const QString runtime = qEnvironmentVariable("RUNTIME_DIRECTORY").split(u':').constFirst();
        sessionSocket = (runtime.isEmpty() ? QStringLiteral("/run/gleaner") : runtime) + QStringLiteral("/sessions.sock");
    }
    if (!sessionSocket.isEmpty()) {
        options.sessions = std::make_shared<SessionReports>(&SessionIdleSource::logindOwner);
        options.idleSource = QStringLiteral("sessions");
    }
    if (parser.isSet(QStringLiteral("idle-source")))
        options.idleSource = parser.value(QStringLiteral("idle-source"));
    if (parser.isSet(QStringLiteral("policy-file")))
        options.policyFile = parser.value(QStringLiteral("policy-file"));
    PolicyOverrides overrides;
    overrides.policyFlag = options.policyFile;
    overrides.policyEnvironment = qEnvironmentVariable("GLEANER_POLICY_FILE");
    overrides.dedicated = options.dedicated;
    if (auto locks = checkPolicyOverrides(overrides, systemPolicyFile(), QFileInfo::exists(systemPolicyFile()),
                                          mayOverridePolicy());
        !locks) {
        QTextStream(stderr) << "gleaner-agent run: " << locks.error() << "\n";
        return 2;
    }
    if (parser.isSet(QStringLiteral("device")))
        options.device = parser.value(QStringLiteral("device"));
    if (parser.isSet(QStringLiteral("worker")))
        options.workerProgram = parser.value(QStringLiteral("worker"));

    for (const char* flag : {"token-file", "ca", "name"})
        if (parser.isSet(QString::fromLatin1(flag)) && !parser.isSet(QStringLiteral("enroll")))
            return usageError(kCommand, QStringLiteral("--%1 goes with --enroll").arg(QString::fromLatin1(flag)));
    // --enroll and the policy's "enrollment" are for the first start only.
    const bool enrolled = QFileInfo::exists(AgentConfig::configPath(options.dataDir));
    if (!enrolled && parser.isSet(QStringLiteral("enroll"))) {
        EnrollOptions enroll;
        enroll.url = parser.value(QStringLiteral("enroll"));
        enroll.caFile = parser.value(QStringLiteral("ca"));
        enroll.name = parser.value(QStringLiteral("name"));
        enroll.dataDir = options.dataDir;
        if (parser.isSet(QStringLiteral("token-file"))) {
            const QString path = parser.value(QStringLiteral("token-file"));
            QFile file(path);
            if (!file.open(QIODevice::ReadOnly))
                return usageError(kCommand, QStringLiteral("cannot read the enrollment token from %1 (--token-file): "
                                                           "%2")
                                                .arg(path, file.errorString()));
            enroll.token = QString::fromUtf8(file.read(4096)).trimmed();
            if (enroll.token.isEmpty())
                return usageError(kCommand, QStringLiteral("%1 (--token-file) holds no token").arg(path));
        }
        if (const int code = enrollFirst(enroll, QStringLiteral("--enroll")); code != 0)
            return code;
    } else if (!enrolled) {
        // A managed fleet: the organisation's policy file says where to enroll (docs/fleet.md).
        const QString policyFile =
            options.policyFile.isEmpty() ? PreferenceStore::defaultPolicyFile() : options.policyFile;
        auto fromPolicy = PolicyEnrollment::read(policyFile);
        if (!fromPolicy) {
            QTextStream(stderr) << "gleaner-agent run: " << fromPolicy.error() << "\n";
            return 1;
        }
        if (*fromPolicy) {
            const PolicyEnrollment& policy = **fromPolicy;
            EnrollOptions enroll;
            enroll.url = policy.url;
            enroll.token = policy.token;
            enroll.name = policy.namePrefix + QSysInfo::machineHostName();
            enroll.dataDir = options.dataDir;
            QTemporaryFile pinned;
            if (!policy.certificateSha256.isEmpty()) {
                auto certificate = presentedCertificate(QUrl(policy.url), policy.certificateSha256);
                if (!certificate || !pinned.open() || pinned.write(*certificate) != certificate->size() || !pinned.flush()) {
                    QTextStream(stderr) << "gleaner-agent run: enrolling as " << policyFile << " says: "
                                        << (certificate ? pinned.errorString() : certificate.error()) << "\n";
                    return 1;
                }
                enroll.caFile = pinned.fileName();
            }
            if (const int code = enrollFirst(enroll, policyFile); code != 0)
                return code;
        }
    }

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
    std::unique_ptr<SessionDesk> desk;
    std::unique_ptr<ControlServer> sessions;
    if (options.sessions) {
        desk = std::make_unique<SessionDesk>(**daemon, options.sessions);
        sessions = std::make_unique<ControlServer>(*desk);
        // systemd's RuntimeDirectory= makes the folder; by hand, root makes it here (readable by everyone, who
        // must reach the socket in it).
        const QString folder = QFileInfo(sessionSocket).absolutePath();
        if (!QFileInfo::exists(folder) && QDir().mkpath(folder))
            QFile::setPermissions(folder, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner |
                                              QFileDevice::ReadGroup | QFileDevice::ExeGroup | QFileDevice::ReadOther |
                                              QFileDevice::ExeOther);
        if (auto s = sessions->listenShared(sessionSocket); !s) {
            QTextStream(stderr) << "gleaner-agent run: the session socket (--session-socket): " << s.error() << "\n";
            return 1;
        }
        QObject::connect(daemon->get(), &AgentDaemon::controlEvent, sessions.get(), [&sessions](const QJsonObject& event) {
            if (const std::optional<QJsonObject> shown = SessionDesk::forDesks(event))
                sessions->publish(*shown);
        });
    }

    // Signals reach the event loop through a pipe: the handler itself only writes one byte.
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g_signalPipe) != 0) {
        QTextStream(stderr) << "gleaner-agent run: cannot set up signal handling\n";
        return 1;
    }
    QSocketNotifier notifier(g_signalPipe[0], QSocketNotifier::Read);
    QObject::connect(&notifier, &QSocketNotifier::activated, daemon->get(), [&daemon] {
        char byte = 0;
        [[maybe_unused]] const auto got = ::read(g_signalPipe[0], &byte, 1);
        if (byte == SIGHUP)
            (*daemon)->reloadPolicy(QStringLiteral("SIGHUP"));
        else
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
    if (sessions)
        sessions->close();
    return exitCode;
}

} // namespace gleaner::agent::cli
