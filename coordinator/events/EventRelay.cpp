#include "events/EventRelay.h"

#include "events/EventHub.h"
#include "store/RedisConnection.h"
#include "util/SerialExecutor.h"

#include <QJsonDocument>
#include <QLoggingCategory>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcEvents)

namespace gleaner::coordinator::dashboard {
namespace {

// Short: each try costs the relay's thread this long at most per step (connect, AUTH, SELECT, the exchange).
constexpr RedisConnection::Timeouts kTimeouts{1'000, 1'000};

// The value of `field` among an entry's field-value pairs; empty when it has none.
QByteArray fieldOf(const RedisReply& fields, QByteArrayView field)
{
    for (size_t i = 0; i + 1 < fields.elements.size(); i += 2)
        if (fields.elements[i].text == field)
            return fields.elements[i + 1].text;
    return {};
}

// An event type as coordinators write them ("lease", "lease_expired"): it becomes a line of the page's event
// stream, where anything else (a line break) could forge other lines.
bool isEventType(const QByteArray& type)
{
    return !type.isEmpty() && type.size() <= 32 &&
           std::all_of(type.begin(), type.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}

} // namespace

EventRelay::EventRelay(QString url, QByteArray stream, QByteArray origin)
    : m_url(std::move(url)), m_stream(std::move(stream)), m_origin(std::move(origin)),
      m_thread(std::make_unique<SerialExecutor>())
{
}

EventRelay::~EventRelay()
{
    m_thread.reset(); // the exchange under way ends first
}

void EventRelay::send(QByteArrayView type, const QJsonObject& data)
{
    Pending event{type.toByteArray(), QJsonDocument(data).toJson(QJsonDocument::Compact)};
    std::lock_guard lock(m_mutex);
    if (m_pending.size() >= size_t(kMaxEntries))
        m_pending.pop_front(); // the oldest: a stream this long keeps no more either
    m_pending.push_back(std::move(event));
}

void EventRelay::exchange(EventHub& hub, qint64 nowMs)
{
    if (m_busy.exchange(true))
        return;
    m_thread->post([this, &hub, nowMs] {
        run(hub, nowMs);
        m_busy = false;
    });
}

void EventRelay::flush()
{
    m_thread->call([] {});
}

bool EventRelay::connected(qint64 nowMs)
{
    if (m_redis)
        return true;
    if (nowMs < m_retryAtMs)
        return false;
    auto redis = RedisConnection::open(m_url, kTimeouts);
    if (!redis) {
        failed(redis.error(), nowMs);
        return false;
    }
    m_redis = std::move(*redis);
    return true;
}

void EventRelay::failed(const QString& why, qint64 nowMs)
{
    if (!m_failing)
        qCWarning(lcEvents).noquote()
            << QStringLiteral(
                   "the other coordinators' live events are not relayed (tried again every %1 s): %2")
                   .arg(kPauseAfterFailureMs / 1000)
                   .arg(why);
    m_failing = true;
    m_redis.reset();
    m_retryAtMs = nowMs + kPauseAfterFailureMs;
}

void EventRelay::requeue(std::deque<Pending> unsent)
{
    // Sent at the next try, before what came since, within the bound.
    std::lock_guard lock(m_mutex);
    while (!unsent.empty() && m_pending.size() < size_t(kMaxEntries)) {
        m_pending.push_front(std::move(unsent.back()));
        unsent.pop_back();
    }
}

void EventRelay::run(EventHub& hub, qint64 nowMs)
{
    const bool watched = hub.hasSubscribers();
    if (!watched)
        m_lastId.clear(); // the next dashboard starts from what its page fetches, and the newest entry
    if (!m_redis && nowMs < m_retryAtMs)
        return; // pausing after a failure: what is queued waits where it is
    std::deque<Pending> pending;
    {
        std::lock_guard lock(m_mutex);
        pending.swap(m_pending);
    }
    if (pending.empty() && !watched)
        return;
    if (!connected(nowMs)) {
        requeue(std::move(pending));
        return;
    }
    for (const Pending& event : pending)
        m_redis->queue({"XADD", m_stream, "MAXLEN", "~", QByteArray::number(kMaxEntries), "*", "o", m_origin,
                        "t", event.type, "d", event.data});
    const bool reads = watched && !m_lastId.isEmpty();
    if (watched && !reads)
        m_redis->queue({"XREVRANGE", m_stream, "+", "-", "COUNT", "1"});
    else if (reads)
        m_redis->queue({"XREAD", "COUNT", QByteArray::number(kReadPerTick), "STREAMS", m_stream, m_lastId});
    auto replies = m_redis->replies();
    if (!replies) {
        failed(replies.error(), nowMs);
        requeue(std::move(pending));
        return;
    }
    for (const RedisReply& reply : *replies)
        if (reply.type == RedisReply::Type::Error) { // not sent again: Redis refused them, not the network
            failed(QString::fromUtf8(reply.text), nowMs);
            return;
        }
    if (m_failing)
        qCInfo(lcEvents) << "the other coordinators' live events are relayed again";
    m_failing = false;
    if (!watched)
        return;
    const RedisReply& last = replies->back();
    if (!reads) {
        // The newest entry (perhaps one this exchange just sent): the others' events after it from here on.
        m_lastId = last.elements.empty() || last.elements[0].elements.empty()
                       ? QByteArray("0-0")
                       : last.elements[0].elements[0].text;
        return;
    }
    deliver(last, hub);
}

void EventRelay::deliver(const RedisReply& read, EventHub& hub)
{
    // XREAD: nil when nothing is new, else [[stream, [[id, [field, value, ...]], ...]]].
    if (read.type != RedisReply::Type::Array || read.elements.empty() || read.elements[0].elements.size() < 2)
        return;
    for (const RedisReply& entry : read.elements[0].elements[1].elements) {
        if (entry.elements.size() < 2)
            continue;
        m_lastId = entry.elements[0].text;
        const RedisReply& fields = entry.elements[1];
        if (fieldOf(fields, "o") == m_origin)
            continue;
        const QByteArray type = fieldOf(fields, "t");
        const QJsonDocument data = QJsonDocument::fromJson(fieldOf(fields, "d"));
        if (!isEventType(type) || !data.isObject())
            continue; // not an entry a coordinator wrote
        hub.publish(type, data.object());
    }
}

} // namespace gleaner::coordinator::dashboard
