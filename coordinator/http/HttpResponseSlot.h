#pragma once
// Internal to coordinator/http (includes Asio): the state shared by the copies of one request's Responder.
// Whoever claims it first answers the request: the handler, the handler timeout, an exception, or the
// server's shutdown. A Responder whose last copy goes without being called answers 500 at once, so a
// forgotten error path in a handler costs one request, not a connection held until the handler timeout.

#include "http/HttpServerState.h"
#include "http/HttpTypes.h"

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <memory>

namespace gleaner::coordinator::http_detail {

class HttpSession;

class ResponseSlot
{
public:
    ResponseSlot(std::weak_ptr<HttpSession> session, boost::asio::any_io_executor executor,
                 std::shared_ptr<ServerLifetime> lifetime);
    ~ResponseSlot();
    ResponseSlot(const ResponseSlot&) = delete;
    ResponseSlot& operator=(const ResponseSlot&) = delete;

    // True for the first caller only.
    bool claim() { return !m_claimed.exchange(true); }

    // Any thread: hands `response` to the connection on its strand, if the connection and the server still
    // exist. `fromHandler` false: the server answers for a handler that did not.
    void post(HttpResponse response, bool fromHandler);

private:
    std::atomic<bool> m_claimed{false};
    const std::weak_ptr<HttpSession> m_session;
    const boost::asio::any_io_executor m_executor;
    const std::shared_ptr<ServerLifetime> m_lifetime;
};

} // namespace gleaner::coordinator::http_detail
