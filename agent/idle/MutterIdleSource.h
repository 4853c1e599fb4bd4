#pragma once
// Idle time from GNOME's compositor: session bus, org.gnome.Mutter.IdleMonitor at
// /org/gnome/Mutter/IdleMonitor/Core, GetIdletime() -> t, milliseconds since the last input that Mutter saw.
// Mutter sees all input on Wayland and on X11 alike, so this is precise on any GNOME session (GNOME's own
// idle and screen-blank logic uses it). Inhibitors on GNOME come through ScreenSaverIdleSource
// (org.gnome.SessionManager).

#include "DBusEndpoint.h"
#include "IdleSource.h"

namespace gleaner::agent {

class MutterIdleSource final : public IdleSource
{
public:
    MutterIdleSource();
    QString name() const override { return QStringLiteral("mutter"); }
    IdleReading readIdle() override;

private:
    DBusEndpoint m_monitor;
};

} // namespace gleaner::agent
