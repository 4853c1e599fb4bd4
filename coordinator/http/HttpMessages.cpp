#include "http/HttpMessages.h"

#include "http/HttpLogging.h"
#include "http/HttpRange.h"

#include <QFile>

#include <limits>

namespace gleaner::coordinator::http_detail {

namespace beast = boost::beast;

namespace {

beast::string_view view(const QByteArray& bytes)
{
    return beast::string_view(bytes.constData(), std::size_t(bytes.size()));
}

QByteArray bytes(beast::string_view text)
{
    return QByteArray(text.data(), qsizetype(text.size()));
}

bool bodyForbidden(int status)
{
    return status == 204 || status == 304;
}

// The handler's extra headers may not frame the message (that is the server's job: a wrong Content-Length
// desynchronises keep-alive) and may not carry CR or LF (response splitting).
bool acceptableExtraHeader(const HttpHeader& header)
{
    static const QByteArray reserved[] = {"content-length", "transfer-encoding", "connection", "server"};
    for (const QByteArray& name : reserved) {
        if (header.name.compare(name, Qt::CaseInsensitive) == 0)
            return false;
    }
    if (header.name.isEmpty())
        return false;
    for (const char c : header.name) {
        if (c <= ' ' || c == ':' || c >= 127)
            return false;
    }
    for (const char c : header.value) {
        if (c == '\r' || c == '\n' || c == '\0')
            return false;
    }
    return true;
}

template <class Message>
void setCommonHeaders(Message& message, int status, const QByteArray& contentType,
                      const QList<HttpHeader>& extra, const RequestContext& request, bool close)
{
    message.version(request.version);
    message.result(unsigned(status));
    message.set(http::field::server, "gleaner-coordinator");
    if (!bodyForbidden(status))
        message.set(http::field::content_type,
                    view(contentType.isEmpty() ? QByteArray("application/octet-stream") : contentType));
    for (const HttpHeader& header : extra) {
        if (acceptableExtraHeader(header))
            message.insert(view(header.name), view(header.value));
        else
            qCWarning(lcHttp,
                      "dropped the response header \"%s\" of a handler: the server frames messages, "
                      "and header values cannot hold line breaks",
                      header.name.constData());
    }
    message.keep_alive(request.keepAlive && !close);
}

OutgoingResponse stringResponse(const HttpResponse& response, const RequestContext& request, bool close)
{
    OutgoingResponse out;
    out.status = response.status;
    const bool head = request.method == "HEAD";
    if (head || bodyForbidden(response.status)) {
        OutgoingResponse::EmptyMessage message;
        setCommonHeaders(message, response.status, response.contentType, response.headers, request, close);
        if (!bodyForbidden(response.status))
            message.content_length(std::uint64_t(response.body.size()));
        out.message = std::move(message);
        return out;
    }
    OutgoingResponse::StringMessage message;
    setCommonHeaders(message, response.status, response.contentType, response.headers, request, close);
    message.body().assign(response.body.constData(), std::size_t(response.body.size()));
    message.content_length(message.body().size());
    out.bodyBytes = message.body().size();
    out.message = std::move(message);
    return out;
}

QByteArray quotedEtag(const QByteArray& etag)
{
    if (etag.isEmpty())
        return {};
    for (const char c : etag) {
        if (c == '"' || c <= ' ' || c >= 127) {
            qCWarning(lcHttp, "ignored the entity tag \"%s\": it may hold printable characters but no quotes",
                      etag.constData());
            return {};
        }
    }
    return '"' + etag + '"';
}

// The head of a file answer that the proxy in front completes (X-Accel-Redirect): it sends the file, answers
// Range and If-Range itself, and takes the status, ETag and Cache-Control from this head. The bytes it will
// send are counted as this answer's, as if the server had sent them.
OutgoingResponse redirectedFile(const HttpResponse& response, const RequestContext& request,
                                QList<HttpHeader> headers, std::uint64_t size, bool rangeApplies, bool close)
{
    std::uint64_t length = request.method == "HEAD" ? 0 : size;
    if (length > 0 && rangeApplies) {
        const ByteRangeRequest range = parseByteRange(request.range, qint64(size));
        if (range.outcome == ByteRangeRequest::Outcome::Unsatisfiable)
            length = 0;
        else if (range.outcome == ByteRangeRequest::Outcome::Partial)
            length = std::uint64_t(range.last - range.first + 1);
    }
    headers.append(HttpHeader{"X-Accel-Redirect", response.accelRedirect});
    OutgoingResponse out;
    out.status = response.status;
    OutgoingResponse::EmptyMessage message;
    setCommonHeaders(message, response.status, response.contentType, headers, request, close);
    message.content_length(0);
    out.proxyBytes = length;
    out.message = std::move(message);
    return out;
}

OutgoingResponse fileResponse(const HttpResponse& response, const RequestContext& request, bool close)
{
    beast::error_code ec;
    FileRangeBody::value_type body;
    body.file.open(QFile::encodeName(response.filePath).constData(), beast::file_mode::scan, ec);
    std::uint64_t size = 0;
    if (!ec)
        size = body.file.size(ec);
    if (ec) {
        const bool missing = ec == boost::system::errc::no_such_file_or_directory;
        qCWarning(lcHttp, "cannot open %s to answer %s: %s", qPrintable(response.filePath),
                  request.method.constData(), ec.message().c_str());
        return stringResponse(missing ? HttpResponse::error(404, QStringLiteral("the file is gone"))
                                      : HttpResponse::error(500, QStringLiteral("cannot read the file")),
                              request, close);
    }

    const bool readOnly = request.method == "GET" || request.method == "HEAD";
    const QByteArray etag = quotedEtag(response.etag);
    QList<HttpHeader> headers = response.headers;
    if (response.accelRedirect.isEmpty()) // else the proxy says what it does with ranges
        headers.append(HttpHeader{"Accept-Ranges", "bytes"});
    if (!etag.isEmpty())
        headers.append(HttpHeader{"ETag", etag});

    if (readOnly && !etag.isEmpty() && !request.ifNoneMatch.isEmpty() &&
        etagMatches(request.ifNoneMatch, etag)) {
        HttpResponse notModified;
        notModified.status = 304;
        notModified.headers = headers;
        return stringResponse(notModified, request, close);
    }

    int status = response.status;
    std::uint64_t offset = 0;
    std::uint64_t length = size;
    // If-Range with another tag means the client's partial copy is of an older file: send it all again.
    const bool rangeApplies = readOnly && status == 200 && !request.range.isEmpty() &&
                              (request.ifRange.isEmpty() || request.ifRange == etag);
    if (!response.accelRedirect.isEmpty())
        return redirectedFile(response, request, std::move(headers), size, rangeApplies, close);
    if (rangeApplies) {
        const ByteRangeRequest range = parseByteRange(request.range, qint64(size));
        if (range.outcome == ByteRangeRequest::Outcome::Unsatisfiable) {
            HttpResponse refusal =
                HttpResponse::error(416, QStringLiteral("the range \"%1\" lies outside the file's %2 bytes")
                                             .arg(QString::fromLatin1(request.range))
                                             .arg(size));
            refusal.headers = headers;
            refusal.headers.append(
                HttpHeader{"Content-Range", "bytes */" + QByteArray::number(quint64(size))});
            return stringResponse(refusal, request, close);
        }
        if (range.outcome == ByteRangeRequest::Outcome::Partial) {
            status = 206;
            offset = std::uint64_t(range.first);
            length = std::uint64_t(range.last - range.first + 1);
            headers.append(HttpHeader{"Content-Range", "bytes " + QByteArray::number(range.first) + '-' +
                                                           QByteArray::number(range.last) + '/' +
                                                           QByteArray::number(quint64(size))});
        }
    }

    OutgoingResponse out;
    out.status = status;
    if (request.method == "HEAD" || bodyForbidden(status)) {
        OutgoingResponse::EmptyMessage message;
        setCommonHeaders(message, status, response.contentType, headers, request, close);
        if (!bodyForbidden(status))
            message.content_length(length);
        out.message = std::move(message);
        return out;
    }
    body.offset = offset;
    body.length = length;
    OutgoingResponse::FileMessage message;
    setCommonHeaders(message, status, response.contentType, headers, request, close);
    message.content_length(length);
    message.body() = std::move(body);
    out.bodyBytes = length;
    out.message = std::move(message);
    return out;
}

} // namespace

void configureHeadParser(HeadParser& parser, int headerLimitBytes)
{
    parser.header_limit(std::uint32_t(headerLimitBytes));
    // The body limit is the handler's to decide, after admit(); the default 1 MB would refuse here first.
    // Not boost::none: Beast 1.74 compares the Content-Length with the optional, and any value exceeds none.
    // A length that no qint64 holds is refused by toRequestHead (413, naming it), and every body counts its own
    // bytes against the handler's limit (HttpLimitedBody): the head parser needs no cap of its own.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
}

Result<RequestHead> toRequestHead(const http::request<http::empty_body>& message, const QString& remoteAddress,
                                  boost::optional<std::uint64_t> contentLength)
{
    constexpr auto kLargestLength = std::uint64_t(std::numeric_limits<qint64>::max());
    if (contentLength && *contentLength > kLargestLength)
        return fail(QStringLiteral("the Content-Length %1 of %2 %3 exceeds any body this server takes (at most "
                                   "%4 bytes)")
                        .arg(*contentLength)
                        .arg(QString::fromLatin1(bytes(message.method_string())),
                             QString::fromLatin1(bytes(message.target()).left(200)))
                        .arg(kLargestLength));
    RequestHead head;
    head.method = bytes(message.method_string());
    head.target = bytes(message.target());
    head.remoteAddress = remoteAddress;
    for (const auto& field : message)
        head.headers.append(HttpHeader{bytes(field.name_string()), bytes(field.value())});
    if (contentLength)
        head.contentLength = qint64(*contentLength);
    return head;
}

RequestContext RequestContext::from(const RequestHead& head, unsigned version, bool keepAlive)
{
    RequestContext context;
    context.method = head.method;
    context.version = version;
    context.keepAlive = keepAlive;
    context.ifNoneMatch = head.header("If-None-Match");
    context.range = head.header("Range");
    context.ifRange = head.header("If-Range").trimmed();
    return context;
}

OutgoingResponse buildResponse(HttpResponse response, const RequestContext& request, bool close)
{
    if (response.status < 200 || response.status > 599) {
        qCWarning(lcHttp, "a handler answered %s with status %d; sending 500 instead",
                  request.method.constData(), response.status);
        response = HttpResponse::error(500, QStringLiteral("the server produced an invalid answer"));
    }
    if (!response.filePath.isEmpty())
        return fileResponse(response, request, close);
    return stringResponse(response, request, close);
}

http::response<http::empty_body> buildStreamHead(const HttpResponse& response, const RequestContext& request)
{
    http::response<http::empty_body> head;
    setCommonHeaders(head, response.status, response.contentType, response.headers, request, true);
    if (request.version >= 11)
        head.chunked(true);
    return head;
}

} // namespace gleaner::coordinator::http_detail
