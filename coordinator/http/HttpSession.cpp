#include "http/HttpSession.h"

#include "http/HttpLogging.h"
#include "http/HttpRemoteAddress.h"
#include "http/HttpResponseSlot.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <QDir>
#include <QFile>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <limits>

namespace gleaner::coordinator::http_detail {

namespace beast = boost::beast;
namespace net = boost::asio;
using namespace std::chrono_literals;

namespace {

// After an answer that leaves part of a request unread (a refusal before the body, 413, a malformed head),
// the server reads and discards what the client still sends for a while before it closes: closing a socket
// with unread data sends a reset, and a reset makes the client's kernel drop the answer before the client
// reads it. The body is never parsed, stored or shown to the handler. Each read must come within
// kLingerIdle, and lingering ends after kLingerTime in all.
constexpr auto kLingerTime = 5s;
constexpr auto kLingerIdle = 1s;
// The bounded wait for the peer's close_notify after a complete exchange.
constexpr auto kShutdownTime = 2s;
constexpr std::size_t kFirstReadBytes = 16 * 1024;

bool isHttpError(const beast::error_code& ec)
{
    return ec.category() == beast::error_code(http::error::bad_target).category();
}

// Errors that mean the peer went away or a deadline passed: nothing can be answered any more.
bool isDisconnect(const beast::error_code& ec)
{
    return ec == http::error::end_of_stream || ec == http::error::partial_message ||
           ec == beast::error::timeout || ec == net::error::operation_aborted || ec == net::error::eof ||
           ec == net::error::connection_reset || ec == net::error::broken_pipe ||
           ec == net::ssl::error::stream_truncated || !isHttpError(ec);
}

std::chrono::steady_clock::duration secondsFor(double bytes, double bytesPerSecond)
{
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(bytes / bytesPerSecond));
}

} // namespace

HttpSession::HttpSession(net::ip::tcp::socket&& socket, std::shared_ptr<HttpServerState> server)
    : m_server(std::move(server)), m_stream(std::move(socket), m_server->tls),
      m_handlerTimer(m_stream.get_executor())
{
    const RemoteAddress remote = RemoteAddress::of(tcp().socket());
    m_remoteAddress = remote.address;
    m_remoteKey = remote.key;
}

HttpSession::~HttpSession()
{
    finishStream();
    removeUploadFile();
    m_server->removeSession(this);
}

beast::tcp_stream& HttpSession::tcp()
{
    return beast::get_lowest_layer(m_stream);
}

void HttpSession::start()
{
    net::dispatch(m_stream.get_executor(), [self = shared_from_this()] {
        self->tcp().expires_after(std::chrono::seconds(self->m_server->options.headerTimeoutSeconds));
        self->m_stream.async_handshake(net::ssl::stream_base::server,
                                       beast::bind_front_handler(&HttpSession::onHandshake, self));
    });
}

void HttpSession::drain()
{
    net::post(m_stream.get_executor(), [self = shared_from_this()] {
        self->m_draining = true;
        if (self->m_phase == Phase::Handshake || self->m_phase == Phase::Idle)
            self->closeNow();
        else if (self->m_phase == Phase::Streaming)
            self->pumpStream(); // ends the stream
    });
}

void HttpSession::abort()
{
    net::post(m_stream.get_executor(), [self = shared_from_this()] {
        self->m_draining = true;
        if (self->m_phase == Phase::Handling) {
            // Unless the handler's answer is already on its way, it never answered: its file goes too.
            const std::shared_ptr<ResponseSlot> slot = self->m_slot.lock();
            if (!slot || slot->claim())
                self->m_uploadOwnedByHandler = false;
            qCWarning(lcHttp, "closing %s %s from %s unanswered: the server is stopping",
                      self->m_head.method.constData(), self->m_head.path().constData(),
                      qPrintable(self->m_remoteAddress));
        }
        self->closeNow();
    });
}

