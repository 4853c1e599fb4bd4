#pragma once
// Idle time from the X server's MIT-SCREEN-SAVER extension (ms_since_user_input of ScreenSaverQueryInfo), the
// same figure xprintidle and xscreensaver use: precise on any X11 desktop, whatever its desktop environment.
//
// Through XCB, not Xlib: Xlib calls exit() when the X server goes away, which would take the agent down with
// the owner's X session; XCB reports a broken connection and the source reconnects on a later sample.
// libxcb.so.1 and libxcb-screensaver.so.0 are opened with dlopen on first use, so the agent neither builds
// against nor needs X11 libraries on a headless machine; the XCB headers are used for the types only.
//
// The display is $DISPLAY (read at each connection attempt) unless one is given; the X server's authorisation
// is found the usual XCB way ($XAUTHORITY, else ~/.Xauthority). Under a Wayland session the X server is
// XWayland, which sees only the input that goes to X11 windows: its idle time says nothing of the user typing
// into a Wayland window, so the reading is marked imprecise there (WAYLAND_DISPLAY set or
// XDG_SESSION_TYPE=wayland).
//
// Cost of a sample: one round trip to the X server, waited for at most 200 ms; a server that does not answer
// in time is dropped and not asked again for 30 s. Connecting (xcb_connect, and the first query of the
// extension) has no timeout in XCB: a stopped X server can hold that for as long as it is stopped.

#include "IdleSource.h"

#include <QDeadlineTimer>

namespace gleaner::agent {

class X11IdleSource final : public IdleSource
{
public:
    explicit X11IdleSource(QString display = {});
    ~X11IdleSource() override;
    X11IdleSource(const X11IdleSource&) = delete;
    X11IdleSource& operator=(const X11IdleSource&) = delete;

    QString name() const override { return QStringLiteral("x11"); }
    IdleReading readIdle() override;

    bool connected() const { return m_connection != nullptr; }
    // Why the last reading failed ("DISPLAY is not set", "the X server :5 closed the connection"); empty
    // after a good one.
    QString unavailableReason() const { return m_reason; }

private:
    bool connect();
    void disconnect(const QString& reason);

    QString m_display;
    void* m_connection = nullptr; // xcb_connection_t*
    quint32 m_root = 0;           // the root window of the default screen
    QDeadlineTimer m_rest{0};
    QString m_reason;
};

} // namespace gleaner::agent
