#include "http/HttpServerState.h"

namespace gleaner::coordinator::http_detail {

HttpServerState::HttpServerState(HttpServerOptions options_, RequestHandler& handler_)
    : options(std::move(options_)), handler(handler_), tls(boost::asio::ssl::context::tls_server)
{
}

void HttpServerState::beginStop()
{
    std::lock_guard lock(m_mutex);
    m_stopping = true;
}

HttpServerState::Admission HttpServerState::addSession(const std::shared_ptr<HttpSession>& session,
                                                       const QString& remoteKey, bool fromProxy)
{
    std::lock_guard lock(m_mutex);
    if (m_stopping)
        return Admission::Stopping;
    if (m_sessions.size() >= std::size_t(qMax(1, options.maxConnections)))
        return Admission::ServerFull;
    int& fromAddress = m_perAddress[remoteKey];
    if (!fromProxy && fromAddress >= qMax(1, options.maxConnectionsPerAddress))
        return Admission::AddressFull;
    ++fromAddress;
    m_sessions.emplace(session.get(), Entry{session, remoteKey});
    return Admission::Admitted;
}

void HttpServerState::removeSession(HttpSession* session)
{
    {
        std::lock_guard lock(m_mutex);
        const auto found = m_sessions.find(session);
        if (found == m_sessions.end())
            return; // refused at accept: never counted
        const auto address = m_perAddress.find(found->second.remoteKey);
        if (address != m_perAddress.end() && --address.value() <= 0)
            m_perAddress.erase(address);
        m_sessions.erase(found);
    }
    m_changed.notify_all();
}

std::vector<std::shared_ptr<HttpSession>> HttpServerState::sessions() const
{
    std::lock_guard lock(m_mutex);
    std::vector<std::shared_ptr<HttpSession>> alive;
    alive.reserve(m_sessions.size());
    for (const auto& entry : m_sessions) {
        if (std::shared_ptr<HttpSession> session = entry.second.session.lock())
            alive.push_back(std::move(session));
    }
    return alive;
}

bool HttpServerState::waitUntilNoSessions(std::chrono::steady_clock::time_point deadline)
{
    std::unique_lock lock(m_mutex);
    return m_changed.wait_until(lock, deadline, [this] { return m_sessions.empty(); });
}

} // namespace gleaner::coordinator::http_detail