void HttpSession::onHandshake(beast::error_code ec)
{
    if (ec) {
        qCDebug(lcHttp, "TLS handshake with %s failed: %s", qPrintable(m_remoteAddress),
                ec.message().c_str());
        closeNow();
        return;
    }
    waitForRequest();
}

void HttpSession::waitForRequest()
{
    const bool first = m_phase == Phase::Handshake;
    m_phase = Phase::Idle;
    if (m_draining || m_server->stopping()) {
        closeGracefully();
        return;
    }
    if (m_buffer.size() > 0) { // a pipelined request is already here
        readHead();
        return;
    }
    // A fresh connection must start its request as promptly as a head must complete; a kept-alive one may
    // idle longer, since reusing it saves the client a handshake.
    const auto& options = m_server->options;
    tcp().expires_after(
        std::chrono::seconds(first ? options.headerTimeoutSeconds : options.idleTimeoutSeconds));
    m_stream.async_read_some(m_buffer.prepare(kFirstReadBytes),
                             beast::bind_front_handler(&HttpSession::onFirstBytes, shared_from_this()));
}

void HttpSession::onFirstBytes(beast::error_code ec, std::size_t bytes)
{
    m_buffer.commit(bytes);
    if (ec) {
        closeNow();
        return;
    }
    readHead();
}

void HttpSession::readHead()
{
    m_phase = Phase::Head;
    m_requestTimer.start();
    m_head = RequestHead();
    m_context = RequestContext();
    m_stringParser.reset();
    m_fileParser.reset();
    m_uploadPath.clear();
    m_uploadOwnedByHandler = false;
    m_bodyBytesRead = 0;
    m_requestComplete = false;
    m_headParser.emplace();
    configureHeadParser(*m_headParser, m_server->options.headerLimitBytes);
    tcp().expires_after(std::chrono::seconds(m_server->options.headerTimeoutSeconds));
    http::async_read_header(
        m_stream, m_buffer, *m_headParser,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->onHead(ec); });
}

void HttpSession::onHead(beast::error_code ec)
{
    if (ec == http::error::header_limit) {
        sendError(431, QStringLiteral("the request head exceeds the limit of %1 bytes")
                           .arg(m_server->options.headerLimitBytes));
        return;
    }
    if (ec == http::error::body_limit) {
        sendError(413, QStringLiteral("the request's Content-Length is over %1 bytes, more than any body "
                                      "can hold; the client sent a broken length")
                           .arg(std::numeric_limits<qint64>::max()));
        return;
    }
    if (ec && isDisconnect(ec)) {
        closeNow();
        return;
    }
    if (ec) {
        sendError(400, QStringLiteral("malformed request: %1").arg(QString::fromStdString(ec.message())));
        return;
    }
    const auto& message = m_headParser->get();
    Result<RequestHead> head = toRequestHead(message, m_remoteAddress, m_headParser->content_length());
    if (!head) {
        sendError(413, head.error());
        return;
    }
    m_head = std::move(*head);
    m_head.remoteKey = m_remoteKey;
    if (m_server->options.trustedProxies.contains(m_remoteAddress)) {
        m_head.viaProxy = true;
        const auto forwarded = message.find("X-Forwarded-For");
        if (forwarded != message.end()) {
            const auto value = forwarded->value();
            if (const auto client = RemoteAddress::forwardedFor(std::string_view(value.data(), value.size()))) {
                m_head.remoteAddress = client->address;
                m_head.remoteKey = client->key;
            }
        }
    }
    m_context = RequestContext::from(m_head, message.version(), m_headParser->keep_alive());
    admit();
}

