#pragma once
// NVIDIA GPUs through NVML, the library the driver installs (libnvidia-ml.so.1, the same one nvidia-smi
// uses). It is opened with dlopen at the first sample rather than linked, so the agent builds and runs on
// machines without the driver, and NVML's headers are not needed to build it. A missing library, a missing
// symbol or a failing nvmlInit (driver not loaded, version mismatch after an upgrade) is remembered: the
// probe answers known=false from then on without retrying, as a driver does not appear while the agent runs.
// No driver at all is the common case (every CPU-only machine), so the probe does not log it: the agent says
// it once in its log and in its status (driverMissing()). A driver that is there but fails is a warning.
//
// Cost of a sample: one utilisation query per GPU (microseconds; the driver keeps the figures); the names are
// read once.

#include "GpuProbe.h"

#include <QString>
#include <QStringList>

#include <memory>

namespace gleaner::agent {

class NvmlGpuProbe final : public GpuProbe
{
public:
    // `library` is for tests (a fake NVML built with them); the default is the driver's.
    explicit NvmlGpuProbe(QString library = QStringLiteral("libnvidia-ml.so.1"));
    ~NvmlGpuProbe() override;
    GpuObservation sample() override;

    // Why the last sample knew nothing ("no NVIDIA driver: libnvidia-ml.so.1 is not installed ..."), for logs
    // and the status; empty when it knew.
    QString unavailableReason() const { return m_reason; }
    // The library is not on this machine (no NVIDIA driver): a fact about the machine, not a fault.
    bool driverMissing() const { return m_driverMissing; }

private:
    struct Nvml;
    bool open();

    QString m_library;
    std::unique_ptr<Nvml> m_nvml;
    bool m_tried = false;
    bool m_driverMissing = false;
    QString m_reason;
};

} // namespace gleaner::agent
