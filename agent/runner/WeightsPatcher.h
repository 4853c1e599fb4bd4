#pragma once
// Builds a lease's weights file from an earlier one this agent holds and a patch the signed manifest offers
// (docs/protocol.md, section 8.5), instead of downloading the file. Every file involved is checked by its signed
// SHA-256: the patch as it is committed to the cache, the patched weights as they are. A base missing from the
// cache, one altered on disk, a patch that does not arrive or does not apply: each is an error, and the caller
// downloads the full file; a file that differs from the coordinator's never reaches a worker.

#include "Result.h"
#include "runner/TaskManifest.h"

#include <functional>

namespace gleaner::agent {

class FileCache;

// Fetches the file `sha256` of `size` bytes into `path` (resuming what is there), as CoordinatorClient::download.
using FetchFile = std::function<Status(const QString& sha256, const QString& path, qint64 size)>;

// Tries the patches whose earlier file the cache holds, smallest first; on success the weights are in the cache
// and the result is the bytes fetched (0 when the patch was cached already).
Result<qint64> patchWeights(FileCache& cache, const ManifestFile& weights, const QList<ManifestPatch>& patches,
                            const FetchFile& fetch);

} // namespace gleaner::agent
