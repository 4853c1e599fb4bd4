#pragma once
// What NVIDIA GPUs the machine has and how busy they are, for the policy's `gpu` preference and the status.
// No NVIDIA driver is the common case on a volunteer's desktop: that is "no GPU info" (known false), never an
// error.
//
// NvmlGpuProbe reads NVIDIA's NVML, which Windows drivers ship too (nvml.dll), so a Windows build needs only
// another library name; other vendors would be other files behind this interface.

#include "policy/Observation.h"

namespace gleaner::agent {

class GpuProbe
{
public:
    virtual ~GpuProbe();
    virtual GpuObservation sample() = 0;
};

class FakeGpuProbe final : public GpuProbe
{
public:
    GpuObservation next;
    GpuObservation sample() override { return next; }
};

} // namespace gleaner::agent
