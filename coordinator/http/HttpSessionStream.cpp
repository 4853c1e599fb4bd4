// HttpSession: answers whose body is a ResponseStream (Server-Sent Events). The head goes out with chunked
// framing; then the session writes what the stream has, one write at a time, and sleeps until the stream
// wakes it. Every write has the same deadline as any answer's (a client that stops reading is cut off); the
// stream ends when it says so, when the server drains, or when the connection fails, and the connection
// closes with it.
#include "http/HttpLogging.h"
#include "http/HttpSession.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <cstdio>
#include <optional>

namespace gleaner::coordinator::http_detail {

namespace beast = boost::beast;
namespace net = boost::asio;

struct HttpSession::StreamState
{
    std::shared_ptr<ResponseStream> stream;
    http::response<http::empty_body> head;
    std::optional<http::response_serializer<http::empty_body>> serializer;
    bool chunked = true;
    bool writing = false;
    bool ending = false;
    QByteArray buffer;    // the bytes being written
    std::string sizeLine; // the chunk's size line and the CRLF around the data
    std::uint64_t bytesWritten = 0;
    // Between writes no operation of the connection is pending, and nothing else owns it: the stream does,
    // until it finishes (closeNow() always runs: the end, a failed write, the server's drain or abort).
    std::shared_ptr<HttpSession> keepAlive;
    // Set by the wake function, cleared when the strand picks the wake up: a burst of events posts one pump.
    std::shared_ptr<std::atomic<bool>> wakePending = std::make_shared<std::atomic<bool>>(false);
};

void HttpSession::startStream(HttpResponse response)
{
    m_phase = Phase::Streaming;
    m_handlerTimer.cancel();
    auto state = std::make_shared<StreamState>();
    state->stream = std::move(response.stream);
    state->chunked = m_context.version >= 11;
    state->head = buildStreamHead(response, m_context);
    state->serializer.emplace(state->head);
    state->keepAlive = shared_from_this();
    m_streaming = state;

    // The wake function outlives nothing it must not: it posts only while the server's io_context exists, and
    // only to a session that still exists.
    std::weak_ptr<HttpSession> weak = weak_from_this();
    auto executor = m_stream.get_executor();
    std::shared_ptr<ServerLifetime> lifetime = m_server->lifetime;
    std::shared_ptr<std::atomic<bool>> pending = state->wakePending;
    state->stream->start([weak, executor, lifetime, pending] {
        if (pending->exchange(true))
            return;
        std::lock_guard lock(lifetime->mutex);
        if (!lifetime->running)
            return;
        net::post(executor, [weak, pending] {
            pending->store(false);
            if (const std::shared_ptr<HttpSession> self = weak.lock())
                self->pumpStream();
        });
    });

    state->writing = true;
    tcp().expires_after(std::chrono::seconds(m_server->options.headerTimeoutSeconds));
    http::async_write_header(m_stream, *state->serializer,
                             beast::bind_front_handler(&HttpSession::onStreamWritten, shared_from_this()));
}

void HttpSession::pumpStream()
{
    const std::shared_ptr<StreamState> state = m_streaming;
    if (m_phase != Phase::Streaming || !state || state->writing)
        return;
    if (state->ending) {
        // The last chunk told the client the body is complete; a stopping server does not wait for its
        // goodbye.
        if (m_draining || m_server->stopping())
            closeNow();
        else
            closeGracefully();
        return;
    }
    if (m_draining || m_server->stopping()) {
        writeStreamChunk({}, true);
        return;
    }
    ResponseStream::Chunk chunk = state->stream->next();
    if (chunk.bytes.isEmpty() && !chunk.end)
        return; // nothing to say: wait for the stream's wake
    writeStreamChunk(std::move(chunk.bytes), chunk.end);
}

void HttpSession::writeStreamChunk(QByteArray bytes, bool last)
{
    StreamState& state = *m_streaming;
    state.writing = true;
    state.ending = last;
    state.buffer = std::move(bytes);
    const auto& options = m_server->options;
    const double rate = options.minBodyBytesPerSecond > 0 ? options.minBodyBytesPerSecond : 1.0e12;
    tcp().expires_after(std::chrono::seconds(options.headerTimeoutSeconds) +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(double(state.buffer.size()) / rate)));
    auto handler = beast::bind_front_handler(&HttpSession::onStreamWritten, shared_from_this());
    const net::const_buffer data(state.buffer.constData(), std::size_t(state.buffer.size()));
    if (!state.chunked) {
        net::async_write(m_stream, data, std::move(handler)); // HTTP/1.0: the close ends the body
        return;
    }
    // One chunk with its size line, then (last) the terminating zero-length chunk, in a single write.
    state.sizeLine.clear();
    if (!state.buffer.isEmpty()) {
        char size[32];
        const int n = std::snprintf(size, sizeof size, "%zx\r\n", std::size_t(state.buffer.size()));
        state.sizeLine.assign(size, std::size_t(n));
    }
    std::array<net::const_buffer, 3> parts{
        net::buffer(state.sizeLine), data,
        net::buffer(state.buffer.isEmpty() ? "" : "\r\n", state.buffer.isEmpty() ? 0 : 2)};
    if (!last) {
        net::async_write(m_stream, parts, std::move(handler));
        return;
    }
    static const char kLastChunk[] = "0\r\n\r\n";
    std::array<net::const_buffer, 4> withEnd{parts[0], parts[1], parts[2], net::buffer(kLastChunk, 5)};
    net::async_write(m_stream, withEnd, std::move(handler));
}

void HttpSession::onStreamWritten(beast::error_code ec, std::size_t bytes)
{
    const std::shared_ptr<StreamState> state = m_streaming;
    if (!state)
        return;
    state->writing = false;
    state->bytesWritten += state->buffer.size();
    state->buffer.clear();
    if (ec) {
        qCDebug(lcHttp, "the event stream to %s ended: %s", qPrintable(m_remoteAddress),
                ec.message().c_str());
        closeNow();
        return;
    }
    pumpStream();
}

void HttpSession::finishStream()
{
    if (!m_streaming)
        return;
    const std::shared_ptr<StreamState> state = std::move(m_streaming);
    m_streaming.reset();
    logRequest(200, state->bytesWritten);
    observe(200, state->bytesWritten);
    state->stream->finish();
    // Last, and later: this may be the session's last owner, and a member function is running.
    if (state->keepAlive)
        net::post(m_stream.get_executor(), [keep = std::move(state->keepAlive)] {});
}

} // namespace gleaner::coordinator::http_detail
