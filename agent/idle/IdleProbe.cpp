#include "IdleProbe.h"

namespace gleaner::agent {

IdleProbe::~IdleProbe() = default;

} // namespace gleaner::agent
