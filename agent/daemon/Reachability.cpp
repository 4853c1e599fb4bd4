#include "daemon/Reachability.h"

#include "daemon/EventFeed.h"

namespace gleaner::agent {

bool Reachability::reached()
{
    if (m_reachable)
        return false;
    m_reachable = true;
    m_lastError.clear();
    m_feed.log(QStringLiteral("info"), QStringLiteral("the coordinator %1 answers again").arg(m_url));
    m_feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                               {QStringLiteral("reachable"), true},
                               {QStringLiteral("last_error"), QJsonValue::Null}});
    return true;
}

void Reachability::unreachable(const QString& error)
{
    const bool changed = m_reachable || m_lastError != error;
    m_reachable = false;
    m_lastError = error;
    if (changed)
        m_feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                                   {QStringLiteral("reachable"), false},
                                   {QStringLiteral("last_error"), error}});
}

} // namespace gleaner::agent
