#include "NvmlGpuProbe.h"

#include <QFile>
#include <QLoggingCategory>

#include <dlfcn.h>

#include <cerrno>
#include <cstring>

#include <utility>

namespace gleaner::agent {

namespace {

Q_LOGGING_CATEGORY(lcGpu, "gleaner.agent.gpu")

// The few NVML declarations the probe needs, as nvml.h declares them (NVML API Reference, "Initialization and
// Cleanup", "Device Queries" and "Device Structs"; https://docs.nvidia.com/deploy/nvml-api/). The _v2 entry
// points exist since driver 325 (2013) and are what nvml.h's macros map the plain names to.
using nvmlReturn_t = int; // an enum in nvml.h; NVML_SUCCESS is 0
constexpr nvmlReturn_t NVML_SUCCESS = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t
{
    unsigned int gpu; // percent of time over the past sample period during which a kernel was executing
    unsigned int
        memory; // percent of time over the past sample period during which memory was read or written
};
constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetNameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);

} // namespace

struct NvmlGpuProbe::Nvml
{
    void* handle = nullptr;
    bool initialised = false;
    InitFn init = nullptr;
    ShutdownFn shutdown = nullptr;
    ErrorStringFn errorString = nullptr;
    GetCountFn getCount = nullptr;
    GetHandleFn getHandle = nullptr;
    GetNameFn getName = nullptr;
    GetUtilizationFn getUtilization = nullptr;
    QStringList names; // by index, read once

    QString error(nvmlReturn_t code) const
    {
        return errorString ? QString::fromUtf8(errorString(code)) : QStringLiteral("NVML error %1").arg(code);
    }

    ~Nvml()
    {
        if (initialised && shutdown)
            shutdown();
        if (handle)
            dlclose(handle);
    }
};

NvmlGpuProbe::NvmlGpuProbe(QString library) : m_library(std::move(library)) {}

NvmlGpuProbe::~NvmlGpuProbe() = default;

bool NvmlGpuProbe::open()
{
    m_tried = true;
    auto nvml = std::make_unique<Nvml>();
    nvml->handle = dlopen(QFile::encodeName(m_library).constData(), RTLD_NOW | RTLD_LOCAL);
    if (!nvml->handle) {
        const QString error = QString::fromLocal8Bit(dlerror());
        // dlerror gives "LIBRARY: cannot open shared object file: " and strerror(ENOENT), in the user's
        // language, when the library itself is absent; a library that is there but cannot be loaded (another
        // architecture, a damaged file, a dependency of its own missing) is a broken driver.
        m_driverMissing = error.startsWith(m_library + u':') &&
                          error.contains(QString::fromLocal8Bit(std::strerror(ENOENT)));
        if (m_driverMissing) {
            m_reason =
                QStringLiteral("no NVIDIA driver (%1 is not installed), so no GPU information; install "
                               "the NVIDIA driver to let Gleaner use an NVIDIA GPU")
                    .arg(m_library);
            return false;
        }
        m_reason = QStringLiteral("%1 could not be loaded (%2); reinstall the NVIDIA driver to let Gleaner "
                                  "use the GPU")
                       .arg(m_library, error);
        qCWarning(lcGpu).noquote() << m_reason;
        return false;
    }
    const auto symbol = [&](const char* name) { return dlsym(nvml->handle, name); };
    nvml->init = reinterpret_cast<InitFn>(symbol("nvmlInit_v2"));
    nvml->shutdown = reinterpret_cast<ShutdownFn>(symbol("nvmlShutdown"));
    nvml->errorString = reinterpret_cast<ErrorStringFn>(symbol("nvmlErrorString"));
    nvml->getCount = reinterpret_cast<GetCountFn>(symbol("nvmlDeviceGetCount_v2"));
    nvml->getHandle = reinterpret_cast<GetHandleFn>(symbol("nvmlDeviceGetHandleByIndex_v2"));
    nvml->getName = reinterpret_cast<GetNameFn>(symbol("nvmlDeviceGetName"));
    nvml->getUtilization = reinterpret_cast<GetUtilizationFn>(symbol("nvmlDeviceGetUtilizationRates"));
    if (!nvml->init || !nvml->shutdown || !nvml->getCount || !nvml->getHandle || !nvml->getName ||
        !nvml->getUtilization) {
        m_reason =
            QStringLiteral("%1 lacks an NVML function Gleaner needs (the driver is older than version 325?); "
                           "update the NVIDIA driver to let Gleaner use the GPU")
                .arg(m_library);
        qCWarning(lcGpu).noquote() << m_reason;
        return false;
    }
    if (const nvmlReturn_t rc = nvml->init(); rc != NVML_SUCCESS) {
        m_reason =
            QStringLiteral("nvmlInit from %1 failed: %2; if the driver was just upgraded, restarting the "
                           "machine loads the matching kernel module")
                .arg(m_library, nvml->error(rc));
        qCWarning(lcGpu).noquote() << m_reason;
        return false;
    }
    nvml->initialised = true;
    m_nvml = std::move(nvml);
    return true;
}

GpuObservation NvmlGpuProbe::sample()
{
    if (!m_nvml && (m_tried || !open()))
        return {};
    Nvml& nvml = *m_nvml;
    unsigned int count = 0;
    if (const nvmlReturn_t rc = nvml.getCount(&count); rc != NVML_SUCCESS) {
        m_reason = QStringLiteral("nvmlDeviceGetCount failed: %1").arg(nvml.error(rc));
        qCWarning(lcGpu).noquote() << m_reason;
        return {};
    }
    GpuObservation observation;
    observation.known = true;
    observation.count = static_cast<int>(count);
    if (nvml.names.size() < static_cast<qsizetype>(count))
        nvml.names.resize(count);
    for (unsigned int i = 0; i < count; ++i) {
        nvmlDevice_t device = nullptr;
        if (nvml.getHandle(i, &device) != NVML_SUCCESS)
            continue; // a GPU that fell off the bus or that we may not access: the others still count
        if (nvml.names[i].isEmpty()) {
            char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
            if (nvml.getName(device, name, sizeof name) == NVML_SUCCESS)
                nvml.names[i] = QString::fromUtf8(name, qstrnlen(name, sizeof name));
        }
        nvmlUtilization_t utilisation{};
        if (nvml.getUtilization(device, &utilisation) == NVML_SUCCESS)
            observation.utilisationPercent =
                qMax(observation.utilisationPercent, static_cast<int>(qMin(utilisation.gpu, 100u)));
    }
    if (count > 0)
        observation.name = nvml.names.first();
    m_reason.clear();
    return observation;
}

} // namespace gleaner::agent
