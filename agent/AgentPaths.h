#pragma once
// Where an agent keeps its state when no --data-dir is given: the per-user data location for a volunteer's
// agent (~/.local/share/gleaner), /var/lib/gleaner for the system service of a managed machine.

#include <QString>

namespace gleaner::agent {

enum class AgentScope { User, System };

QString defaultDataDir(AgentScope scope);

// The agent's control socket (docs/control-protocol.md): <dataDir>/control.sock. A Unix socket's path must fit
// in sockaddr_un's sun_path (107 bytes and a NUL); for a data dir too deep for that, the socket lives in the
// user's runtime folder (XDG_RUNTIME_DIR, else the temporary folder) as gleaner-agent-<16 hex digits of the
// SHA-256 of the data dir's canonical path>.sock, so the daemon and every client still compute the same path.
QString controlSocketPath(const QString& dataDir);

} // namespace gleaner::agent
