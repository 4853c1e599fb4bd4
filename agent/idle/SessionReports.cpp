#include "SessionReports.h"

#include <QRegularExpression>

namespace gleaner::agent {

SessionReports::SessionReports(OwnerLookup owner) : m_owner(std::move(owner)) {}

Status SessionReports::record(const SessionPeer& peer, const QString& session, qint64 idleMs, qint64 nowMs,
                              const QString& source)
{
    static const QRegularExpression name(QStringLiteral("^[A-Za-z0-9_-]{1,64}$"));
    if (!name.match(session).hasMatch())
        return fail(QStringLiteral("\"session\" must be the session's id ($XDG_SESSION_ID): 1 to 64 letters, "
                                   "digits, '_' or '-'"));
    if (idleMs < 0 || idleMs > kMaxIdleMs)
        return fail(QStringLiteral("\"idle_ms\" must be from 0 to %1").arg(kMaxIdleMs));
    const auto existing = m_byConnection.constFind(peer.connection);
    if (existing != m_byConnection.cend() && existing->session != session)
        return fail(QStringLiteral("this connection reports for session %1; one connection speaks for one session")
                        .arg(existing->session));
    if (existing == m_byConnection.cend()) {
        if (m_byConnection.size() >= kMaxSessions)
            return fail(QStringLiteral("the agent already hears %1 sessions").arg(kMaxSessions));
        if (m_owner) {
            const Owner owner = m_owner(session);
            if (owner.known && owner.uid != peer.uid)
                return fail(QStringLiteral("session %1 is not yours").arg(session));
        }
    }
    Report& report = m_byConnection[peer.connection];
    report.session = session;
    report.uid = peer.uid;
    report.idleMs = idleMs;
    report.atMs = nowMs;
    report.source = source.left(32);
    return {};
}

void SessionReports::forget(qint64 connection)
{
    m_byConnection.remove(connection);
}

QList<SessionReports::Report> SessionReports::live(qint64 nowMs) const
{
    QList<Report> out;
    for (const Report& report : m_byConnection)
        if (nowMs - report.atMs <= kStaleMs)
            out << report;
    return out;
}

} // namespace gleaner::agent
