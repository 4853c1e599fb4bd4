#pragma once
// Internal to coordinator/http (includes Beast): one TLS connection of the server, from handshake to close.
// Every member function runs on the connection's strand (see the thread model in HttpServer.h), except where
// a comment says otherwise.
//
// A request moves through: wait for its first byte (idle timeout), read the head (header timeout), ask the
// handler to admit it, "100 Continue" when the client waits for one, read the body into memory or a file
// (slow-client floor), hand it to the handler, wait for the answer (handler timeout), write the answer, and
// either wait for the next request or close.

#include "http/HttpLimitedBody.h"
#include "http/HttpMessages.h"
#include "http/HttpServerState.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/file_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <QElapsedTimer>

#include <memory>
#include <optional>

namespace gleaner::coordinator::http_detail {

class ResponseSlot;

class HttpSession : public std::enable_shared_from_this<HttpSession>
{
public:
    HttpSession(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<HttpServerState> server);
    ~HttpSession();

    // The IPv4 address, or the IPv6 /64, that per-client limits count this connection against.
    const QString& remoteKey() const { return m_remoteKey; }
    const QString& remoteAddress() const { return m_remoteAddress; }

    // Any thread: start the TLS handshake.
    void start();
    // Any thread (stop()): close now when no request is under way, otherwise after its answer.
    void drain();
    // Any thread (stop() after drainMs): close now, whatever the connection does.
    void abort();

    // On the strand, from ResponseSlot: the handler's answer, or the 500 given on its behalf
    // (`handlerAnswered` false) when it dropped its Responder.
    void onHandlerAnswer(HttpResponse response, bool handlerAnswered);

private:
    enum class Phase
    {
        Handshake,
        Idle,
        Head,
        Body,
        Handling,
        Writing,
        Streaming, // a ResponseStream's body (HttpSessionStream.cpp)
        Closing
    };
    using Stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;
    using HeadParser = boost::beast::http::request_parser<boost::beast::http::empty_body>;
    using StringParser = boost::beast::http::request_parser<LimitedBody<boost::beast::http::string_body>>;
    using FileParser = boost::beast::http::request_parser<LimitedBody<boost::beast::http::file_body>>;

    void onHandshake(boost::beast::error_code ec);
    void waitForRequest();
    void onFirstBytes(boost::beast::error_code ec, std::size_t bytes);
    void readHead();
    void onHead(boost::beast::error_code ec);
    void admit();
    Status prepareBody(const BodyPolicy& policy);
    void sendContinue();
    void readBody();
    void onBodyRead(boost::beast::error_code ec, std::size_t bytes);
    void dispatchRequest();
    void answerForThrowingHandler(ResponseSlot& slot);
    void onHandlerTimeout(boost::beast::error_code ec);

    // Sends a response. `closeAfter` closes the connection once it is written.
    void send(HttpResponse response, bool closeAfter);
    void onWritten(boost::beast::error_code ec, bool closeAfter);
    // Answers a failure of the server itself (parse error, limits); always closes afterwards.
    void sendError(int status, const QString& message);
    void closeGracefully();
    void linger();
    void discardSome();
    void closeNow();
    void removeUploadFile();
    void logRequest(int status, std::uint64_t bytes, std::uint64_t bytesByProxy = 0) const;
    // Tells the handler how the request was answered (metrics).
    void observe(int status, std::uint64_t bytesOut, std::uint64_t bytesByProxy = 0);
    boost::beast::tcp_stream& tcp();

    // Streamed answers (HttpSessionStream.cpp).
    void startStream(HttpResponse response);
    void pumpStream();
    void writeStreamChunk(QByteArray bytes, bool last);
    void onStreamWritten(boost::beast::error_code ec, std::size_t bytes);
    void finishStream();

    const std::shared_ptr<HttpServerState> m_server;
    Stream m_stream;
    boost::beast::flat_buffer m_buffer;
    boost::asio::steady_timer m_handlerTimer;
    QString m_remoteAddress;
    QString m_remoteKey;
    Phase m_phase = Phase::Handshake;
    bool m_draining = false;

    // The request under way.
    std::optional<HeadParser> m_headParser;
    std::optional<StringParser> m_stringParser;
    std::optional<FileParser> m_fileParser;
    RequestHead m_head;
    RequestContext m_context;
    QString m_uploadPath; // the body's file until the handler owns it
    bool m_uploadOwnedByHandler = false;
    qint64 m_bodyLimit = 0;
    std::uint64_t m_bodyBytesRead = 0;
    bool m_requestComplete = true; // false while a head or body is unread: closing then needs linger()
    std::chrono::steady_clock::time_point m_lingerUntil;
    std::chrono::steady_clock::time_point m_bodyStarted;
    std::weak_ptr<ResponseSlot> m_slot;
    QElapsedTimer m_requestTimer;

    // Keeps the message being written alive for the write.
    std::shared_ptr<OutgoingResponse> m_outgoing;
    std::shared_ptr<http::response<http::empty_body>> m_continue;

    // The stream being written, while Phase::Streaming.
    struct StreamState;
    std::shared_ptr<StreamState> m_streaming;
};

} // namespace gleaner::coordinator::http_detail
