#pragma once
// Where an agent keeps its state when no --data-dir is given: the per-user data location for a volunteer's
// agent (~/.local/share/gleaner), /var/lib/gleaner for the system service of a managed machine.

#include <QString>

namespace gleaner::agent {

enum class AgentScope { User, System };

QString defaultDataDir(AgentScope scope);

} // namespace gleaner::agent
