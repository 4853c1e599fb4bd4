#include "http/HttpsClient.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/file_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <QFile>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <limits>
#include <optional>

namespace gleaner::coordinator {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

namespace {

constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();

QByteArray bytes(beast::string_view text)
{
    return QByteArray(text.data(), qsizetype(text.size()));
}

beast::string_view view(const QByteArray& data)
{
    return beast::string_view(data.constData(), std::size_t(data.size()));
}

QString describe(const beast::error_code& ec)
{
    ERR_clear_error();
    if (ec == beast::error::timeout)
        return QStringLiteral("no answer in time");
    return QString::fromStdString(ec.message());
}

// A kept-alive connection the server closed while idle fails this way on the next request; such a request
// never reached the handler and is safe to send again on a new connection.
bool isStaleConnection(const beast::error_code& ec)
{
    return ec == net::error::eof || ec == net::error::connection_reset || ec == net::error::broken_pipe ||
           ec == net::ssl::error::stream_truncated || ec == http::error::end_of_stream;
}

} // namespace

QByteArray ClientResponse::header(QByteArrayView name) const
{
    for (const HttpHeader& field : headers) {
        if (field.name.compare(name, Qt::CaseInsensitive) == 0)
            return field.value;
    }
    return {};
}

struct HttpsClient::Impl
{
    Impl(QString host_, quint16 port_, QString caPath_);

    // Runs one asynchronous operation to completion on the private io_context: Beast's timeouts only apply
    // to asynchronous operations, so this is how a synchronous client gets them.
    template <class Start> beast::error_code run(Start&& start)
    {
        beast::error_code result = net::error::operation_aborted;
        ioc.restart();
        start([&result](beast::error_code ec, auto&&...) { result = ec; });
        ioc.run();
        return result;
    }
    beast::tcp_stream& tcp() { return beast::get_lowest_layer(*stream); }

    Status connect();
    void close();
    Result<ClientResponse> exchange(http::request<http::string_body>& request, const QString* downloadPath,
                                    bool& retryable);
    template <class Parser> Status readBody(Parser& parser, const QString& what);
    Result<ClientResponse> perform(http::request<http::string_body>& request, const QString* downloadPath);
    QString requestName(const http::request<http::string_body>& request) const;

