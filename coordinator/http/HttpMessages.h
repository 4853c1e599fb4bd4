#pragma once
// Internal to coordinator/http (includes Beast): conversions between Beast messages and the handler-facing
// types of HttpTypes.h, including the file answers (ETag, If-None-Match, Range).

#include "http/HttpFileBody.h"
#include "http/HttpTypes.h"

#include "Result.h"

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/optional.hpp>

#include <cstdint>
#include <variant>

namespace gleaner::coordinator::http_detail {

namespace http = boost::beast::http;

using HeadParser = http::request_parser<http::empty_body>;

// Sets up `parser` to read a request head as the server does: heads over `headerLimitBytes` fail with
// http::error::header_limit, and a Content-Length over what a qint64 holds (RequestHead::contentLength) fails
// with http::error::body_limit. The handler's own body limit comes after admit().
void configureHeadParser(HeadParser& parser, int headerLimitBytes);

// Fails for a Content-Length that no qint64 holds (2^63 bytes or more): such a length is refused, never
// wrapped into a negative one that every "larger than the limit" check would let through.
Result<RequestHead> toRequestHead(const http::request<http::empty_body>& message, const QString& remoteAddress,
                                  boost::optional<std::uint64_t> contentLength);

// What an answer depends on besides the handler's response.
struct RequestContext
{
    QByteArray method = "GET";
    unsigned version = 11;
    bool keepAlive = true;
    QByteArray ifNoneMatch;
    QByteArray range;
    QByteArray ifRange;

    static RequestContext from(const RequestHead& head, unsigned version, bool keepAlive);
};

struct OutgoingResponse
{
    using StringMessage = http::response<http::string_body>;
    using EmptyMessage = http::response<http::empty_body>; // 304, 204 and every answer to HEAD
    using FileMessage = http::response<FileRangeBody>;

    std::variant<StringMessage, EmptyMessage, FileMessage> message;
    int status = 0;
    std::uint64_t bodyBytes = 0;
    std::uint64_t proxyBytes = 0; // what the proxy sends in this server's place (HttpResponse::accelRedirect)
};

// Builds the message to send. `close` adds "Connection: close"; the message also closes when the request
// did not ask for keep-alive. Never fails: a file that cannot be opened becomes a 404 / 500 answer.
OutgoingResponse buildResponse(HttpResponse response, const RequestContext& request, bool close);

// The head of a streamed answer (HttpResponse::stream): the handler's status, type and headers, chunked on
// HTTP/1.1, and "Connection: close", since the stream ends the connection.
http::response<http::empty_body> buildStreamHead(const HttpResponse& response, const RequestContext& request);

} // namespace gleaner::coordinator::http_detail
