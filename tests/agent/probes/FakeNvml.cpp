// A stand-in for NVIDIA's libnvidia-ml.so.1 with two GPUs, exporting the NVML functions NvmlGpuProbe resolves
// with dlsym (signatures as in nvml.h). FAKE_NVML_INIT_ERROR in the environment makes nvmlInit_v2 fail as on
// a machine whose driver module is not loaded. The counters let the test check init and shutdown pair up.

#include <cstdio>
#include <cstdlib>

extern "C" {

struct nvmlDevice_st
{
    unsigned int index;
};

struct FakeUtilization
{
    unsigned int gpu;
    unsigned int memory;
};

__attribute__((visibility("default"))) int fakeNvmlInits = 0;
__attribute__((visibility("default"))) int fakeNvmlShutdowns = 0;

static nvmlDevice_st devices[2] = {{0}, {1}};

__attribute__((visibility("default"))) int nvmlInit_v2()
{
    ++fakeNvmlInits;
    return std::getenv("FAKE_NVML_INIT_ERROR") ? 9 : 0; // NVML_ERROR_DRIVER_NOT_LOADED
}

__attribute__((visibility("default"))) int nvmlShutdown()
{
    ++fakeNvmlShutdowns;
    return 0;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int code)
{
    return code == 9 ? "Driver Not Loaded" : "Unknown Error";
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count)
{
    *count = 2;
    return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                         nvmlDevice_st** device)
{
    if (index >= 2)
        return 2; // NVML_ERROR_INVALID_ARGUMENT
    *device = &devices[index];
    return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetName(nvmlDevice_st* device, char* name,
                                                             unsigned int length)
{
    std::snprintf(name, length, "%s",
                  device->index == 0 ? "NVIDIA GeForce RTX 3060" : "NVIDIA RTX A2000 12GB");
    return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(nvmlDevice_st* device,
                                                                         FakeUtilization* utilization)
{
    utilization->gpu = device->index == 0 ? 12 : 87;
    utilization->memory = 5;
    return 0;
}

} // extern "C"
