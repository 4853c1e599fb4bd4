#pragma once
// The logging category of the agent's network layer: QT_LOGGING_RULES="gleaner.agent.net.debug=true" shows each
// request, retry and resume.

#include <QLoggingCategory>

namespace gleaner::agent {

Q_DECLARE_LOGGING_CATEGORY(lcNet)

} // namespace gleaner::agent