void HttpSession::admit()
{
    std::variant<BodyPolicy, HttpResponse> decision = BodyPolicy{};
    const bool hasBody = !m_headParser->is_done();
    m_requestComplete = !hasBody;
    try {
        decision = m_server->handler.admit(m_head);
    } catch (const std::exception& e) {
        qCCritical(lcHttp, "the handler threw while admitting %s %s: %s", m_head.method.constData(),
                   m_head.path().constData(), e.what());
        send(HttpResponse::error(500, QStringLiteral("the server failed to handle this request")), hasBody);
        return;
    } catch (...) {
        qCCritical(lcHttp, "the handler threw while admitting %s %s", m_head.method.constData(),
                   m_head.path().constData());
        send(HttpResponse::error(500, QStringLiteral("the server failed to handle this request")), hasBody);
        return;
    }
    if (auto* refusal = std::get_if<HttpResponse>(&decision)) {
        // The body stays unread, so the connection cannot carry another request.
        send(std::move(*refusal), hasBody);
        return;
    }
    const BodyPolicy policy = std::get<BodyPolicy>(decision);
    if (!hasBody) {
        dispatchRequest();
        return;
    }
    const qint64 limit = qMax<qint64>(0, policy.maxBytes);
    if (m_head.contentLength && *m_head.contentLength > limit) {
        send(HttpResponse::error(413,
                                 QStringLiteral("the request body of %1 bytes exceeds the limit of %2 bytes "
                                                "for %3")
                                     .arg(*m_head.contentLength)
                                     .arg(limit)
                                     .arg(QString::fromLatin1(m_head.path()))),
             true);
        return;
    }
    if (const Status prepared = prepareBody(policy); !prepared) {
        qCWarning(lcHttp, "%s", qPrintable(prepared.error()));
        send(HttpResponse::error(500, QStringLiteral("the server cannot store the request body")), true);
        return;
    }
    m_bodyStarted = std::chrono::steady_clock::now();
    const bool expectsContinue = m_context.version >= 11 && m_head.header("Expect").trimmed().compare(
                                                                "100-continue", Qt::CaseInsensitive) == 0;
    if (expectsContinue)
        sendContinue();
    else
        readBody();
}

Status HttpSession::prepareBody(const BodyPolicy& policy)
{
    m_bodyLimit = qMax<qint64>(0, policy.maxBytes);
    const auto limit = std::uint64_t(m_bodyLimit);
    if (!policy.toFile) {
        m_stringParser.emplace(std::move(*m_headParser));
        m_headParser.reset();
        m_stringParser->body_limit(limit);
        m_stringParser->get().body().limit = limit;
        return {};
    }
    // mkostemp creates the file 0600 with a name no other request can hold: uploads are not world-readable
    // even in a shared temp folder.
    QByteArray pattern =
        QFile::encodeName(QDir(m_server->options.uploadDir).filePath(QStringLiteral("upload-XXXXXX")));
    const int fd = ::mkostemp(pattern.data(), O_CLOEXEC);
    if (fd < 0)
        return fail(
            QStringLiteral("cannot create a file in %1 for the body of %2 %3: %4; check that the upload "
                           "folder exists and is writable")
                .arg(m_server->options.uploadDir, QString::fromLatin1(m_head.method),
                     QString::fromLatin1(m_head.path()), QString::fromLocal8Bit(std::strerror(errno))));
    m_uploadPath = QFile::decodeName(pattern);
    m_fileParser.emplace(std::move(*m_headParser));
    m_headParser.reset();
    m_fileParser->body_limit(limit);
    m_fileParser->get().body().limit = limit;
    beast::file file;
    file.native_handle(fd);
    beast::error_code ec;
    m_fileParser->get().body().inner.reset(std::move(file), ec);
    if (ec) {
        removeUploadFile();
        return fail(
            QStringLiteral("cannot write %1: %2").arg(m_uploadPath, QString::fromStdString(ec.message())));
    }
    return {};
}

