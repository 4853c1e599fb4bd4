#include "http/HttpServer.h"

#include "http/HttpLogging.h"
#include "http/HttpServerState.h"
#include "http/HttpSession.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <optional>
#include <thread>

namespace gleaner::coordinator {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using http_detail::HttpServerState;
using http_detail::HttpSession;

namespace {

QString describe(const beast::error_code& ec)
{
    ERR_clear_error(); // the message already carries OpenSSL's reason; stale entries would blame a later call
    return QString::fromStdString(ec.message());
}

Status checkReadable(const QString& path, const QString& what)
{
    if (path.isEmpty())
        return fail(QStringLiteral("no %1 is configured; give the path of a PEM file").arg(what));
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read the %1 %2: %3").arg(what, path, file.errorString()));
    return {};
}

Status validate(const HttpServerOptions& options)
{
    if (options.threads < 1 || options.headerLimitBytes < 1024 || options.headerTimeoutSeconds < 1 ||
        options.idleTimeoutSeconds < 1 || options.maxConnections < 1 || options.maxConnectionsPerAddress < 1 ||
        options.handlerTimeoutSeconds < 1)
        return fail(QStringLiteral("invalid HTTP server options: threads, maxConnections, "
                                   "maxConnectionsPerAddress and every timeout must be at least 1, "
                                   "headerLimitBytes at least 1024"));
    return {};
}

} // namespace

struct HttpServer::Impl
{
    Impl(HttpServerOptions options_, RequestHandler& handler_)
        : options(std::move(options_)), handler(handler_), ioc(qMax(1, options.threads))
    {
    }

    Status loadCredentials(ssl::context& tls) const;
    Status listen();
    void accept();
    void onAccept(beast::error_code ec, tcp::socket socket);
    void noteRefusal(HttpServerState::Admission why, const HttpSession& session);
    void logRefusals();

    HttpServerOptions options;
    RequestHandler& handler;
    // Declared first, destroyed last: connections still queued in it die with it and need the state below.
    net::io_context ioc;
    std::shared_ptr<HttpServerState> state;
    std::optional<tcp::acceptor> acceptor;
    std::optional<net::steady_timer> acceptBackoff;
    std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
    std::vector<std::thread> threads;
    quint16 port = 0;
    bool started = false;
    bool stopped = false;
    // Refusals are logged at most every few seconds: a flood must not also fill the log. Accept strand only.
    QElapsedTimer refusalLog;
    quint64 serverFullSinceLog = 0;
    quint64 addressFullSinceLog = 0;
    QString lastFullAddress;
    // Read by refusals() from any thread.
    std::atomic<quint64> serverFullTotal{0};
    std::atomic<quint64> addressFullTotal{0};
};

Status HttpServer::Impl::loadCredentials(ssl::context& tls) const
{
    beast::error_code ec;
    tls.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                        ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression |
                        ssl::context::single_dh_use,
                    ec);
    // The options above name the old versions one by one; a floor also rules out whatever a system-wide
    // OpenSSL configuration might re-enable.
    if (ec || SSL_CTX_set_min_proto_version(tls.native_handle(), TLS1_2_VERSION) != 1)
        return fail(
            QStringLiteral("cannot restrict TLS to version 1.2 and later; check the OpenSSL installation"));
    // Client-initiated renegotiation (TLS 1.2) costs the server a handshake per request of an attacker.
    SSL_CTX_set_options(tls.native_handle(), SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);

