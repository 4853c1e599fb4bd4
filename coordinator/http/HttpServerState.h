#pragma once
// Internal to coordinator/http (includes Asio): what an HttpServer shares with its connections, and the
// registry that lets stop() reach them.

#include "http/HttpServer.h"

#include <boost/asio/ssl/context.hpp>

#include <QHash>
#include <QString>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gleaner::coordinator::http_detail {

class HttpSession;

// A Responder may be called from any thread at any time, even after the server stopped; it posts onto the
// io_context only while this says the io_context still exists.
struct ServerLifetime
{
    std::mutex mutex;
    bool running = true;
};

class HttpServerState
{
public:
    HttpServerState(HttpServerOptions options, RequestHandler& handler);

    const HttpServerOptions options;
    RequestHandler& handler;
    boost::asio::ssl::context tls;
    const std::shared_ptr<ServerLifetime> lifetime = std::make_shared<ServerLifetime>();

    bool stopping() const { return m_stopping.load(); }
    // Sets stopping under the registry lock, so no connection registers after stop() took its snapshot.
    void beginStop();

    enum class Admission
    {
        Admitted,
        Stopping,
        ServerFull,  // maxConnections are open
        AddressFull, // maxConnectionsPerAddress are open from the session's remoteKey
    };
    // Registers a new connection from `remoteKey` (see RequestHead::remoteKey) unless one of the caps is reached.
    // A trusted proxy's connections (`fromProxy`) are not held to maxConnectionsPerAddress.
    Admission addSession(const std::shared_ptr<HttpSession>& session, const QString& remoteKey,
                         bool fromProxy = false);
    // Any session, registered or not (a refused one is destroyed without having been added).
    void removeSession(HttpSession* session);
    std::vector<std::shared_ptr<HttpSession>> sessions() const;
    // True when every connection is gone before `deadline`.
    bool waitUntilNoSessions(std::chrono::steady_clock::time_point deadline);

private:
    std::atomic<bool> m_stopping{false};
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    struct Entry
    {
        std::weak_ptr<HttpSession> session;
        QString remoteKey;
    };
    std::unordered_map<HttpSession*, Entry> m_sessions;
    QHash<QString, int> m_perAddress; // open connections by remote key; a key leaves with its last connection
};

} // namespace gleaner::coordinator::http_detail