void HttpSession::sendContinue()
{
    m_phase = Phase::Body;
    m_continue =
        std::make_shared<http::response<http::empty_body>>(http::status::continue_, m_context.version);
    tcp().expires_after(std::chrono::seconds(m_server->options.headerTimeoutSeconds));
    http::async_write(m_stream, *m_continue, [self = shared_from_this()](beast::error_code ec, std::size_t) {
        self->m_continue.reset();
        if (ec) {
            qCDebug(lcHttp, "cannot send 100 Continue to %s: %s", qPrintable(self->m_remoteAddress),
                    ec.message().c_str());
            self->closeNow();
            return;
        }
        self->readBody();
    });
}

void HttpSession::readBody()
{
    m_phase = Phase::Body;
    const auto& options = m_server->options;
    if (options.minBodyBytesPerSecond > 0)
        tcp().expires_at(m_bodyStarted + std::chrono::seconds(options.headerTimeoutSeconds) +
                         secondsFor(double(m_bodyBytesRead), options.minBodyBytesPerSecond));
    else
        tcp().expires_after(std::chrono::seconds(options.idleTimeoutSeconds));
    auto handler = beast::bind_front_handler(&HttpSession::onBodyRead, shared_from_this());
    if (m_fileParser)
        http::async_read_some(m_stream, m_buffer, *m_fileParser, std::move(handler));
    else
        http::async_read_some(m_stream, m_buffer, *m_stringParser, std::move(handler));
}

void HttpSession::onBodyRead(beast::error_code ec, std::size_t bytes)
{
    m_bodyBytesRead += bytes;
    if (ec == http::error::body_limit) {
        sendError(413, QStringLiteral("the request body exceeds the limit of %1 bytes for %2")
                           .arg(m_bodyLimit)
                           .arg(QString::fromLatin1(m_head.path())));
        return;
    }
    if (ec == beast::error::timeout) {
        qCDebug(lcHttp,
                "closing %s %s from %s: its body arrived slower than %.0f bytes/s (%llu bytes so far)",
                m_head.method.constData(), m_head.path().constData(), qPrintable(m_head.remoteAddress),
                m_server->options.minBodyBytesPerSecond, static_cast<unsigned long long>(m_bodyBytesRead));
        closeNow();
        return;
    }
    if (ec && isDisconnect(ec)) {
        closeNow();
        return;
    }
    if (ec) {
        sendError(400,
                  QStringLiteral("malformed request body: %1").arg(QString::fromStdString(ec.message())));
        return;
    }
    const bool done = m_fileParser ? m_fileParser->is_done() : m_stringParser->is_done();
    if (!done) {
        readBody();
        return;
    }
    dispatchRequest();
}

void HttpSession::dispatchRequest()
{
    HttpRequest request;
    request.head = m_head;
    if (m_stringParser) {
        const std::string& body = m_stringParser->get().body().inner;
        request.body = QByteArray(body.data(), qsizetype(body.size()));
        request.bodyBytes = request.body.size();
        m_stringParser.reset();
    } else if (m_fileParser) {
        auto& body = m_fileParser->get().body().inner;
        beast::error_code ec;
        request.bodyBytes = qint64(body.file().size(ec));
        body.close(); // flushed and closed before the handler opens it
        m_fileParser.reset();
        request.bodyFile = m_uploadPath;
        m_uploadOwnedByHandler = true;
    }
    m_headParser.reset();
    m_requestComplete = true;
    m_phase = Phase::Handling;

    auto slot = std::make_shared<ResponseSlot>(weak_from_this(), m_stream.get_executor(), m_server->lifetime);
    m_slot = slot;
    Responder respond = [slot](HttpResponse response) {
        if (!slot->claim()) {
            qCWarning(lcHttp,
                      "dropped a second answer to one request (the handler answered twice, or after the "
                      "server answered for it at a timeout or shutdown)");
            return;
        }
        slot->post(std::move(response), true);
    };
    m_handlerTimer.expires_after(std::chrono::seconds(m_server->options.handlerTimeoutSeconds));
    m_handlerTimer.async_wait(beast::bind_front_handler(&HttpSession::onHandlerTimeout, shared_from_this()));
    try {
        m_server->handler.handle(std::move(request), respond);
    } catch (const std::exception& e) {
        qCCritical(lcHttp, "the handler threw on %s %s: %s", m_head.method.constData(),
                   m_head.path().constData(), e.what());
        answerForThrowingHandler(*slot);
    } catch (...) {
        qCCritical(lcHttp, "the handler threw on %s %s", m_head.method.constData(),
                   m_head.path().constData());
        answerForThrowingHandler(*slot);
    }
}

