#include "events/EventHub.h"

#include <QJsonDocument>
#include <QLoggingCategory>

#include <algorithm>

Q_LOGGING_CATEGORY(lcEvents, "gleaner.coordinator.events")

namespace gleaner::coordinator::dashboard {

// ---- EventSubscriber
// ----------------------------------------------------------------------------------------

EventSubscriber::EventSubscriber(qsizetype maxEvents, qsizetype maxBytes)
    : m_maxEvents(maxEvents), m_maxBytes(maxBytes)
{
}

bool EventSubscriber::push(const std::shared_ptr<const QByteArray>& event)
{
    std::function<void()> wake;
    bool accepted = true;
    {
        std::lock_guard lock(m_mutex);
        if (m_dropped || m_closed)
            return !m_dropped;
        if (qsizetype(m_queue.size()) >= m_maxEvents || m_bytes + event->size() > m_maxBytes) {
            // The client reads slower than events come: no queue grows without bound on its behalf.
            m_dropped = true;
            m_queue.clear();
            m_bytes = 0;
            accepted = false;
        } else {
            m_queue.push_back(event);
            m_bytes += event->size();
        }
        wake = m_wake;
    }
    if (wake)
        wake();
    return accepted;
}

QByteArray EventSubscriber::take()
{
    std::lock_guard lock(m_mutex);
    QByteArray out;
    out.reserve(m_bytes);
    for (const auto& event : m_queue)
        out += *event;
    m_queue.clear();
    m_bytes = 0;
    return out;
}

bool EventSubscriber::dropped() const
{
    std::lock_guard lock(m_mutex);
    return m_dropped;
}

void EventSubscriber::close()
{
    std::function<void()> wake;
    {
        std::lock_guard lock(m_mutex);
        m_closed = true;
        wake = m_wake;
    }
    if (wake)
        wake();
}

bool EventSubscriber::closed() const
{
    std::lock_guard lock(m_mutex);
    return m_closed;
}

void EventSubscriber::setWake(std::function<void()> wake)
{
    bool pending = false;
    {
        std::lock_guard lock(m_mutex);
        m_wake = wake;
        pending = !m_queue.empty() || m_dropped || m_closed;
    }
    if (pending && wake)
        wake();
}

// ---- EventHub
// -----------------------------------------------------------------------------------------------

EventHub::EventHub() : EventHub(Limits{}) {}

EventHub::EventHub(Limits limits) : m_limits(limits) {}

void EventHub::setDropObserver(std::function<void()> observer)
{
    std::lock_guard lock(m_mutex);
    m_dropObserver = std::move(observer);
}

std::shared_ptr<EventSubscriber> EventHub::subscribe()
{
    std::lock_guard lock(m_mutex);
    if (int(m_subscribers.size()) >= m_limits.maxClients)
        return nullptr;
    auto subscriber = std::make_shared<EventSubscriber>(m_limits.maxQueuedEvents, m_limits.maxQueuedBytes);
    m_subscribers.push_back(subscriber);
    m_count.store(int(m_subscribers.size()), std::memory_order_relaxed);
    return subscriber;
}

void EventHub::unsubscribe(const EventSubscriber* subscriber)
{
    std::lock_guard lock(m_mutex);
    std::erase_if(m_subscribers, [&](const auto& s) { return s.get() == subscriber; });
    m_count.store(int(m_subscribers.size()), std::memory_order_relaxed);
}

QByteArray EventHub::format(quint64 id, QByteArrayView type, const QJsonObject& data)
{
    // Compact JSON has no line breaks (they are escaped inside strings), so one data line carries it.
    return "id: " + QByteArray::number(id) + "\nevent: " + type.toByteArray() +
           "\ndata: " + QJsonDocument(data).toJson(QJsonDocument::Compact) + "\n\n";
}

void EventHub::deliver(const std::shared_ptr<const QByteArray>& text)
{
    std::vector<std::shared_ptr<EventSubscriber>> targets;
    std::function<void()> observer;
    {
        std::lock_guard lock(m_mutex);
        targets = m_subscribers;
        observer = m_dropObserver;
    }
    for (const auto& subscriber : targets) {
        if (subscriber->dropped())
            continue;
        if (!subscriber->push(text)) {
            qCInfo(lcEvents, "dropped a dashboard client: %lld events or %lld bytes queued and unread",
                   static_cast<long long>(m_limits.maxQueuedEvents),
                   static_cast<long long>(m_limits.maxQueuedBytes));
            if (observer)
                observer();
        }
    }
}

void EventHub::publish(QByteArrayView type, const QJsonObject& data)
{
    if (!hasSubscribers())
        return;
    const quint64 id = m_nextId.fetch_add(1, std::memory_order_relaxed);
    deliver(std::make_shared<const QByteArray>(format(id, type, data)));
    m_lastSentMs.store(0, std::memory_order_relaxed); // the next heartbeat measures from its own clock
}

void EventHub::heartbeat(qint64 nowMs)
{
    if (!hasSubscribers())
        return;
    qint64 last = m_lastSentMs.load(std::memory_order_relaxed);
    if (last == 0) {
        // Something was published since the last heartbeat check: count the quiet time from now.
        m_lastSentMs.compare_exchange_strong(last, nowMs, std::memory_order_relaxed);
        return;
    }
    if (nowMs - last < m_limits.heartbeatMs)
        return;
    m_lastSentMs.store(nowMs, std::memory_order_relaxed);
    static const auto kHeartbeat = std::make_shared<const QByteArray>(QByteArrayLiteral(": keep-alive\n\n"));
    deliver(kHeartbeat);
}

void EventHub::closeAll()
{
    std::vector<std::shared_ptr<EventSubscriber>> targets;
    {
        std::lock_guard lock(m_mutex);
        targets = m_subscribers;
    }
    for (const auto& subscriber : targets)
        subscriber->close();
}

} // namespace gleaner::coordinator::dashboard
