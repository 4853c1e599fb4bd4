#include "control/ControlHandler.h"

namespace gleaner::agent {

// Out of line so the vtable has one home.
ControlHandler::~ControlHandler() = default;

} // namespace gleaner::agent
