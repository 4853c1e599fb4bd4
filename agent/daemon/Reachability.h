#pragma once
// Whether one project's coordinator answers, and what its last failure said: for the agent's state
// ("offline") and the control socket's "coordinator" events, sent only when that changes. Per project; on the
// event loop's thread.

#include <QString>

namespace gleaner::agent {

class EventFeed;

class Reachability
{
public:
    Reachability(QString coordinatorUrl, EventFeed& feed) : m_url(std::move(coordinatorUrl)), m_feed(feed) {}

    // A call was answered: true when the coordinator had been unreachable until now (steps that wait for it
    // may go on at once).
    bool reached();
    void unreachable(const QString& error);

    bool reachable() const { return m_reachable; }
    const QString& lastError() const { return m_lastError; }

private:
    const QString m_url;
    EventFeed& m_feed;
    bool m_reachable = true;
    QString m_lastError;
};

} // namespace gleaner::agent
