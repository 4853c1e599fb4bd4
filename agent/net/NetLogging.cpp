#include "NetLogging.h"

namespace gleaner::agent {

Q_LOGGING_CATEGORY(lcNet, "gleaner.agent.net")

} // namespace gleaner::agent
