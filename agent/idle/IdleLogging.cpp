#include "IdleLogging.h"

namespace gleaner::agent {

Q_LOGGING_CATEGORY(lcIdle, "gleaner.agent.idle")

} // namespace gleaner::agent
