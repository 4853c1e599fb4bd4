#include "SessionIdleSource.h"

#include "DBusEndpoint.h"

#include <QDBusArgument>
#include <QDBusMetaType>
#include <QDBusObjectPath>
#include <QVariantMap>

#include <algorithm>

namespace gleaner::agent {

namespace {

const QString kLogind = QStringLiteral("org.freedesktop.login1");

bool isGraphical(const QString& type)
{
    return type == u"x11" || type == u"wayland" || type == u"mir";
}

DBusEndpoint& manager()
{
    static DBusEndpoint endpoint(QDBusConnection::SystemBus, kLogind, QStringLiteral("/org/freedesktop/login1"),
                                 QStringLiteral("org.freedesktop.login1.Manager"));
    return endpoint;
}

} // namespace

SessionIdleSource::SessionIdleSource(std::shared_ptr<SessionReports> reports, LoginSessionLister sessions,
                                     MonotonicClock clock)
    : m_reports(std::move(reports)), m_lister(sessions ? std::move(sessions) : LoginSessionLister(&logindSessions)),
      m_clock(clock ? std::move(clock) : steadyClock()), m_lastSeenMs(m_clock())
{
}

IdleReading SessionIdleSource::readIdle()
{
    const qint64 now = m_clock();
    if (m_listedAtMs < 0 || now - m_listedAtMs >= kListEveryMs) {
        m_sessions = m_lister();
        m_listedAtMs = now;
    }
    const QList<SessionReports::Report> reports = m_reports ? m_reports->live(now) : QList<SessionReports::Report>();
    return combine(reports, m_sessions, now, m_lastSeenMs);
}

IdleReading SessionIdleSource::combine(const QList<SessionReports::Report>& reports,
                                       const std::optional<QList<LoginSession>>& sessions, qint64 nowMs,
                                       qint64& lastSeenMs)
{
    std::optional<IdleReading> best;
    const auto consider = [&](qint64 idleMs, bool precise) {
        idleMs = std::max<qint64>(0, idleMs);
        if (!best || idleMs < best->idleMs || (idleMs == best->idleMs && !precise))
            best = IdleReading{true, idleMs, precise};
    };
    QStringList reported;
    for (const SessionReports::Report& report : reports) {
        consider(report.idleMs + (nowMs - report.atMs), true);
        reported << report.session;
    }
    if (sessions) {
        // logind's idle timestamps are CLOCK_MONOTONIC in microseconds, the clock nowMs comes from.
        const qint64 nowUs = nowMs * 1000;
        for (const LoginSession& session : *sessions) {
            if (session.sessionClass != u"user" || reported.contains(session.id))
                continue;
            const qint64 sinceMs =
                session.idleSinceMonotonicUs > 0 && session.idleSinceMonotonicUs <= nowUs
                    ? (nowUs - session.idleSinceMonotonicUs) / 1000
                    : -1;
            if (isGraphical(session.type))
                consider(session.idleHint && sinceMs >= 0 ? sinceMs : 0, false);
            else if (sinceMs >= 0)
                consider(sinceMs, true);
            else
                consider(0, false); // a session logind cannot date: someone may be there
        }
    }
    if (best) {
        lastSeenMs = nowMs - best->idleMs;
        return *best;
    }
    // Nobody logged in.
    return IdleReading{true, std::max<qint64>(0, nowMs - lastSeenMs), true};
}

namespace {

// ListSessions alone: each session's id and uid, and its object path for the properties.
std::optional<QList<std::pair<LoginSession, QDBusObjectPath>>> listSessions()
{
    const std::optional<QDBusMessage> reply = manager().call(QStringLiteral("ListSessions"));
    if (!reply || reply->arguments().isEmpty())
        return std::nullopt;
    // a(susso): id, uid, user, seat, object path.
    const QDBusArgument list = reply->arguments().constFirst().value<QDBusArgument>();
    if (list.currentType() != QDBusArgument::ArrayType)
        return std::nullopt;
    QList<std::pair<LoginSession, QDBusObjectPath>> sessions;
    list.beginArray();
    while (!list.atEnd()) {
        LoginSession session;
        uint uid = 0;
        QString user, seat;
        QDBusObjectPath path;
        list.beginStructure();
        list >> session.id >> uid >> user >> seat >> path;
        list.endStructure();
        session.uid = uid;
        sessions.append({session, path});
    }
    list.endArray();
    return sessions;
}

} // namespace

std::optional<QList<LoginSession>> SessionIdleSource::logindSessions()
{
    const auto listed = listSessions();
    if (!listed)
        return std::nullopt;
    QList<LoginSession> sessions;
    for (const auto& [listedSession, path] : *listed) {
        sessions << listedSession;
        const std::optional<QDBusMessage> properties =
            manager().callObject(path.path(), QStringLiteral("org.freedesktop.DBus.Properties"),
                                 QStringLiteral("GetAll"), {QStringLiteral("org.freedesktop.login1.Session")});
        if (!properties || properties->arguments().isEmpty())
            continue; // the session ended meanwhile: its class stays empty and it is skipped
        const QVariantMap map = qdbus_cast<QVariantMap>(properties->arguments().constFirst());
        LoginSession& session = sessions.last();
        session.type = map.value(QStringLiteral("Type")).toString();
        session.sessionClass = map.value(QStringLiteral("Class")).toString();
        session.idleHint = map.value(QStringLiteral("IdleHint")).toBool();
        session.idleSinceMonotonicUs = map.value(QStringLiteral("IdleSinceHintMonotonic")).toLongLong();
    }
    return sessions;
}

SessionReports::Owner SessionIdleSource::logindOwner(const QString& session)
{
    const auto sessions = listSessions(); // one call: the ids and uids are all it needs
    if (!sessions)
        return {};
    for (const auto& [s, path] : *sessions)
        if (s.id == session)
            return {true, s.uid};
    return {true, -2}; // logind answers and does not know the session: nobody's
}

} // namespace gleaner::agent
