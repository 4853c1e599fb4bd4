#include "http/HttpResponseSlot.h"

#include "http/HttpSession.h"

#include <boost/asio/post.hpp>

namespace gleaner::coordinator::http_detail {

ResponseSlot::ResponseSlot(std::weak_ptr<HttpSession> session, boost::asio::any_io_executor executor,
                           std::shared_ptr<ServerLifetime> lifetime)
    : m_session(std::move(session)), m_executor(std::move(executor)), m_lifetime(std::move(lifetime))
{
}

ResponseSlot::~ResponseSlot()
{
    if (claim())
        post(HttpResponse::error(500, QStringLiteral("the server could not answer this request")), false);
}

void ResponseSlot::post(HttpResponse response, bool fromHandler)
{
    // Held while posting: stop() clears `running` under this lock before the io_context goes away.
    std::lock_guard lock(m_lifetime->mutex);
    if (!m_lifetime->running)
        return;
    boost::asio::post(m_executor,
                      [session = m_session, response = std::move(response), fromHandler]() mutable {
                          if (const std::shared_ptr<HttpSession> alive = session.lock())
                              alive->onHandlerAnswer(std::move(response), fromHandler);
                      });
}

} // namespace gleaner::coordinator::http_detail
