#pragma once
// The daemon's log category ("gleaner.agent"), shared by the classes the daemon is made of, so that its log
// reads as one whatever class writes a line.

#include <QLoggingCategory>

namespace gleaner::agent {

Q_DECLARE_LOGGING_CATEGORY(lcDaemon)

} // namespace gleaner::agent
