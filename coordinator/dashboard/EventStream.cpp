#include "dashboard/EventStream.h"

namespace gleaner::coordinator::dashboard {

namespace {
// EventSource waits this long before it reconnects after the stream ends.
constexpr int kRetryMs = 2000;
} // namespace

EventStream::EventStream(EventHub& hub, std::shared_ptr<EventSubscriber> subscriber, QJsonObject hello)
    : m_hub(hub), m_subscriber(std::move(subscriber)), m_hello(std::move(hello))
{
}

EventStream::~EventStream()
{
    finish();
}

void EventStream::start(std::function<void()> wake)
{
    m_subscriber->setWake(std::move(wake));
}

ResponseStream::Chunk EventStream::next()
{
    Chunk chunk;
    if (!m_started) {
        m_started = true;
        chunk.bytes =
            "retry: " + QByteArray::number(kRetryMs) + "\n\n" + EventHub::format(0, "hello", m_hello);
    }
    if (m_subscriber->dropped()) {
        chunk.bytes += ": dropped: this client did not read its events in time; reconnect\n\n";
        chunk.end = true;
        return chunk;
    }
    chunk.bytes += m_subscriber->take();
    // Closed: end once everything queued before the close is out.
    chunk.end = m_subscriber->closed();
    return chunk;
}

void EventStream::finish()
{
    if (m_finished)
        return;
    m_finished = true;
    m_subscriber->setWake({});
    m_hub.unsubscribe(m_subscriber.get());
}

HttpResponse EventStream::open(EventHub& hub, QJsonObject hello)
{
    auto subscriber = hub.subscribe();
    if (!subscriber)
        return HttpResponse::error(
            503, QStringLiteral("too many live dashboard connections; close a tab and retry"));
    HttpResponse response;
    response.status = 200;
    response.contentType = "text/event-stream; charset=utf-8";
    response.headers.append(HttpHeader{"Cache-Control", "no-store"});
    response.headers.append(HttpHeader{"X-Accel-Buffering", "no"}); // nginx: pass events on at once
    response.stream = std::make_shared<EventStream>(hub, std::move(subscriber), std::move(hello));
    return response;
}

} // namespace gleaner::coordinator::dashboard