    QString host;
    quint16 port;
    QString caPath;
    std::chrono::milliseconds connectTimeout{10'000};
    std::chrono::milliseconds operationTimeout{60'000};
    qint64 maxBodyBytes = 256 * 1024 * 1024;
    int connections = 0;
    QString setupError;
    net::io_context ioc;
    ssl::context tls{ssl::context::tls_client};
    std::optional<beast::ssl_stream<beast::tcp_stream>> stream;
    beast::flat_buffer buffer;
};

HttpsClient::Impl::Impl(QString host_, quint16 port_, QString caPath_)
    : host(std::move(host_)), port(port_), caPath(std::move(caPath_))
{
    beast::error_code ec;
    tls.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                        ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression,
                    ec);
    SSL_CTX_set_min_proto_version(tls.native_handle(), TLS1_2_VERSION);
    tls.set_verify_mode(ssl::verify_peer, ec);
    if (caPath.isEmpty()) {
        tls.set_default_verify_paths(ec);
        if (ec)
            setupError = QStringLiteral("cannot load the system's certificate authorities: %1; pin the "
                                        "coordinator's certificate instead")
                             .arg(describe(ec));
        return;
    }
    QFile file(caPath);
    if (!file.open(QIODevice::ReadOnly)) {
        setupError =
            QStringLiteral("cannot read the pinned CA certificate %1: %2").arg(caPath, file.errorString());
        return;
    }
    tls.load_verify_file(QFile::encodeName(caPath).toStdString(), ec);
    if (ec) {
        setupError =
            QStringLiteral("cannot load the pinned CA certificate %1: %2; it must be a PEM certificate")
                .arg(caPath, describe(ec));
        return;
    }
    // Pinning means trusting exactly this certificate, even when it is not a self-signed root (a server
    // certificate issued by a CA the client does not know).
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(tls.native_handle()), X509_V_FLAG_PARTIAL_CHAIN);
}

QString HttpsClient::Impl::requestName(const http::request<http::string_body>& request) const
{
    return QStringLiteral("%1 %2 on %3:%4")
        .arg(QString::fromLatin1(bytes(request.method_string())),
             QString::fromLatin1(bytes(request.target())), host)
        .arg(port);
}

Status HttpsClient::Impl::connect()
{
    close();
    const QString origin = QStringLiteral("%1:%2").arg(host).arg(port);
    beast::error_code ec;
    const net::ip::address address = net::ip::make_address(host.toStdString(), ec);
    const bool isAddress = !ec;
    std::vector<tcp::endpoint> endpoints;
    if (isAddress) {
        endpoints.emplace_back(address, port);
    } else {
        tcp::resolver resolver(ioc);
        for (const auto& entry : resolver.resolve(host.toStdString(), std::to_string(port), ec))
            endpoints.push_back(entry.endpoint());
        if (ec || endpoints.empty())
            return fail(QStringLiteral("cannot connect to %1: the host name does not resolve (%2)")
                            .arg(origin, describe(ec)));
    }

    stream.emplace(ioc, tls);
    SSL* ssl = stream->native_handle();
    // The certificate must name what the user typed: an IP address is checked against the certificate's IP
    // entries, a name against its DNS entries (and sent as SNI, which an address must not be).
    if (isAddress) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.toLatin1().constData());
    } else {
        SSL_set_tlsext_host_name(ssl, host.toUtf8().constData());
        SSL_set1_host(ssl, host.toUtf8().constData());
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    }

    tcp().expires_after(connectTimeout);
    ec = run([&](auto handler) { tcp().async_connect(endpoints, handler); });
    if (ec) {
        const QString reason =
            ec == beast::error::timeout
                ? QStringLiteral("no answer within %1 s").arg(connectTimeout.count() / 1000.0)
                : describe(ec);
        close();
        return fail(
            QStringLiteral("cannot connect to %1: %2 (is the coordinator running?)").arg(origin, reason));
    }
    ++connections;
    tcp().expires_after(connectTimeout);
    ec = run([&](auto handler) { stream->async_handshake(ssl::stream_base::client, handler); });
    if (ec) {
        const long verify = SSL_get_verify_result(ssl);
        close();
        if (verify != X509_V_OK) {
            const QString why = QString::fromLatin1(X509_verify_cert_error_string(verify));
            return fail(
                caPath.isEmpty()
                    ? QStringLiteral("the TLS certificate of %1 is not trusted: %2; no certificate "
                                     "authority of the system vouches for it, so pin the coordinator's "
                                     "certificate")
                          .arg(origin, why)
                    : QStringLiteral("the TLS certificate of %1 is not trusted: %2; it does not match the "
                                     "pinned certificate %3 (check that this file is the coordinator's "
                                     "certificate or the CA that signed it)")
                          .arg(origin, why, caPath));
        }
        return fail(QStringLiteral("the TLS handshake with %1 failed: %2").arg(origin, describe(ec)));
    }
    return {};
}

void HttpsClient::Impl::close()
{
    if (!stream)
        return;
    // No TLS close_notify: the server closes on a plain TCP close just as well, and waiting for its answer
    // would make every disconnect cost a round trip.
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().close();
    stream.reset();
    buffer.clear();
}

template <class Parser> Status HttpsClient::Impl::readBody(Parser& parser, const QString& what)
{
    while (!parser.is_done()) {
        tcp().expires_after(operationTimeout);
        const beast::error_code ec =
            run([&](auto handler) { http::async_read_some(*stream, buffer, parser, handler); });
        if (ec == http::error::body_limit)
            return fail(QStringLiteral("%1 failed: the answer exceeds %2 bytes").arg(what).arg(maxBodyBytes));
        if (ec)
            return fail(QStringLiteral("%1 failed while reading the answer: %2").arg(what, describe(ec)));
    }
    return {};
}

Result<ClientResponse> HttpsClient::Impl::exchange(http::request<http::string_body>& request,
                                                   const QString* downloadPath, bool& retryable)
{
    const QString what = requestName(request);
    tcp().expires_after(operationTimeout);
    beast::error_code ec = run([&](auto handler) { http::async_write(*stream, request, handler); });
    if (ec) {
        retryable = isStaleConnection(ec);
        return fail(QStringLiteral("%1 failed while sending: %2").arg(what, describe(ec)));
    }

    http::response_parser<http::empty_body> head;
    // Not boost::none: Beast 1.74 compares the Content-Length with the optional, and any value exceeds none.
    head.body_limit(kUnlimited);
    head.header_limit(64 * 1024);
    if (request.method() == http::verb::head)
        head.skip(true);
    tcp().expires_after(operationTimeout);
    ec = run([&](auto handler) { http::async_read_header(*stream, buffer, head, handler); });
    if (ec) {
        retryable = isStaleConnection(ec) && !head.got_some();
        return fail(QStringLiteral("%1 failed while waiting for the answer: %2").arg(what, describe(ec)));
    }

    ClientResponse response;
    response.status = int(head.get().result_int());
    for (const auto& field : head.get())
        response.headers.append({bytes(field.name_string()), bytes(field.value())});
    const bool toFile = downloadPath && (response.status == 200 || response.status == 206);
    bool keepAlive = head.keep_alive();
    if (toFile) {
        http::response_parser<http::file_body> parser(std::move(head));
        parser.body_limit(kUnlimited);
        parser.get().body().open(QFile::encodeName(*downloadPath).constData(), beast::file_mode::write, ec);
        if (ec)
            return fail(QStringLiteral("%1: cannot write %2: %3").arg(what, *downloadPath, describe(ec)));
        if (Status read = readBody(parser, what); !read)
            return fail(read.error());
        keepAlive = parser.keep_alive();
    } else if (!head.is_done()) {
        http::response_parser<http::string_body> parser(std::move(head));
        parser.body_limit(std::uint64_t(maxBodyBytes));
        if (Status read = readBody(parser, what); !read)
            return fail(read.error());
        response.body = bytes(parser.get().body());
        keepAlive = parser.keep_alive();
    }
    if (!keepAlive)
        close();
    return response;
}

