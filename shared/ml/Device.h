#pragma once
// Where gleaner_ml computes. The device is always chosen explicitly ("cpu", "cuda", "cuda:1"): Debian's
// libtorch is CPU-only, a GPU machine's libtorch is not, and the same code must build and behave on both.

#include "Result.h"

#include <QString>

namespace gleaner::ml {

// Validates a device request against this machine: "cpu" always; "cuda" / "cuda:N" when this libtorch has
// CUDA and the device exists; "auto" picks cuda:0 when present, else cpu. Returns the canonical name.
Result<QString> resolveDevice(const QString& request);

bool cudaAvailable();
int cudaDeviceCount();
// The libtorch version this build runs against, e.g. "1.13.1".
QString torchVersion();

} // namespace gleaner::ml
