#pragma once
// How busy the machine is with programs other than Gleaner, for the policy's `other_cpu_limit_percent`: the
// agent must step back when the owner's own work needs the CPU, but its own workers must not count, or it
// would stop itself as soon as it starts. A sample is a difference between two readings, so the first one
// knows nothing.
//
// ProcCpuProbe reads Linux's /proc; a Windows (GetSystemTimes + job-object accounting) or macOS
// (host_processor_info + proc_pid_rusage) source would be one more file behind this interface.

#include "policy/Observation.h"

namespace gleaner::agent {

class CpuProbe
{
public:
    virtual ~CpuProbe();
    // Cheap enough for every policy tick, but it is a difference: call it at a steady pace (every few
    // seconds), since the share is averaged over the time between two calls.
    virtual CpuObservation sample() = 0;
};

class FakeCpuProbe final : public CpuProbe
{
public:
    CpuObservation next;
    CpuObservation sample() override { return next; }
};

} // namespace gleaner::agent
