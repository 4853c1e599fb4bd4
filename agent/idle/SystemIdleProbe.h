#pragma once
// The idle probe the daemon uses: it asks the desktop's idle sources and reports the best answer, plus the
// idle inhibitors of every source that knows some (logind's and the session bus's are combined, whatever
// source gives the idle time).
//
// The preference (--idle-source) is "auto", "none" (no idle information at all: nothing touches D-Bus or X;
// for dedicated machines) or one source's name, forced: then only that source is asked, and when it does not
// answer the idle time is unknown.
//
// "auto" asks the sources in the order logind, mutter, screensaver, x11 and takes the first PRECISE answer;
// only if none is precise does it take the first imprecise one (a lower bound: see IdleReading::precise).
// That gives:
//  - GNOME (Wayland or X11): logind's session is graphical, so its hint (set after GNOME's 5-minute idle
//  delay) is
//    imprecise -> mutter, milliseconds since the last input;
//  - KDE Plasma on X11: no Mutter -> screensaver, KDE's GetSessionIdleTime in milliseconds;
//  - a plain X11 desktop (Xfce, i3, LXDE...): no precise D-Bus source -> x11 (MIT-SCREEN-SAVER);
//  - a text console or ssh session (the agent run by hand there): logind, the terminal's last access,
//  precise;
//  - KDE Plasma on Wayland: KDE refuses GetSessionIdleTime there and XWayland's time is meaningless, so the
//    imprecise logind hint is what is left, a lower bound that errs towards "the user is here".
// logind comes first in the order so that a text session is answered by it; mutter before screensaver because
// GNOME's screensaver name belongs to a proxy that does not know the idle time.
//
// Once chosen, a source is kept while it answers. When it stops answering (the compositor restarted, the X
// server went away) the next sample searches again. Every 60 s the sources that would rank better than the
// current one are asked again, so that a desktop service that appeared after the agent started is taken up.

#include "IdleProbe.h"
#include "IdleSource.h"
#include "Result.h"

#include <QStringList>

#include <memory>
#include <vector>

namespace gleaner::agent {

class SystemIdleProbe final : public IdleProbe
{
public:
    static constexpr qint64 kReprobeMs = 60'000;
    static constexpr qint64 kInhibitorsEveryMs = 2'000;

    // The real sources, in "auto" order.
    explicit SystemIdleProbe(const QString& preference = QStringLiteral("auto"));
    // For tests: these sources, in "auto" order, and this clock.
    SystemIdleProbe(const QString& preference, std::vector<std::unique_ptr<IdleSource>> sources,
                    MonotonicClock clock = steadyClock());
    ~SystemIdleProbe() override;

    IdleObservation sample() override;

    // The source names in "auto" order: logind, mutter, screensaver, x11.
    static QStringList sourceNames();
    // Every accepted preference: auto, none, the source names, and sessions (every session on the machine, for
    // the system service: SessionIdleSource; DesktopProbes::system builds it, with the session reports).
    static QStringList preferenceNames();
    // Whether --idle-source got an accepted value; the error names the value and the accepted ones.
    static Status checkPreference(const QString& preference);

    // The source now used ("" when none answers or the preference is "none").
    QString currentSource() const;

private:
    static std::vector<std::unique_ptr<IdleSource>> realSources();
    IdleReading readAuto();
    IdleReading readForced();
    void choose(int index, const IdleReading& reading);

    QString m_preference;
    std::vector<std::unique_ptr<IdleSource>> m_sources;
    MonotonicClock m_clock;
    int m_current = -1; // index into m_sources
    bool m_currentPrecise = false;
    qint64 m_nextReprobeMs = 0;
    qint64 m_inhibitorsReadMs = -1;
    bool m_inhibited = false;
    QString m_inhibitedBy;
};

} // namespace gleaner::agent
