#pragma once
// The process's open-file limit (RLIMIT_NOFILE) against the connections the server may hold. Every connection
// is a socket, and an upload in flight is a file besides; many systems start a process with a soft limit of
// 1024, far below the server's maxConnections, and the accept loop then fails with EMFILE instead of refusing
// cleanly at the cap. `serve` raises the soft limit to the hard one and sizes maxConnections to what fits.

#include "Result.h"

#include <QtGlobal>

namespace gleaner::coordinator {

struct OpenFileLimit
{
    quint64 soft = 0;     // in force now
    quint64 hard = 0;     // the most the soft limit may be raised to without privileges
    quint64 previous = 0; // the soft limit before raiseOpenFileLimit()
};

// Raises the soft limit to the hard limit (or to the kernel's ceiling when the hard one is unlimited). The
// error names the limit that could not be read or set.
Result<OpenFileLimit> raiseOpenFileLimit();

// Files kept for everything but connections: the database and its journal, blobs being served or hashed,
// the validation and weights threads, the log.
inline constexpr quint64 kFilesBesidesConnections = 256;

// How many connections fit in `openFiles`: each may hold its socket and an upload file. Never above `wanted`,
// at least 1.
int connectionsThatFit(quint64 openFiles, int wanted);

} // namespace gleaner::coordinator