Result<ClientResponse> HttpsClient::Impl::perform(http::request<http::string_body>& request,
                                                  const QString* downloadPath)
{
    if (!setupError.isEmpty())
        return fail(setupError);
    for (int attempt = 0;; ++attempt) {
        const bool reused = stream.has_value();
        if (!reused) {
            if (Status connected = connect(); !connected)
                return fail(connected.error());
        }
        bool retryable = false;
        Result<ClientResponse> response = exchange(request, downloadPath, retryable);
        if (response.ok())
            return response;
        close();
        if (!(reused && retryable && attempt == 0))
            return response;
    }
}

HttpsClient::HttpsClient(QString host, quint16 port, QString caCertificatePath)
    : m_impl(std::make_unique<Impl>(std::move(host), port, std::move(caCertificatePath)))
{
}

HttpsClient::~HttpsClient()
{
    m_impl->close();
}

void HttpsClient::setTimeouts(int connectMs, int operationMs)
{
    m_impl->connectTimeout = std::chrono::milliseconds(qMax(1, connectMs));
    m_impl->operationTimeout = std::chrono::milliseconds(qMax(1, operationMs));
}

void HttpsClient::setMaxBodyBytes(qint64 bytes)
{
    m_impl->maxBodyBytes = qMax<qint64>(0, bytes);
}

namespace {

http::request<http::string_body> buildRequest(const QString& host, quint16 port, const QByteArray& method,
                                              const QByteArray& target, const QByteArray& body,
                                              const QByteArray& contentType, const QList<HttpHeader>& headers,
                                              const QByteArray& bearerToken)
{
    http::request<http::string_body> request;
    request.method_string(view(method));
    request.target(view(target));
    request.version(11);
    const QByteArray hostName = host.contains(QLatin1Char(':')) ? '[' + host.toUtf8() + ']' : host.toUtf8();
    request.set(http::field::host, view(hostName + ':' + QByteArray::number(port)));
    request.set(http::field::user_agent, "gleaner-https-client");
    if (!contentType.isEmpty())
        request.set(http::field::content_type, view(contentType));
    if (!bearerToken.isEmpty())
        request.set(http::field::authorization, view("Bearer " + bearerToken));
    for (const HttpHeader& header : headers)
        request.set(view(header.name), view(header.value));
    request.body().assign(body.constData(), std::size_t(body.size()));
    request.keep_alive(true);
    request.prepare_payload();
    return request;
}

} // namespace

Result<ClientResponse> HttpsClient::request(const QByteArray& method, const QByteArray& target,
                                            const QByteArray& body, const QByteArray& contentType,
                                            const QList<HttpHeader>& headers, const QByteArray& bearerToken)
{
    auto message =
        buildRequest(m_impl->host, m_impl->port, method, target, body, contentType, headers, bearerToken);
    return m_impl->perform(message, nullptr);
}

Result<ClientResponse> HttpsClient::download(const QByteArray& target, const QString& filePath,
                                             const QList<HttpHeader>& headers, const QByteArray& bearerToken)
{
    auto message = buildRequest(m_impl->host, m_impl->port, "GET", target, {}, {}, headers, bearerToken);
    return m_impl->perform(message, &filePath);
}

QString HttpsClient::origin() const
{
    return QStringLiteral("%1:%2").arg(m_impl->host).arg(m_impl->port);
}

int HttpsClient::connectionsOpened() const
{
    return m_impl->connections;
}

void HttpsClient::disconnect()
{
    m_impl->close();
}

} // namespace gleaner::coordinator
