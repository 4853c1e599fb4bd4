// Fuzzes the coordinator's reading of an HTTP request (coordinator/http): Beast's request parser configured
// as HttpSession configures it (configureHeadParser, with the default 16 KiB head limit), then the body as
// the string parser reads a JSON body (64 KiB, BodyPolicy's default), then our toRequestHead / RequestContext
// and the conditional and partial file answer (If-None-Match, Range, If-Range) built from them.
//
// Input: the first byte sets how many bytes arrive per read (1..256), as Beast sees a request over several
// reads; the rest is what the client sent. Promises checked: a head that parsed gives a RequestHead that
// holds its method, target and fields; a file answer lies inside the file and says so in Content-Range.

#include "FuzzSupport.h"

#include "http/HttpMessages.h"
#include "http/HttpServer.h"

#include <boost/beast/http/parser.hpp>

#include <QDir>
#include <QFile>

#include <cstdlib>
#include <limits>
#include <string>

using namespace gleaner;
using namespace gleaner::coordinator;
using namespace gleaner::coordinator::http_detail;
namespace beast = boost::beast;

namespace {

constexpr qint64 kFileBytes = 1000;
const QByteArray kEtag = "v1";

QString servedFile()
{
    static const QString path = [] {
        const QString file = QDir::temp().filePath(QStringLiteral("gleaner-fuzz-http-%1.bin").arg(getpid()));
        QFile out(file);
        if (!out.open(QIODevice::WriteOnly) || out.write(QByteArray(kFileBytes, 'x')) != kFileBytes)
            std::abort();
        return file;
    }();
    return path;
}

// Feeds `input` to `parser` `chunk` bytes at a time, keeping what it did not consume, until it is done (the
// head only, unless the parser is eager), fails, or the input ends (then as the peer closing the connection).
template <class Parser>
std::size_t feed(Parser& parser, std::string_view input, std::size_t chunk, beast::error_code& ec)
{
    std::string pending;
    std::size_t offered = 0;
    std::size_t consumed = 0;
    while (!parser.is_done() && !(parser.is_header_done() && !parser.eager())) {
        if (offered < input.size()) {
            const std::size_t more = std::min(chunk, input.size() - offered);
            pending.append(input.substr(offered, more));
            offered += more;
        } else {
            if (parser.got_some())
                parser.put_eof(ec);
            else
                ec = beast::http::error::end_of_stream;
            return consumed;
        }
        for (;;) {
            const std::size_t used = parser.put(boost::asio::buffer(pending), ec);
            pending.erase(0, used);
            consumed += used;
            if (ec == beast::http::error::need_more) {
                ec = {};
                break;
            }
            if (ec || used == 0 || parser.is_done() || (parser.is_header_done() && !parser.eager()))
                break;
        }
        if (ec)
            return consumed;
    }
    return consumed;
}

void checkFileAnswer(const RequestContext& context)
{
    const OutgoingResponse out =
        buildResponse(HttpResponse::file(servedFile(), kEtag, "application/octet-stream"), context, false);
    fuzz::check(out.status == 200 || out.status == 206 || out.status == 304 || out.status == 416,
                "a file is answered with 200, 206, 304 or 416", QString::number(out.status));
    if (const auto* file = std::get_if<OutgoingResponse::FileMessage>(&out.message)) {
        const FileRangeBody::value_type& body = file->body();
        fuzz::check(body.offset <= std::uint64_t(kFileBytes) &&
                        body.length <= std::uint64_t(kFileBytes) - body.offset,
                    "the bytes sent lie inside the file");
        // A 206 may cover the whole file ("bytes=0-" asks for that); any other answer must.
        fuzz::check(out.status == 206 || body.length == std::uint64_t(kFileBytes),
                    "only a 206 sends part of the file");
        if (out.status == 206) {
            const std::string range(file->base()[beast::http::field::content_range]);
            const std::string expected = "bytes " + std::to_string(body.offset) + '-' +
                                         std::to_string(body.offset + body.length - 1) + '/' +
                                         std::to_string(kFileBytes);
            fuzz::check(range == expected, "Content-Range names the bytes sent",
                        QString::fromStdString(range));
        }
    }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    servedFile();
    // Registered after the path is built, so it runs before the path is destroyed.
    std::atexit([] { QFile::remove(servedFile()); });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    const std::size_t chunk = 1 + data[0];
    const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

    HeadParser head;
    configureHeadParser(head, HttpServerOptions().headerLimitBytes);
    beast::error_code ec;
    const std::size_t used = feed(head, input, chunk, ec);
    if (ec || !head.is_header_done())
        return 0;

    const auto& message = head.get();
    // The conversion refuses exactly the lengths a qint64 cannot hold (the server answers them 413).
    const auto parsed = toRequestHead(message, QStringLiteral("127.0.0.1"), head.content_length());
    const bool tooLong = head.content_length() && *head.content_length() > std::uint64_t(std::numeric_limits<qint64>::max());
    fuzz::check(parsed.ok() != tooLong, "a head converts unless its length exceeds a qint64",
                parsed.ok() ? QString() : parsed.error());
    if (!parsed)
        return 0;
    const RequestHead& request = *parsed;
    fuzz::check(request.method == QByteArray::fromStdString(std::string(message.method_string())) &&
                    request.target == QByteArray::fromStdString(std::string(message.target())),
                "the head keeps the method and target");
    qsizetype fields = 0;
    for (const auto& field : message) {
        (void)field;
        ++fields;
    }
    fuzz::check(request.headers.size() == fields, "the head keeps every field");
    fuzz::check(!request.contentLength || *request.contentLength >= 0, "a Content-Length is not negative",
                QString::number(*request.contentLength));
    fuzz::check(request.path().size() <= request.target.size() && !request.path().contains('?'),
                "the path is the target without its query");
    const QByteArray token = request.bearerToken();
    fuzz::check(!token.contains(' ') && !token.contains('\t'), "a bearer token holds no blanks");

    const RequestContext context = RequestContext::from(request, message.version(), head.keep_alive());
    checkFileAnswer(context);
    (void)buildResponse(HttpResponse::error(404, QStringLiteral("no such thing")), context, false);

    // The body, as HttpSession reads a JSON body after admit().
    if (!head.is_done()) {
        beast::http::request_parser<beast::http::string_body> body(std::move(head));
        body.body_limit(std::uint64_t(BodyPolicy().maxBytes));
        feed(body, input.substr(used), chunk, ec);
        if (!ec && body.is_done())
            fuzz::check(body.get().body().size() <= std::size_t(BodyPolicy().maxBytes),
                        "a body is within its limit");
    }
    return 0;
}