void HttpSession::answerForThrowingHandler(ResponseSlot& slot)
{
    // The handler may have answered before it threw; then that answer stands.
    if (!slot.claim())
        return;
    m_handlerTimer.cancel();
    m_uploadOwnedByHandler = false;
    removeUploadFile();
    send(HttpResponse::error(500, QStringLiteral("the server failed to handle this request")), false);
}

void HttpSession::onHandlerTimeout(beast::error_code ec)
{
    if (ec == net::error::operation_aborted || m_phase != Phase::Handling)
        return;
    const std::shared_ptr<ResponseSlot> slot = m_slot.lock();
    // No slot: its last Responder went unanswered and has posted the 500 already.
    if (!slot || !slot->claim())
        return;
    qCWarning(lcHttp, "the handler of %s %s from %s has not answered within %d s; answering 500",
              m_head.method.constData(), m_head.path().constData(), qPrintable(m_head.remoteAddress),
              m_server->options.handlerTimeoutSeconds);
    onHandlerAnswer(HttpResponse::error(500, QStringLiteral("the server did not answer in time")), false);
}

void HttpSession::onHandlerAnswer(HttpResponse response, bool fromHandler)
{
    if (m_phase != Phase::Handling)
        return;
    m_handlerTimer.cancel();
    if (!fromHandler) {
        qCWarning(lcHttp, "no answer from the handler of %s %s; answered %d for it",
                  m_head.method.constData(), m_head.path().constData(), response.status);
        m_uploadOwnedByHandler = false;
        removeUploadFile();
    }
    m_uploadPath.clear();
    send(std::move(response), false);
}

void HttpSession::send(HttpResponse response, bool closeAfter)
{
    if (response.stream && response.status == 200 && !closeAfter) {
        startStream(std::move(response));
        return;
    }
    m_phase = Phase::Writing;
    if (!m_uploadOwnedByHandler)
        removeUploadFile();
    const bool close = closeAfter || m_draining || m_server->stopping() || !m_context.keepAlive;
    m_outgoing = std::make_shared<OutgoingResponse>(buildResponse(std::move(response), m_context, close));
    const auto& options = m_server->options;
    const double rate = options.minBodyBytesPerSecond > 0 ? options.minBodyBytesPerSecond : 1.0e12;
    tcp().expires_after(std::chrono::seconds(options.headerTimeoutSeconds) +
                        secondsFor(double(m_outgoing->bodyBytes), rate));
    std::visit(
        [this, close](auto& message) {
            http::async_write(m_stream, message,
                              [self = shared_from_this(), close](beast::error_code ec, std::size_t) {
                                  self->onWritten(ec, close);
                              });
        },
        m_outgoing->message);
}

void HttpSession::onWritten(beast::error_code ec, bool closeAfter)
{
    logRequest(m_outgoing->status, ec ? 0 : m_outgoing->bodyBytes, ec ? 0 : m_outgoing->proxyBytes);
    observe(m_outgoing->status, ec ? 0 : m_outgoing->bodyBytes, ec ? 0 : m_outgoing->proxyBytes);
    m_outgoing.reset();
    if (ec) {
        closeNow();
        return;
    }
    if (closeAfter) {
        if (m_requestComplete)
            closeGracefully();
        else
            linger();
        return;
    }
    waitForRequest();
}