    if (Status readable = checkReadable(options.certificatePath, QStringLiteral("TLS certificate"));
        !readable)
        return readable;
    if (Status readable = checkReadable(options.privateKeyPath, QStringLiteral("TLS private key")); !readable)
        return readable;
    tls.use_certificate_chain_file(QFile::encodeName(options.certificatePath).toStdString(), ec);
    if (ec)
        return fail(QStringLiteral("cannot load the TLS certificate %1: %2; it must be PEM, the server's "
                                   "certificate first, then any intermediates")
                        .arg(options.certificatePath, describe(ec)));
    tls.use_private_key_file(QFile::encodeName(options.privateKeyPath).toStdString(), ssl::context::pem, ec);
    if (ec && ec.category() == net::error::get_ssl_category() &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
        ERR_clear_error();
        return fail(QStringLiteral("the TLS private key %1 does not belong to the certificate %2")
                        .arg(options.privateKeyPath, options.certificatePath));
    }
    if (ec)
        return fail(
            QStringLiteral("cannot load the TLS private key %1: %2; it must be an unencrypted PEM key")
                .arg(options.privateKeyPath, describe(ec)));
    if (SSL_CTX_check_private_key(tls.native_handle()) != 1) {
        ERR_clear_error();
        return fail(QStringLiteral("the TLS private key %1 does not belong to the certificate %2")
                        .arg(options.privateKeyPath, options.certificatePath));
    }
    return {};
}

Status HttpServer::Impl::listen()
{
    const QString where = QStringLiteral("%1:%2").arg(options.host).arg(options.port);
    beast::error_code ec;
    tcp::endpoint endpoint;
    const net::ip::address address = net::ip::make_address(options.host.toStdString(), ec);
    if (!ec) {
        endpoint = tcp::endpoint(address, options.port);
    } else {
        tcp::resolver resolver(ioc);
        const auto results = resolver.resolve(options.host.toStdString(), std::to_string(options.port),
                                              tcp::resolver::passive, ec);
        if (ec || results.empty())
            return fail(QStringLiteral("cannot listen on %1: the host name does not resolve (%2)")
                            .arg(where, describe(ec)));
        endpoint = results.begin()->endpoint();
    }

    acceptor.emplace(net::make_strand(ioc));
    acceptor->open(endpoint.protocol(), ec);
    if (!ec)
        acceptor->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec)
        acceptor->bind(endpoint, ec);
    if (!ec)
        acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
        acceptor.reset();
        return fail(QStringLiteral("cannot listen on %1: %2 (is another server using this port?)")
                        .arg(where, describe(ec)));
    }
    port = acceptor->local_endpoint(ec).port();
    acceptBackoff.emplace(acceptor->get_executor());
    return {};
}

void HttpServer::Impl::accept()
{
    acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
        onAccept(ec, std::move(socket));
    });
}

void HttpServer::Impl::onAccept(beast::error_code ec, tcp::socket socket)
{
    if (ec == net::error::operation_aborted || !acceptor->is_open())
        return;
    if (ec) {
        // Out of file descriptors, typically: retrying at once would spin a thread at 100%.
        qCWarning(lcHttp, "cannot accept a connection on port %u: %s", unsigned(port), ec.message().c_str());
        acceptBackoff->expires_after(std::chrono::milliseconds(100));
        acceptBackoff->async_wait([this](beast::error_code waitError) {
            if (!waitError && acceptor->is_open())
                accept();
        });
        return;
    }
    auto session = std::make_shared<HttpSession>(std::move(socket), state);
    const HttpServerState::Admission admission = state->addSession(
        session, session->remoteKey(), options.trustedProxies.contains(session->remoteAddress()));
    if (admission == HttpServerState::Admission::Admitted)
        session->start();
    else
        noteRefusal(admission, *session);
    // A refused session dies here, which closes its socket: the client sees the close at once.
    session.reset();
    logRefusals();
    accept();
}

void HttpServer::Impl::noteRefusal(HttpServerState::Admission why, const HttpSession& session)
{
    if (why == HttpServerState::Admission::ServerFull) {
        ++serverFullTotal;
        ++serverFullSinceLog;
    } else if (why == HttpServerState::Admission::AddressFull) {
        ++addressFullTotal;
        ++addressFullSinceLog;
        lastFullAddress = session.remoteKey();
    }
}

