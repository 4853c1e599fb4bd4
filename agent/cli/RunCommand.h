#pragma once
// `gleaner-agent run`: the daemon in the foreground (AgentDaemon), its control socket, and SIGTERM / SIGINT
// handling (workers checkpoint, state is kept, the process exits within seconds).

#include <QStringList>

namespace gleaner::agent::cli {

int runCommand(const QStringList& arguments);

} // namespace gleaner::agent::cli
