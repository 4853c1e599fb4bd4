#pragma once
// gleaner-agent's commands that talk to a running agent over its control socket: status (--json, --follow),
// pause, resume, finish. Exit codes as AgentCli.h: 0 done, 1 failed (no agent running, the agent refused),
// 2 wrong command line.

#include <QString>
#include <QStringList>

namespace gleaner::agent::cli {

bool isControlCommand(const QString& command);
// `arguments` starts with the command's name: {"status", "--json"}.
int controlCommand(const QStringList& arguments);

} // namespace gleaner::agent::cli
