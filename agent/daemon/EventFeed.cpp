#include "daemon/EventFeed.h"

#include "daemon/DaemonLogging.h"

namespace gleaner::agent {

namespace {
// Log lines kept for the status object, so a tray app that connects later shows what happened before.
constexpr qsizetype kRecentLogLines = 50;
} // namespace

void EventFeed::log(const QString& level, const QString& message)
{
    if (level == u"error")
        qCCritical(lcDaemon).noquote() << message;
    else if (level == u"warning")
        qCWarning(lcDaemon).noquote() << message;
    else
        qCInfo(lcDaemon).noquote() << message;
    QJsonObject event{{QStringLiteral("event"), QStringLiteral("log")},
                      {QStringLiteral("level"), level},
                      {QStringLiteral("message"), message},
                      {QStringLiteral("time_ms"), m_clock.nowMs()}};
    m_recentLog.append(event);
    if (m_recentLog.size() > kRecentLogLines)
        m_recentLog.removeFirst();
    Q_EMIT published(event);
}

} // namespace gleaner::agent
