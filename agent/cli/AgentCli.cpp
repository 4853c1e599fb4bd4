#include "cli/AgentCli.h"

#include "cli/CliErrors.h"

#include "cli/RunCommand.h"
#include "cli/SessionReportCommand.h"

#include "AgentPaths.h"
#include "cli/ControlCommands.h"
#include "cli/PrefsCommand.h"
#include "config/Enroller.h"
#include "crypto/TlsCertificate.h"

#include <QCommandLineParser>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>

namespace gleaner::agent::cli {
namespace {

const char kUsage[] = R"(usage: gleaner-agent COMMAND [options]

The Gleaner agent: trains subtasks of a coordinator's jobs on this machine.

Commands:
  enroll   register this machine with a coordinator and pin its keys
  status   show what the running agent does and why (--follow: each change as it happens)
  pause    pause training; nothing is lost (`resume` continues)
  resume   let a paused agent train again
  finish   finish the subtasks in hand, lease no new ones, then exit
  snooze   pause for a while (default 60 minutes), then resume by itself
  prefs    show or change the preferences: when to compute, and how much (`prefs set KEY=VALUE`)
  run      run the agent in the foreground (the daemon)
  session-report  report this session's idle time to the system agent (shared workstations)

Run `gleaner-agent COMMAND --help` for a command's options.
)";

int enrollCommand(const QStringList& arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Registers this machine with the coordinator at URL, "
                                                    "keeps the agent token (0600) and pins the coordinator's "
                                                    "signing key, and its TLS certificate when --ca is "
                                                    "given. Without --data-dir the agent's folder is %1.")
                                         .arg(defaultDataDir(AgentScope::User)));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("URL"),
                                 QStringLiteral("The coordinator, https://HOST:PORT."));
    parser.addOption({QStringLiteral("token"),
                      QStringLiteral("The enrollment token from the coordinator's admin."),
                      QStringLiteral("TOKEN")});
    parser.addOption(
        {QStringLiteral("token-file"),
         QStringLiteral("Read the enrollment token from FILE, or from standard input with -, so it never "
                        "shows in the process list."),
         QStringLiteral("FILE")});
    parser.addOption(
        {QStringLiteral("ca"),
         QStringLiteral("The coordinator's certificate (PEM) to pin, for a self-signed coordinator."),
         QStringLiteral("FILE")});
    parser.addOption({QStringLiteral("name"),
                      QStringLiteral("This machine's name for the admin (default: the host name)."),
                      QStringLiteral("NAME")});
    parser.addOption(
        {QStringLiteral("data-dir"), QStringLiteral("The agent's folder."), QStringLiteral("DIR")});
    parser.addOption(
        {QStringLiteral("system"), QStringLiteral("Use the system service's folder, /var/lib/gleaner.")});
    parser.addOption(
        {QStringLiteral("json"), QStringLiteral("Print {agent_id, coordinator_url, data_dir} as JSON.")});
    if (!parser.parse(arguments))
        return usageError(QStringLiteral("enroll"), parser.errorText());
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    if (parser.positionalArguments().size() != 1)
        return usageError(QStringLiteral("enroll"), QStringLiteral("expected the coordinator's URL"));

    EnrollOptions options;
    options.url = parser.positionalArguments().first();
    options.token = parser.value(QStringLiteral("token"));
    if (parser.isSet(QStringLiteral("token-file"))) {
        if (parser.isSet(QStringLiteral("token")))
            return usageError(QStringLiteral("enroll"),
                              QStringLiteral("give --token or --token-file, not both"));
        const QString path = parser.value(QStringLiteral("token-file"));
        QFile file;
        const bool opened = path == u"-" ? file.open(stdin, QIODevice::ReadOnly)
                                         : (file.setFileName(path), file.open(QIODevice::ReadOnly));
        if (!opened)
            return usageError(
                QStringLiteral("enroll"),
                QStringLiteral("cannot read the token from %1: %2").arg(path, file.errorString()));
        options.token = QString::fromUtf8(file.read(4096)).trimmed();
        if (options.token.isEmpty())
            return usageError(QStringLiteral("enroll"), QStringLiteral("%1 holds no token").arg(path));
    }
    options.caFile = parser.value(QStringLiteral("ca"));
    options.name = parser.value(QStringLiteral("name"));
    options.dataDir =
        parser.isSet(QStringLiteral("data-dir"))
            ? parser.value(QStringLiteral("data-dir"))
            : defaultDataDir(parser.isSet(QStringLiteral("system")) ? AgentScope::System : AgentScope::User);
    if (!options.caFile.isEmpty() && !parser.isSet(QStringLiteral("json"))) {
        QFile ca(options.caFile);
        if (ca.open(QIODevice::ReadOnly))
            if (auto fingerprint = TlsCertificate::fingerprint(ca.readAll()))
                QTextStream(stdout) << "Pinning the coordinator certificate with SHA-256 fingerprint\n  "
                                    << *fingerprint
                                    << "\nCompare it with the one `gleaner-coordinator init` printed.\n";
    }
    auto enrolled = enrollAgent(options);
    if (!enrolled) {
        QTextStream(stderr) << "gleaner-agent enroll: " << enrolled.error() << "\n";
        return 1;
    }
    if (parser.isSet(QStringLiteral("json"))) {
        QTextStream(stdout) << QJsonDocument(
                                   QJsonObject{{QStringLiteral("agent_id"), enrolled->agentId},
                                               {QStringLiteral("coordinator_url"), enrolled->coordinatorUrl},
                                               {QStringLiteral("data_dir"), options.dataDir}})
                                   .toJson(QJsonDocument::Indented);
    } else {
        QTextStream(stdout) << "Enrolled as \"" << enrolled->name << "\" (agent " << enrolled->agentId
                            << ") with " << enrolled->coordinatorUrl << "; the agent's data is in "
                            << options.dataDir << ".\n";
    }
    return 0;
}

} // namespace

int run(const QStringList& arguments)
{
    const QString command = arguments.value(1);
    if (command.isEmpty() || command == u"--help" || command == u"-h" || command == u"help") {
        QTextStream(command.isEmpty() ? stderr : stdout) << kUsage;
        return command.isEmpty() ? 2 : 0;
    }
    if (command == u"enroll")
        return enrollCommand(arguments.mid(1));
    if (isControlCommand(command))
        return controlCommand(arguments.mid(1));
    if (command == u"run")
        return runCommand(arguments.mid(1));
    if (command == u"prefs")
        return prefsCommand(arguments.mid(1));
    if (command == u"session-report")
        return sessionReportCommand(arguments.mid(1));
    QTextStream(stderr) << "gleaner-agent: unknown command \"" << command << "\"\n\n" << kUsage;
    return 2;
}

} // namespace gleaner::agent::cli