void HttpSession::sendError(int status, const QString& message)
{
    qCDebug(lcHttp, "answering %d to %s: %s", status, qPrintable(m_remoteAddress), qPrintable(message));
    send(HttpResponse::error(status, message), true);
}

void HttpSession::closeGracefully()
{
    m_phase = Phase::Closing;
    removeUploadFile();
    tcp().expires_after(kShutdownTime);
    m_stream.async_shutdown([self = shared_from_this()](beast::error_code) { self->closeNow(); });
}

void HttpSession::linger()
{
    m_phase = Phase::Closing;
    removeUploadFile();
    m_lingerUntil = std::chrono::steady_clock::now() + kLingerTime;
    // close_notify first, so a client that waits for the end of the connection sees it at once; a client
    // still sending its body makes OpenSSL give up on the shutdown, and the rest is drained below the TLS
    // layer.
    tcp().expires_after(kShutdownTime);
    m_stream.async_shutdown([self = shared_from_this()](beast::error_code) {
        beast::error_code ignored;
        self->tcp().socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
        self->m_buffer.clear();
        self->discardSome();
    });
}

void HttpSession::discardSome()
{
    const auto now = std::chrono::steady_clock::now();
    if (now >= m_lingerUntil || !tcp().socket().is_open()) {
        closeNow();
        return;
    }
    tcp().expires_at(std::min(
        m_lingerUntil, now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(kLingerIdle)));
    // Raw TCP reads: the bytes are thrown away, so there is nothing to decrypt.
    tcp().async_read_some(m_buffer.prepare(64 * 1024),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              self->m_buffer.clear();
                              if (ec) {
                                  self->closeNow();
                                  return;
                              }
                              self->discardSome();
                          });
}

void HttpSession::closeNow()
{
    finishStream();
    m_phase = Phase::Closing;
    m_handlerTimer.cancel();
    if (!m_uploadOwnedByHandler)
        removeUploadFile();
    beast::error_code ignored;
    tcp().socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    tcp().close();
}

void HttpSession::removeUploadFile()
{
    if (m_uploadPath.isEmpty() || m_uploadOwnedByHandler)
        return;
    m_fileParser.reset();
    if (!QFile::remove(m_uploadPath) && QFile::exists(m_uploadPath))
        qCWarning(lcHttp, "cannot remove the unused upload file %s", qPrintable(m_uploadPath));
    m_uploadPath.clear();
}

void HttpSession::observe(int status, std::uint64_t bytesOut, std::uint64_t bytesByProxy)
{
    const RequestOutcome outcome{status, qint64(m_bodyBytesRead), bytesOut,
                                 m_requestTimer.isValid() ? double(m_requestTimer.nsecsElapsed()) / 1e9 : 0.0,
                                 bytesByProxy};
    try {
        m_server->handler.observe(m_head, outcome);
    } catch (...) {
        qCWarning(lcHttp, "the handler threw while observing an answer; ignored");
    }
}

void HttpSession::logRequest(int status, std::uint64_t bytes, std::uint64_t bytesByProxy) const
{
    const QByteArray byProxy = bytesByProxy > 0
                                   ? " (" + QByteArray::number(quint64(bytesByProxy)) + " sent by the proxy)"
                                   : QByteArray();
    qCDebug(lcHttp, "%s %s %s -> %d, %llu bytes%s, %lld ms",
            qPrintable(m_head.remoteAddress.isEmpty() ? m_remoteAddress : m_head.remoteAddress),
            m_head.method.isEmpty() ? "-" : m_head.method.constData(),
            m_head.target.isEmpty() ? "-" : m_head.path().constData(), status,
            static_cast<unsigned long long>(bytes), byProxy.constData(),
            m_requestTimer.isValid() ? m_requestTimer.elapsed() : 0LL);
}

} // namespace gleaner::coordinator::http_detail
