#include "control/ControlLogging.h"

namespace gleaner::agent {

Q_LOGGING_CATEGORY(lcControl, "gleaner.agent.control", QtInfoMsg)

} // namespace gleaner::agent
