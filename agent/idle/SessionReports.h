#pragma once
// What the system agent of a shared workstation knows of the people at it. The system service runs in no
// session, so it cannot ask a desktop for input idle time; instead every graphical session's helper
// (`gleaner-agent session-report`, started by the session's autostart entry) reports its own session's idle
// time over the agent's session socket (docs/fleet.md, "A shared workstation"), and logind lists the
// sessions that report nothing (text consoles, ssh, a desktop without the helper).
//
// The agent takes the most active session: the smallest idle time of all. A report names its session and comes
// with the peer credentials of the connection it arrived on; a session logind knows must belong to that uid, so
// one desk user cannot speak for another's session. The worst a report can do is keep the agent paused: it
// cannot hide another session's activity, because the minimum wins. A report lasts kStaleMs, or until its
// connection closes (the session ended).

#include "Result.h"

#include <QHash>
#include <QList>
#include <QString>

#include <functional>
#include <optional>

namespace gleaner::agent {

struct SessionPeer
{
    qint64 connection = 0; // the session socket's serial for the connection
    qint64 uid = -1;       // from SO_PEERCRED
    qint64 pid = -1;
};

class SessionReports
{
public:
    static constexpr qint64 kStaleMs = 30'000;
    static constexpr qint64 kMaxIdleMs = 366LL * 86'400'000;
    static constexpr int kMaxSessions = 256;

    struct Report
    {
        QString session;
        qint64 uid = -1;
        qint64 idleMs = 0; // as reported
        qint64 atMs = 0;   // the monotonic time it arrived
        QString source;    // the helper's idle source, for the log ("mutter", "x11", ...)
    };

    // Who owns a session according to logind: its uid, or nothing when logind does not know the session or
    // cannot be asked (then `known` is false and the report is taken on trust).
    struct Owner
    {
        bool known = false;
        qint64 uid = -1;
    };
    using OwnerLookup = std::function<Owner(const QString& session)>;

    explicit SessionReports(OwnerLookup owner = {});

    // A report from `peer`: `session` (1 to 64 of [A-Za-z0-9_-]) idle for `idleMs` (0 to a year) at `nowMs`.
    // Refused, with a sentence for the helper: a malformed report, a session logind gives to another user, a
    // connection that already reports for another session, or too many sessions.
    Status record(const SessionPeer& peer, const QString& session, qint64 idleMs, qint64 nowMs,
                  const QString& source = {});
    // The connection closed: its session's report goes.
    void forget(qint64 connection);
    // The reports younger than kStaleMs at `nowMs`.
    QList<Report> live(qint64 nowMs) const;

private:
    OwnerLookup m_owner;
    QHash<qint64, Report> m_byConnection;
};

} // namespace gleaner::agent
