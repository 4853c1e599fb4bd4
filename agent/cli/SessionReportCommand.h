#pragma once
// `gleaner-agent session-report`: the per-session helper of a shared workstation. Started in every graphical
// session by the autostart entry gleaner-session.desktop, it reads the session's own input idle time (the same
// sources a desktop agent uses) and reports it to the system agent's session socket every few seconds; the
// system agent takes the most active session. It never stops for a missing or restarting agent: it tries again
// at the next report, quietly.

#include <QStringList>

namespace gleaner::agent::cli {

int sessionReportCommand(const QStringList& arguments);

} // namespace gleaner::agent::cli
