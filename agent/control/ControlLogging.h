#pragma once
// The logging category of the agent's control socket: QT_LOGGING_RULES="gleaner.agent.control.debug=true"
// shows each connection, request and dropped client.

#include <QLoggingCategory>

namespace gleaner::agent {

Q_DECLARE_LOGGING_CATEGORY(lcControl)

} // namespace gleaner::agent
