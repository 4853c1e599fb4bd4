#pragma once
// The body of GET /api/v1/admin/events: one dashboard client's queue of the EventHub, written by the HTTP
// connection as Server-Sent Events. It opens with a retry hint and a `hello` event, and ends when the client
// is dropped for being slow, when the hub closes, or when the connection goes.

#include "events/EventHub.h"
#include "http/HttpTypes.h"

namespace gleaner::coordinator::dashboard {

class EventStream final : public ResponseStream
{
public:
    // `hello` is the data of the first event (the server's time, so the page can relate its clock to ours).
    EventStream(EventHub& hub, std::shared_ptr<EventSubscriber> subscriber, QJsonObject hello);
    ~EventStream() override;

    void start(std::function<void()> wake) override;
    Chunk next() override;
    void finish() override;

    // The answer that carries a new stream, or 503 when the hub has no room for another client.
    static HttpResponse open(EventHub& hub, QJsonObject hello);

private:
    EventHub& m_hub;
    std::shared_ptr<EventSubscriber> m_subscriber;
    QJsonObject m_hello;
    bool m_started = false;
    bool m_finished = false;
};

} // namespace gleaner::coordinator::dashboard
