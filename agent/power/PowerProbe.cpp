#include "PowerProbe.h"

namespace gleaner::agent {

PowerProbe::~PowerProbe() = default;

} // namespace gleaner::agent
