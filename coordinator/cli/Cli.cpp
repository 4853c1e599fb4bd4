#include "cli/Cli.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>

namespace gleaner::coordinator::cli {
namespace {

const char kUsage[] = R"(usage: gleaner-coordinator COMMAND [options]

The Gleaner coordinator: splits training jobs into subtasks, hands them to agents over HTTPS, folds their
results into the server weights (VC-ASGD or the job's rule) and validates them.

Commands:
  init     create a data directory: keys, TLS certificate, admin token, database
  serve    run the HTTPS server until SIGTERM or SIGINT
  job      submit, list, inspect, pause, resume, cancel and export jobs
  token    create, list and revoke enrollment tokens for agents
  agent    list, revoke and release (lift the quarantine of) agents
  key      show or rotate the key that signs task manifests

Run `gleaner-coordinator COMMAND --help` for a command's options.
)";

} // namespace

int usageError(const QString& message, const QString& command)
{
    QTextStream(stderr) << "gleaner-coordinator " << command << ": " << message << "\n"
                        << "Run `gleaner-coordinator " << command << " --help` for usage.\n";
    return 2;
}

int failure(const QString& message)
{
    QTextStream(stderr) << "gleaner-coordinator: " << message << "\n";
    return 1;
}

void printJson(const QJsonObject& object)
{
    QTextStream(stdout) << QJsonDocument(object).toJson(QJsonDocument::Indented);
}

int run(const QStringList& arguments)
{
    const QString command = arguments.value(1);
    const QStringList rest = arguments.mid(1); // the command name stands in for argv[0]
    if (command.isEmpty() || command == u"--help" || command == u"-h" || command == u"help") {
        QTextStream(command.isEmpty() ? stderr : stdout) << kUsage;
        return command.isEmpty() ? 2 : 0;
    }
    if (command == u"--version") {
        QTextStream(stdout) << "gleaner-coordinator " << GLEANER_VERSION << "\n";
        return 0;
    }
    if (command == u"init")
        return initCommand(rest);
    if (command == u"serve")
        return serveCommand(rest);
    if (command == u"job")
        return jobCommand(rest);
    if (command == u"token")
        return tokenCommand(rest);
    if (command == u"agent")
        return agentCommand(rest);
    if (command == u"key")
        return keyCommand(rest);
    QTextStream(stderr) << "gleaner-coordinator: unknown command \"" << command << "\"\n\n" << kUsage;
    return 2;
}

} // namespace gleaner::coordinator::cli
