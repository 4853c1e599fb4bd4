#pragma once
// What the desktop tests and the agent benchmarks share: a real coordinator and a real agent in desktop
// mode (no --dedicated) reading the user's idle time from the X server of tests/tools/with-xvfb.sh, a pointer
// moved with xdotool as a user would, and waiting on the agent's pushed control events.

#include "E2eCluster.h"

#include "control/ControlConnection.h"

#include <QJsonObject>

#include <functional>
#include <memory>

namespace gleaner::e2e {

// `xdotool mousemove_relative` on $DISPLAY: user input the X server sees.
Status moveThePointer();

// A coordinator with a CNN job whose subtasks train for minutes, and one enrolled agent started in desktop
// mode with `preferences` written into its folder first (idle_seconds etc.), `--idle-source x11` and `options`.
struct DesktopAgent
{
    int agent = -1;
    std::unique_ptr<agent::ControlConnection> control; // subscribed to events
};
Result<DesktopAgent> startDesktopAgent(E2eCluster& cluster, const QJsonObject& preferences,
                                       const QStringList& options = {});

// Connects to the control socket of the agent of `dataDir` as soon as it listens (an agent just started),
// subscribed to its events when `subscribe`; fails after `timeoutMs` with the last reason.
Result<std::unique_ptr<agent::ControlConnection>> connectWhenUp(const QString& dataDir, int timeoutMs,
                                                                bool subscribe = true);

// Reads events until one satisfies `match`; fails with what was seen when `timeoutMs` passes.
Result<QJsonObject> waitForEvent(agent::ControlConnection& control,
                                 const std::function<bool(const QJsonObject&)>& match, int timeoutMs,
                                 const QString& what);
// Drops the events that arrived so far.
void drainEvents(agent::ControlConnection& control);

bool isStateEvent(const QJsonObject& event, const QString& state, const QString& reasonCode = {});
bool isSubtaskEvent(const QJsonObject& event, const QString& state);

} // namespace gleaner::e2e
