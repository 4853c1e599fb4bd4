#pragma once
// Idle time from the session's screen saver (session bus, org.freedesktop.ScreenSaver, GetSessionIdleTime ->
// u), and the idle inhibitors that programs take through org.freedesktop.ScreenSaver.Inhibit (browsers
// playing video, mpv, LibreOffice Impress) or their desktop's own API.
//
// GetSessionIdleTime is in no written specification, and its unit depends on who owns the name:
//  - KDE Plasma (kscreenlocker, which also owns org.kde.screensaver): KIdleTime::idleTime(), MILLISECONDS
//  since
//    the last input, on X11; on Wayland it answers NotSupported, so this source is unavailable there.
//    Precise.
//  - the gnome-screensaver 2 family (mate-screensaver, xfce4-screensaver, cinnamon-screensaver): SECONDS
//  since
//    the screen saver declared the session idle (after its own idle delay), 0 before. A lower bound,
//    imprecise.
//  - GNOME 3+: gsd-screensaver-proxy owns the name for Inhibit only and refuses GetSessionIdleTime (GNOME's
//  idle
//    time comes from MutterIdleSource).
// The owner is told apart by whether the unique name that answered also owns org.kde.screensaver.
//
// Inhibitors, from the first of these services that answers:
//  - GNOME: org.gnome.SessionManager IsInhibited(8) (8 = GSM_INHIBITOR_FLAG_IDLE; gsd-screensaver-proxy
//  forwards
//    org.freedesktop.ScreenSaver.Inhibit there with that flag), then GetInhibitors and each inhibitor's
//    GetFlags/GetAppId/GetReason for who;
//  - KDE: org.kde.Solid.PowerManagement.PolicyAgent HasInhibition(4) (4 = ChangeScreenSettings, what
//    kscreenlocker's Inhibit asks PowerDevil for), then ListInhibitions -> a(ss) app and reason. Not
//    org.freedesktop.PowerManagement.Inhibit.HasInhibit: PowerDevil answers that for InterruptSession
//    (suspend) inhibitors only, so a download manager keeping the machine awake would look like a video;
//  - otherwise org.freedesktop.PowerManagement.Inhibit HasInhibit (xfce4-power-manager, which takes the
//    presentation-mode and screen saver inhibitors there): a yes or no, without who.

#include "DBusEndpoint.h"
#include "IdleSource.h"

namespace gleaner::agent {

class ScreenSaverIdleSource final : public IdleSource
{
public:
    ScreenSaverIdleSource();
    QString name() const override { return QStringLiteral("screensaver"); }
    IdleReading readIdle() override;
    std::optional<InhibitorReading> readInhibitors() override;

private:
    std::optional<InhibitorReading> gnomeInhibitors();
    std::optional<InhibitorReading> kdeInhibitors();

    DBusEndpoint m_screenSaver;
    DBusEndpoint m_bus; // org.freedesktop.DBus, to find the owner of org.kde.screensaver
    DBusEndpoint m_gnomeSession;
    DBusEndpoint m_kdePolicyAgent;
    DBusEndpoint m_fdoPowerManagement;
    QString m_owner; // unique name that last answered GetSessionIdleTime
    bool m_ownerIsKde = false;
};

} // namespace gleaner::agent
