#pragma once
// The idle source of the system agent on a shared workstation ("sessions"): the most active of every session
// on the machine. Sessions whose helper reports (SessionReports) count with their reported idle time; the
// sessions logind lists that report nothing count as logind knows them: a text console or ssh session by its
// terminal's last access (precise), a graphical session without a helper by its idle hint (a lower bound, 0
// until the desktop sets the hint: the agent errs towards "someone is here"). With nobody logged in the machine
// is idle since the last session was seen (or since the agent started).

#include "IdleSource.h"
#include "SessionReports.h"

#include <QList>

#include <memory>
#include <optional>

namespace gleaner::agent {

struct LoginSession
{
    QString id;
    qint64 uid = -1;
    QString type;         // tty, x11, wayland, mir, unspecified
    QString sessionClass; // user, greeter, lock-screen, background
    bool idleHint = false;
    qint64 idleSinceMonotonicUs = 0; // 0: unknown
};

// logind's sessions now, or nothing when logind cannot be asked.
using LoginSessionLister = std::function<std::optional<QList<LoginSession>>()>;

class SessionIdleSource final : public IdleSource
{
public:
    static constexpr qint64 kListEveryMs = 2'000;

    // `sessions` null or `clock` empty: the real ones (logind over the system bus, CLOCK_MONOTONIC).
    SessionIdleSource(std::shared_ptr<SessionReports> reports, LoginSessionLister sessions = {},
                      MonotonicClock clock = {});
    QString name() const override { return QStringLiteral("sessions"); }
    IdleReading readIdle() override;

    // The reading for these reports and sessions at `nowMs` (monotonic ms); `lastSeenMs` is when a session
    // was last present, and is updated.
    static IdleReading combine(const QList<SessionReports::Report>& reports,
                               const std::optional<QList<LoginSession>>& sessions, qint64 nowMs,
                               qint64& lastSeenMs);

    // logind's sessions over the system bus; also the owner lookup SessionReports takes.
    static std::optional<QList<LoginSession>> logindSessions();
    static SessionReports::Owner logindOwner(const QString& session);

private:
    std::shared_ptr<SessionReports> m_reports;
    LoginSessionLister m_lister;
    MonotonicClock m_clock;
    std::optional<QList<LoginSession>> m_sessions;
    qint64 m_listedAtMs = -1;
    qint64 m_lastSeenMs;
};

} // namespace gleaner::agent
