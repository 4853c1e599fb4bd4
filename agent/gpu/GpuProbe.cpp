#include "GpuProbe.h"

namespace gleaner::agent {

GpuProbe::~GpuProbe() = default;

} // namespace gleaner::agent
