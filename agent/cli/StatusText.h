#pragma once
// What `gleaner-agent status` prints for a person: the daemon's status object and its events
// (docs/control-protocol.md) as text. Pure functions of their input, so the wording is tested without a
// daemon. Every field may be absent or null; what is missing is left out, never printed as "null" or 0.

#include <QJsonObject>
#include <QString>

namespace gleaner::agent::cli {

// The summary: state and reason, the agent, the coordinator and whether it is reachable, each subtask with
// its job, epoch, shard, state, progress, loss, speed and time left, and the totals. `nowMs` (ms since the
// epoch) turns a subtask's deadline_ms into "lease ends in ..."; 0 leaves deadlines out. Ends with a newline.
QString formatStatus(const QJsonObject& status, qint64 nowMs = 0);

// One line (no newline) for an event of `status --follow`.
QString formatEvent(const QJsonObject& event);

// 45 s, 4 min 10 s, 2 h 5 min, 3 d 4 h.
QString formatDuration(double seconds);

} // namespace gleaner::agent::cli
