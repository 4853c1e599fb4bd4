#pragma once
// The coordinator's HTTPS server: TLS 1.2+, HTTP/1.1 keep-alive, bodies admitted by the RequestHandler before
// a byte of them is read, streamed into files when the handler asks, files served with ETag and Range.
//
// Thread model: one boost::asio::io_context run by `threads` threads. The listener accepts on a strand of its
// own; every connection gets its own strand, and every step of a connection (TLS handshake, reads, timers,
// writes) runs on it, so a connection's state needs no lock while connections proceed in parallel.
// RequestHandler::admit() and handle() are called on the connection's strand: they must not block (a blocked
// handler holds one of the `threads` threads); slow work goes elsewhere and answers through the Responder,
// which may be called from any thread, once, and posts the response back onto the connection's strand. A
// connection serves one request at a time; stop() closes the listener, lets requests in flight finish for up
// to drainMs, closes what remains and joins the threads.
//
// Boost.Beast stays behind this header (pimpl): code that includes it compiles without Beast.

#include "Result.h"
#include "http/HttpTypes.h"

#include <QString>
#include <QtGlobal>

#include <memory>

namespace gleaner::coordinator {

struct HttpServerOptions
{
    QString host = QStringLiteral("127.0.0.1");
    quint16 port = 0;        // 0 = an ephemeral port, read it back with HttpServer::port()
    QString certificatePath; // PEM, the leaf first, then any intermediates
    QString privateKeyPath;  // PEM
    QString uploadDir;       // where bodies with BodyPolicy::toFile land; empty = the system temp folder
    int threads = 2;
    int headerLimitBytes = 16 * 1024;
    // The TLS handshake, the first request of a connection, and any request head once its first byte arrived.
    int headerTimeoutSeconds = 15;
    int idleTimeoutSeconds = 60; // keep-alive: the wait for the next request
    // Slow-client floor: a body must arrive at this average rate after a grace of headerTimeoutSeconds, so a
    // body of S bytes gets at most headerTimeout + S / rate. The deadline is re-armed as bytes arrive, so a
    // client that announces 10 GB and then stalls is cut off after the grace, not after hours.
    double minBodyBytesPerSecond = 32 * 1024;
    int maxConnections = 2048; // further connections are accepted and closed at once
    // The same from one client (an IPv4 address, or an IPv6 /64), so that one client cannot take every
    // connection the server has: a kept-alive agent holds one or two, a browser on the dashboard about six.
    int maxConnectionsPerAddress = 64;
    // Reverse proxies in front of the server (nginx, a load balancer), by address ("127.0.0.1", "10.0.0.5"). A
    // request from one of them is taken to come from the last address of its X-Forwarded-For (the one the proxy
    // saw; earlier ones are the client's own word): per-client limits and logs count that client. Their own
    // connections are not held to maxConnectionsPerAddress, since every client's requests come through them.
    QStringList trustedProxies;
    // A handler that has not answered within this time gets 500 on its behalf, so a lost Responder cannot
    // hold a connection forever. A Responder dropped without being called answers 500 at once.
    int handlerTimeoutSeconds = 600;
};

// Connections closed at accept, since the server started.
struct HttpServerRefusals
{
    quint64 serverFull = 0;  // maxConnections were open
    quint64 addressFull = 0; // maxConnectionsPerAddress were open from the client's address
};

class HttpServer
{
public:
    // The handler must outlive the server.
    HttpServer(HttpServerOptions options, RequestHandler& handler);
    ~HttpServer(); // stop()s
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Loads the certificate and key, binds, listens and starts the threads. The error names the file or the
    // address that failed. A server starts once; a stopped server is not restarted.
    Status start();
    // The bound port (the ephemeral one when options.port was 0); 0 before start().
    quint16 port() const;
    // Thread-safe.
    HttpServerRefusals refusals() const;
    // Stops accepting, lets requests in flight finish for up to drainMs, closes every connection and joins
    // the threads. Idempotent; must not be called from a handler (it joins the threads that run handlers).
    void stop(int drainMs = 5000);

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace gleaner::coordinator
