#pragma once
// Puts the calling process at the lowest priorities the OS has, so training only ever uses what nobody else
// wants: nice 19, the SCHED_IDLE scheduling class and the idle I/O class on Linux. Returns what it could not
// set, for the log; none of it is an error (a container may forbid some).

#include <QStringList>

namespace gleaner::agent {

QStringList lowerProcessPriority();

} // namespace gleaner::agent
