#pragma once
// What a crash-safe write needs, in one place: syncing a file written in place, making a rename (or removal)
// durable by syncing the folder that holds the name, and named fault points at the steps where the order of
// durable writes matters.
//
// Fault points are for tests only. GLEANER_FAULT_POINT=NAME (or NAME:N for the Nth time the point is reached)
// in the environment makes the process end at once with _exit(86) when it gets there: the same state on disk as
// a kill at that instant, without the timing luck a real SIGKILL needs. Without the variable a point costs one
// relaxed atomic load.

#include "Result.h"

#include <QString>

namespace gleaner::Durability {

// fsync of the file `path` (written by someone else, e.g. an upload the HTTP layer streamed to disk).
Status syncFile(const QString& path);

// fsync of the folder `path`: a rename into it, or a removal from it, survives a power cut once this returns.
Status syncFolder(const QString& path);

// The exit code of a process ended by a fault point.
constexpr int kFaultExitCode = 86;
void faultPoint(const char* name);

} // namespace gleaner::Durability
