#pragma once
// One way of learning the user's idle time: a desktop service (logind, GNOME's Mutter, a screen saver on the
// session bus) or the X server. SystemIdleProbe holds several and uses the best that answers. Each source is
// one file, Linux-only; a Windows (GetLastInputInfo) or macOS (IOHIDSystem HIDIdleTime) source would be
// another.

#include <QString>
#include <QStringList>

#include <functional>
#include <optional>
#include <utility>

namespace gleaner::agent {

struct IdleReading
{
    bool available = false; // the source answered
    qint64 idleMs = 0;      // since the last input
    // False when idleMs is only a lower bound: logind's idle hint on a graphical session (set by the desktop
    // only after ITS idle delay), a screen saver that counts from the moment it considered the session idle,
    // the X server of XWayland (which sees none of the input going to Wayland windows, so it is not even a
    // bound).
    bool precise = true;
};

struct InhibitorReading
{
    bool inhibited = false;
    QStringList by; // "firefox (video playing)", one entry per inhibitor that says who it is
};

class IdleSource
{
public:
    virtual ~IdleSource();
    // "logind", "mutter", "screensaver", "x11": the name in IdleObservation::source and --idle-source.
    virtual QString name() const = 0;
    virtual IdleReading readIdle() = 0;
    // What the source's desktop services know of idle inhibitors, or nothing when it has none to ask.
    virtual std::optional<InhibitorReading> readInhibitors() { return std::nullopt; }
};

// Milliseconds of a monotonic clock; injected so that SystemIdleProbe's re-probing is tested without waiting.
using MonotonicClock = std::function<qint64()>;
MonotonicClock steadyClock();

// A source that answers what the test sets, and counts how often it was asked.
class FakeIdleSource final : public IdleSource
{
public:
    explicit FakeIdleSource(QString name) : m_name(std::move(name)) {}
    QString name() const override { return m_name; }
    IdleReading readIdle() override
    {
        ++reads;
        return next;
    }
    std::optional<InhibitorReading> readInhibitors() override { return inhibitors; }

    IdleReading next;
    std::optional<InhibitorReading> inhibitors;
    int reads = 0;

private:
    QString m_name;
};

} // namespace gleaner::agent
