#pragma once
// The live events of a deployment's other coordinators, on this one's dashboard (docs/scale-out.md).
//
// Each coordinator appends what happens at it (a lease, an update, a fold, a validation, an agent's change)
// to one Redis stream of the deployment, and reads the others' entries from it at every tick: a dashboard
// shows the whole deployment's events whichever coordinator serves its stream, a tick or two late (250 ms
// each). One pipelined round trip per tick carries them both ways, however many events there were.
//
// The stream is capped (about kMaxEntries entries): a coordinator reads it only while a dashboard watches it,
// from the newest entry at the time the first one connected. Events are a view, not state: a Redis that does
// not answer costs the other coordinators' events for a while, never this coordinator's work (short timeouts,
// then a pause before the next try).
//
// State thread only (it owns a connection of its own).

#include <QByteArray>
#include <QJsonObject>
#include <QString>

#include <memory>
#include <vector>

namespace gleaner::coordinator {
class RedisConnection;
struct RedisReply;
} // namespace gleaner::coordinator

namespace gleaner::coordinator::dashboard {

class EventHub;

class EventRelay
{
public:
    static constexpr int kMaxEntries = 10'000;
    static constexpr int kReadPerTick = 1'000;
    static constexpr qint64 kPauseAfterFailureMs = 5'000;

    // `url`: the deployment's Redis; `stream`: its key; `origin`: this coordinator's name among the others
    // (its own entries are not handed back to it).
    EventRelay(QString url, QByteArray stream, QByteArray origin);
    ~EventRelay();
    EventRelay(const EventRelay&) = delete;
    EventRelay& operator=(const EventRelay&) = delete;

    // Queued for the next exchange (kept to kMaxEntries while Redis does not answer).
    void send(QByteArrayView type, const QJsonObject& data);
    // Sends what was queued and, while `hub` has clients, hands them the others' events since the last
    // exchange.
    void exchange(EventHub& hub, qint64 nowMs);

private:
    bool connected(qint64 nowMs);
    void failed(const QString& why, qint64 nowMs);
    void deliver(const RedisReply& read, EventHub& hub);

    QString m_url;
    QByteArray m_stream;
    QByteArray m_origin;
    std::unique_ptr<RedisConnection> m_redis;
    struct Pending
    {
        QByteArray type;
        QByteArray data;
    };
    std::vector<Pending> m_pending;
    QByteArray m_lastId; // the last entry read; empty: none read since no dashboard watched here
    qint64 m_retryAtMs = 0;
    bool m_failing = false;
};

} // namespace gleaner::coordinator::dashboard
