#pragma once
// The live events of a deployment's other coordinators, on this one's dashboard (docs/scale-out.md).
//
// Each coordinator appends what happens at it (a lease, an update, a fold, a validation, an agent's change)
// to one Redis stream of the deployment, and reads the others' entries from it at every tick: a dashboard
// shows the whole deployment's events whichever coordinator serves its stream, a tick or two late (250 ms
// each). One pipelined round trip per tick carries them both ways, however many events there were.
//
// The stream is capped (about kMaxEntries entries): a coordinator reads it only while a dashboard watches it,
// from the newest entry at the time the first one connected. Events are a view, not state: the exchange runs
// on the relay's own thread, so a Redis that is slow or gone costs the other coordinators' events for a while
// (short timeouts, then a pause before the next try), never the coordinator's work.

#include <QByteArray>
#include <QJsonObject>
#include <QString>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

namespace gleaner {
class SerialExecutor;
}
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

    // Any thread: queued for the next exchange (kept to kMaxEntries while Redis does not answer).
    void send(QByteArrayView type, const QJsonObject& data);
    // Any thread: starts an exchange on the relay's thread, unless one is under way. It sends what was queued
    // and, while `hub` has clients, hands them the others' events since the last exchange. `hub` must outlive
    // the relay.
    void exchange(EventHub& hub, qint64 nowMs);
    // Any thread: returns once the exchange under way, if any, is done (tests, shutdown).
    void flush();

private:
    struct Pending
    {
        QByteArray type;
        QByteArray data;
    };
    // The relay's thread.
    void run(EventHub& hub, qint64 nowMs);
    bool connected(qint64 nowMs);
    void failed(const QString& why, qint64 nowMs);
    void requeue(std::deque<Pending> unsent);
    void deliver(const RedisReply& read, EventHub& hub);

    const QString m_url;
    const QByteArray m_stream;
    const QByteArray m_origin;
    std::mutex m_mutex;
    std::deque<Pending> m_pending; // guarded by m_mutex
    std::atomic<bool> m_busy{false};
    // The relay's thread only.
    std::unique_ptr<RedisConnection> m_redis;
    QByteArray m_lastId; // the last entry read; empty: none read since no dashboard watched here
    qint64 m_retryAtMs = 0;
    bool m_failing = false;
    std::unique_ptr<SerialExecutor> m_thread; // last: stopped (its tasks run) before the members it uses go
};

} // namespace gleaner::coordinator::dashboard
