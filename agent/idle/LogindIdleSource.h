#pragma once
// Idle time and idle inhibitors from systemd-logind (system bus, org.freedesktop.login1;
// org.freedesktop.login1(5)).
//
// Idle time: the IdleHint and IdleSinceHintMonotonic properties of our session,
// /org/freedesktop/login1/session/auto (the caller's session, or when the agent runs as a user service
// outside any session, the user's display session). How good they are depends on the session's Type:
//  - a graphical session (x11, wayland, mir): logind knows only what the desktop tells it through
//  SetIdleHint,
//    and GNOME sets the hint only once ITS idle delay (5 min by default) has passed; KDE sets none. So the
//    reading is a lower bound: 0 while the hint is off, the time since the hint while it is on. Marked
//    imprecise, used only when no precise source answers.
//  - a text session (tty, or unspecified with a terminal, e.g. ssh): logind takes IdleSinceHint from the last
//    access time of the session's terminal, whether or not IdleHint is set (the hint itself waits for
//    IdleActionSec). The time since then is the real idle time, to within the 8 s granularity at which the
//    kernel updates a terminal's access time. Precise.
//
// Inhibitors: Manager.ListInhibitors; one whose `what` contains "idle" and whose mode is "block" (or
// "block-weak") holds the machine awake (systemd-inhibit --what=idle ..., or a desktop that forwards its
// inhibitors to logind). logind's inhibitors are system-wide, whoever took them.

#include "DBusEndpoint.h"
#include "IdleSource.h"

namespace gleaner::agent {

class LogindIdleSource final : public IdleSource
{
public:
    explicit LogindIdleSource(QString sessionPath = QStringLiteral("/org/freedesktop/login1/session/auto"));
    QString name() const override { return QStringLiteral("logind"); }
    IdleReading readIdle() override;
    std::optional<InhibitorReading> readInhibitors() override;

private:
    DBusEndpoint m_session;
    DBusEndpoint m_manager;
};

} // namespace gleaner::agent
