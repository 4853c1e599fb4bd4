#pragma once
// The coordinator's threads are shared/util/SerialExecutor.h.
#include "util/SerialExecutor.h"

namespace gleaner::coordinator {
using gleaner::SerialExecutor;
} // namespace gleaner::coordinator
