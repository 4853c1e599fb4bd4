#pragma once
// What the daemon's own files share (a few constants and helpers). Private to the daemon: the classes it is made
// of (TaskFiles, LeaseDesk, ...) have their own headers.

#include "daemon/AgentDaemon.h"

#include "daemon/DaemonLogging.h"
#include "daemon/Departure.h"
#include "daemon/LeaseDesk.h"
#include "daemon/NetworkHop.h"
#include "daemon/TaskFiles.h"

namespace gleaner::agent {

namespace daemon_detail {

// Tries of one step (a download, a progress check) before the coordinator being away is reported in the log
// as a problem; the step is still tried again after that, with the longest backoff.
inline constexpr int kDownloadTriesBeforeFailing = 6;
inline constexpr qint64 kPublishProgressEveryMs = 500;
// Subtasks failed in a row after which the agent's state is "error" (a wrong pinned key, a broken worker).
inline constexpr int kFailuresBeforeError = 3;
// Log lines kept for the status object, so a tray app that connects later shows what happened before.
inline constexpr qsizetype kRecentLogLines = 50;

} // namespace daemon_detail

} // namespace gleaner::agent
