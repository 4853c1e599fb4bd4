#pragma once
// The logging category of the idle probes: QT_LOGGING_RULES="gleaner.agent.idle.debug=true" shows every
// source's answer and every D-Bus failure; switches between sources are logged at info level.

#include <QLoggingCategory>

namespace gleaner::agent {

Q_DECLARE_LOGGING_CATEGORY(lcIdle)

} // namespace gleaner::agent
