#pragma once
// The tray app's picture of the agent: the status object of docs/control-protocol.md, kept current from the
// events the agent pushes. Pure functions over the JSON, so the merge rules are tested without a socket and
// members a newer agent adds pass through untouched.

#include <QDateTime>
#include <QJsonObject>
#include <QString>

namespace gleaner::gui {

// What the tray icon shows; the agent's seven states fold into five pictures.
enum class TrayState
{
    Training,
    Waiting,
    Paused,
    Error,
    Offline
};

// training and finishing (still computing): Training; waiting: Waiting; paused: Paused; error: Error;
// offline (no coordinator) and stopped: Offline; a state this program does not know: Waiting.
TrayState trayStateFor(const QString& agentState);
// "training", "waiting", "paused", "error", "offline": the icons' file names end in it.
QString trayStateName(TrayState state);
// The agent's state as a heading: "Training", "Finishing", "Stopped", ...
QString stateTitle(const QString& agentState);

// Applies a `state`, `subtask`, `progress` or `coordinator` event to `status`. A subtask that reached a final
// state (done, failed, dropped) leaves the list; `needsRefresh` is then set, because the totals it changed
// come with no event. Returns whether anything changed.
bool applyEvent(QJsonObject& status, const QJsonObject& event, bool* needsRefresh = nullptr);

// Paused by the user (`pause` or `snooze`), so the toggling action offers Resume.
bool isPausedByUser(const QJsonObject& status);
// The snooze's end, when the agent said (policy.snoozed_until_ms); invalid otherwise.
QDateTime snoozedUntil(const QJsonObject& status);

struct LogLine
{
    QDateTime time;
    QString level; // info, warning, error
    QString message;
};

} // namespace gleaner::gui
