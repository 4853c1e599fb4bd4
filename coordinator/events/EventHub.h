#pragma once
// Live events for the dashboard (Server-Sent Events, docs/dashboard.md): the coordinator publishes from its
// threads, every connected page gets a copy through its own bounded queue, and the HTTP connection drains
// that queue on its own strand (EventStream).
//
// An event is formatted once ("id: N\nevent: TYPE\ndata: JSON\n\n") and shared by every queue. A client whose
// queue passes its bound (it reads slower than events come) is dropped: its queue is emptied, its stream
// ends, and the page reconnects and reloads its picture. Publishing with no client connected costs one atomic
// load.

#include <QByteArray>
#include <QJsonObject>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace gleaner::coordinator::dashboard {

class EventSubscriber
{
public:
    EventSubscriber(qsizetype maxEvents, qsizetype maxBytes);

    // Any thread. False when this client was dropped (now or before).
    bool push(const std::shared_ptr<const QByteArray>& event);
    // The connection's strand: everything queued, in order; empty when nothing is.
    QByteArray take();
    bool dropped() const;
    // Any thread: the stream ends once what is queued is written (the server or the hub is closing).
    void close();
    bool closed() const;
    // Called (from the publishing thread, outside any lock) whenever there is something to take.
    void setWake(std::function<void()> wake);

private:
    const qsizetype m_maxEvents;
    const qsizetype m_maxBytes;
    mutable std::mutex m_mutex;
    std::deque<std::shared_ptr<const QByteArray>> m_queue;
    qsizetype m_bytes = 0;
    bool m_dropped = false;
    bool m_closed = false;
    std::function<void()> m_wake;
};

class EventHub
{
public:
    struct Limits
    {
        qsizetype maxQueuedEvents = 1024;
        qsizetype maxQueuedBytes = 4 * 1024 * 1024;
        int maxClients = 64;
        qint64 heartbeatMs = 15'000;
    };
    EventHub();
    explicit EventHub(Limits limits);

    // Called whenever a client is dropped for being slow (metrics).
    void setDropObserver(std::function<void()> observer);

    // Any thread. Null when maxClients are connected already.
    std::shared_ptr<EventSubscriber> subscribe();
    void unsubscribe(const EventSubscriber* subscriber);
    bool hasSubscribers() const noexcept { return m_count.load(std::memory_order_relaxed) > 0; }
    int subscribers() const noexcept { return m_count.load(std::memory_order_relaxed); }

    // Any thread: one event to every client.
    void publish(QByteArrayView type, const QJsonObject& data);
    // Any thread, called periodically: a comment line to every client when nothing was sent for heartbeatMs,
    // so that proxies keep the connection and a vanished client is noticed by the failing write.
    void heartbeat(qint64 nowMs);
    // Ends every stream (their connections close once they have written what is queued).
    void closeAll();

    // The SSE text of one event (exposed for tests).
    static QByteArray format(quint64 id, QByteArrayView type, const QJsonObject& data);

private:
    void deliver(const std::shared_ptr<const QByteArray>& text);

    const Limits m_limits;
    mutable std::mutex m_mutex;
    std::vector<std::shared_ptr<EventSubscriber>> m_subscribers;
    std::atomic<int> m_count{0};
    std::atomic<quint64> m_nextId{1};
    std::atomic<qint64> m_lastSentMs{0};
    std::function<void()> m_dropObserver;
};

} // namespace gleaner::coordinator::dashboard
