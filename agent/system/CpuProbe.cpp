#include "CpuProbe.h"

namespace gleaner::agent {

CpuProbe::~CpuProbe() = default;

} // namespace gleaner::agent
