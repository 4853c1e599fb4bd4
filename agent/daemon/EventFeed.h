#pragma once
// What the agent tells people and programs as it goes: each log line goes to the journal (category
// "gleaner.agent") and, like every other event, to the control socket's subscribers; the last lines are kept
// for the status, so that a tray app that connects later shows what happened before. Per machine: every part
// of the daemon speaks through the one feed, on the event loop's thread.

#include "util/Clock.h"

#include <QJsonObject>
#include <QList>
#include <QObject>

namespace gleaner::agent {

// A duration as a log line says it: "40 s", "3 min".
inline QString spokenDuration(qint64 ms)
{
    return ms >= 120'000 ? QStringLiteral("%1 min").arg((ms + 30'000) / 60'000)
                         : QStringLiteral("%1 s").arg((ms + 999) / 1000);
}

class EventFeed final : public QObject
{
    Q_OBJECT
public:
    explicit EventFeed(const Clock& clock) : m_clock(clock) {}

    // `level`: "info", "warning" or "error".
    void log(const QString& level, const QString& message);
    void publish(const QJsonObject& event) { Q_EMIT published(event); }
    // The last log events, oldest first.
    const QList<QJsonObject>& recentLog() const { return m_recentLog; }

Q_SIGNALS:
    void published(const QJsonObject& event);

private:
    const Clock& m_clock;
    QList<QJsonObject> m_recentLog;
};

} // namespace gleaner::agent
