#pragma once
// gleaner-coordinator's command line: `init`, `serve`, `job ...`, `token ...`, `agent ...`. Every command has
// --help; --json prints machine-readable output for scripts. Commands return the process exit code:
// 0 success, 1 the operation failed (the message says why), 2 the command line was wrong.

#include <QJsonObject>
#include <QStringList>

namespace gleaner::coordinator::cli {

int run(const QStringList& arguments);

// Shared by the commands.
int usageError(const QString& message, const QString& command);
int failure(const QString& message);
void printJson(const QJsonObject& object);

int initCommand(const QStringList& arguments);
int serveCommand(const QStringList& arguments);
int jobCommand(const QStringList& arguments);
int tokenCommand(const QStringList& arguments);
int agentCommand(const QStringList& arguments);
int keyCommand(const QStringList& arguments);

} // namespace gleaner::coordinator::cli
