#pragma once
// What the daemon's own files share (a few constants and helpers). Private to the daemon: the classes it is made
// of (TaskFiles, LeaseDesk, ...) have their own headers.

#include "daemon/AgentDaemon.h"

#include "daemon/DaemonLogging.h"
#include "daemon/LeaseDesk.h"
#include "daemon/NetworkHop.h"
#include "daemon/TaskFiles.h"

namespace gleaner::agent {

namespace daemon_detail {

// Tries of one step (a download, a progress check) before the coordinator being away is reported in the log
// as a problem; the step is still tried again after that, with the longest backoff.
inline constexpr int kDownloadTriesBeforeFailing = 6;
inline constexpr qint64 kShutdownGraceMs = 8'000;
// A leaving agent keeps this much of its grace budget for the end: persisting what stays and letting the workers of
// what was not handed back write their checkpoints.
inline constexpr qint64 kLeaveMarginMs = 1'500;
inline constexpr qint64 kPublishProgressEveryMs = 500;
// Subtasks failed in a row after which the agent's state is "error" (a wrong pinned key, a broken worker).
inline constexpr int kFailuresBeforeError = 3;
// Log lines kept for the status object, so a tray app that connects later shows what happened before.
inline constexpr qsizetype kRecentLogLines = 50;

inline QString seconds(qint64 ms)
{
    return ms >= 120'000 ? QStringLiteral("%1 min").arg((ms + 30'000) / 60'000)
                         : QStringLiteral("%1 s").arg((ms + 999) / 1000);
}

} // namespace daemon_detail

} // namespace gleaner::agent