void HttpServer::Impl::logRefusals()
{
    if (serverFullSinceLog + addressFullSinceLog == 0 ||
        (refusalLog.isValid() && refusalLog.elapsed() <= 10'000))
        return;
    if (serverFullSinceLog > 0)
        qCWarning(lcHttp, "closed %llu new connections: %d connections are open (maxConnections)",
                  static_cast<unsigned long long>(serverFullSinceLog), options.maxConnections);
    if (addressFullSinceLog > 0)
        qCWarning(lcHttp,
                  "closed %llu new connections from clients that held %d connections already "
                  "(maxConnectionsPerAddress), the last from %s",
                  static_cast<unsigned long long>(addressFullSinceLog), options.maxConnectionsPerAddress,
                  qPrintable(lastFullAddress));
    serverFullSinceLog = 0;
    addressFullSinceLog = 0;
    refusalLog.start();
}

HttpServer::HttpServer(HttpServerOptions options, RequestHandler& handler)
    : m_impl(std::make_unique<Impl>(std::move(options), handler))
{
}

HttpServer::~HttpServer()
{
    stop();
}

Status HttpServer::start()
{
    Impl& d = *m_impl;
    if (d.started)
        return fail(QStringLiteral("this HTTPS server was started already"));
    if (Status valid = validate(d.options); !valid)
        return valid;
    if (d.options.uploadDir.isEmpty())
        d.options.uploadDir = QDir::tempPath();
    if (!QDir().mkpath(d.options.uploadDir) || !QFileInfo(d.options.uploadDir).isWritable())
        return fail(QStringLiteral("the upload folder %1 cannot be created or is not writable")
                        .arg(d.options.uploadDir));

    auto state = std::make_shared<HttpServerState>(d.options, d.handler);
    if (Status loaded = d.loadCredentials(state->tls); !loaded)
        return loaded;
    d.state = std::move(state);
    if (Status listening = d.listen(); !listening)
        return listening;

    d.started = true;
    d.work.emplace(d.ioc.get_executor());
    net::post(d.acceptor->get_executor(), [&d] { d.accept(); });
    for (int i = 0; i < d.options.threads; ++i) {
        d.threads.emplace_back([&d] {
            // A handler's exception must not end a server thread (and with it a share of the server).
            for (;;) {
                try {
                    d.ioc.run();
                    return;
                } catch (const std::exception& e) {
                    qCCritical(lcHttp, "an HTTP server thread caught an exception: %s", e.what());
                }
            }
        });
    }
    qCInfo(lcHttp, "listening on %s:%u", qPrintable(d.options.host), unsigned(d.port));
    return {};
}

quint16 HttpServer::port() const
{
    return m_impl->port;
}

HttpServerRefusals HttpServer::refusals() const
{
    return HttpServerRefusals{m_impl->serverFullTotal.load(), m_impl->addressFullTotal.load()};
}

void HttpServer::stop(int drainMs)
{
    Impl& d = *m_impl;
    if (!d.started || d.stopped)
        return;
    d.stopped = true;
    d.state->beginStop();
    net::post(d.acceptor->get_executor(), [&d] {
        beast::error_code ignored;
        d.acceptor->close(ignored);
        d.acceptBackoff->cancel();
    });
    for (const std::shared_ptr<HttpSession>& session : d.state->sessions())
        session->drain();
    const auto drainDeadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(qMax(0, drainMs));
    if (!d.state->waitUntilNoSessions(drainDeadline)) {
        for (const std::shared_ptr<HttpSession>& session : d.state->sessions())
            session->abort();
        // Closing a socket completes its operations at once; this only waits for the threads to run them.
        d.state->waitUntilNoSessions(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
    d.work.reset();
    d.ioc.stop();
    for (std::thread& thread : d.threads)
        thread.join();
    d.threads.clear();
    {
        std::lock_guard lock(d.state->lifetime->mutex);
        d.state->lifetime->running = false;
    }
    qCInfo(lcHttp, "stopped listening on %s:%u", qPrintable(d.options.host), unsigned(d.port));
}

} // namespace gleaner::coordinator
