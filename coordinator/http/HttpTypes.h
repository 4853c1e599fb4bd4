#pragma once
// The coordinator's HTTP vocabulary, independent of Boost.Beast: the API layer sees these types only, so
// handlers are tested without sockets and the server can change underneath them.
//
// A request is handled in two steps. When its headers have arrived, the server asks the handler how to take
// the body (RequestHandler::admit): how large it may be, and whether to stream it into a file (weights
// uploads) or keep it in memory (JSON). A refusal at that point (401, 404, 413 ...) is answered before a byte
// of the body is read, and libcurl's "Expect: 100-continue" is answered only when the body is welcome. Then
// the complete request goes to RequestHandler::handle, which answers through a callback, from any thread,
// exactly once.

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <variant>

namespace gleaner::coordinator {

struct HttpHeader
{
    QByteArray name; // as received; compare case-insensitively
    QByteArray value;
};

struct RequestHead
{
    QByteArray method; // "GET", "POST", "PUT", ...
    QByteArray target; // path and query as received: "/api/v1/files/ab12...?x=1"
    QList<HttpHeader> headers;
    QString remoteAddress; // "127.0.0.1"
    // What per-client limits count against: remoteAddress for IPv4, its /64 prefix for IPv6 ("2001:db8::/64"),
    // since one subscriber usually holds a whole /64.
    QString remoteKey;
    std::optional<qint64> contentLength;
    // Whether the connection came from a trusted proxy (HttpServerOptions::trustedProxies).
    bool viaProxy = false;

    QByteArray path() const;                      // target without the query
    QByteArray header(QByteArrayView name) const; // first match, case-insensitive; empty when absent
    // The token of "Authorization: Bearer <token>", empty when there is none.
    QByteArray bearerToken() const;
};

// How to take a request's body, decided from its head.
struct BodyPolicy
{
    qint64 maxBytes = 64 * 1024; // larger bodies are refused with 413 before they are read
    bool toFile = false;         // stream into a temporary file in the server's upload folder
};

// A response body produced over time (Server-Sent Events). The server writes the head with chunked framing, then
// writes whatever next() returns, asking again when a write completes and whenever the stream calls its wake
// function. The connection carries nothing else and closes when the stream ends.
class ResponseStream
{
public:
    virtual ~ResponseStream() = default;
    struct Chunk
    {
        QByteArray bytes; // empty: nothing to write now
        bool end = false; // finish the response (after `bytes`)
    };
    // Once, on the connection's strand, before next(). `wake` may be called from any thread, any number of times,
    // also after the connection closed (it then does nothing).
    virtual void start(std::function<void()> wake) = 0;
    // On the connection's strand.
    virtual Chunk next() = 0;
    // Once, when the connection closes for any reason (the client left, a write timed out, the server stops).
    virtual void finish() = 0;
};

struct HttpResponse
{
    int status = 200;
    QByteArray contentType = "application/json";
    QByteArray body;
    QList<HttpHeader> headers; // extra headers, e.g. Retry-After, Set-Cookie
    // When set, the server sends this file instead of `body`, with ETag = "\"" + etag + "\"" when etag is not
    // empty, answering If-None-Match with 304 and a single "Range: bytes=a-b" with 206 / 416.
    QString filePath;
    QByteArray etag;
    // With filePath: the proxy in front sends the file (nginx's X-Accel-Redirect to this internal URI) and
    // the server sends only the head, after answering If-None-Match itself. Set only for requests that came
    // through a trusted proxy configured to serve it (RequestHead::viaProxy).
    QByteArray accelRedirect;
    // When set, the body is this stream instead (status 200 only).
    std::shared_ptr<ResponseStream> stream;

    static HttpResponse json(int status, const QJsonObject& object);
    // {"error": message}
    static HttpResponse error(int status, const QString& message);
    static HttpResponse file(const QString& path, const QByteArray& etag, const QByteArray& contentType);
};

struct HttpRequest
{
    RequestHead head;
    QByteArray body;  // when the policy kept it in memory
    QString bodyFile; // when the policy streamed it to a file: the handler owns the file from here on
                      // (moves or deletes it); the server deletes it if the handler throws or never answers
    qint64 bodyBytes = 0;
};

// Copyable; call one copy once, from any thread. A second call is dropped (and logged). When the last copy is
// destroyed uncalled, the server answers 500 at once; if none answers within
// HttpServerOptions::handlerTimeoutSeconds, the server answers 500 and later calls are dropped.
using Responder = std::function<void(HttpResponse)>;

// How a request was answered, for metrics.
struct RequestOutcome
{
    int status = 0;
    qint64 bytesIn = 0;   // request body bytes read
    quint64 bytesOut = 0; // response body bytes written
    double seconds = 0.0; // from the first byte of the request head to the last byte of the answer
    quint64 bytesByProxy = 0; // body bytes the proxy sends for this server (HttpResponse::accelRedirect)
};

class RequestHandler
{
public:
    virtual ~RequestHandler() = default;
    // Called on a server thread once the head is complete. Return a response to refuse the request at once.
    virtual std::variant<BodyPolicy, HttpResponse> admit(const RequestHead& head) = 0;
    // Called on a server thread with the whole request; `respond` may be called later, from any thread.
    virtual void handle(HttpRequest request, Responder respond) = 0;
    // Called on a server thread once an answer was written (or failed to be); must not block.
    virtual void observe(const RequestHead& head, const RequestOutcome& outcome) {}
};

} // namespace gleaner::coordinator
