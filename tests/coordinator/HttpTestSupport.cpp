#include "HttpTestSupport.h"

#include "TestSupport.h"

#include <QDir>
#include <QElapsedTimer>
#include <QJsonObject>
#include <QProcess>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gleaner::test {

using namespace coordinator;

TestCertificate makeCertificate(const QString& dir, const QString& name, const QString& subjectAltName)
{
    const TestCertificate made{QDir(dir).filePath(name + QStringLiteral(".pem")),
                               QDir(dir).filePath(name + QStringLiteral(".key"))};
    QProcess openssl;
    openssl.start(
        QStringLiteral("openssl"),
        {QStringLiteral("req"), QStringLiteral("-x509"), QStringLiteral("-newkey"), QStringLiteral("ec"),
         QStringLiteral("-pkeyopt"), QStringLiteral("ec_paramgen_curve:P-256"), QStringLiteral("-nodes"),
         QStringLiteral("-days"), QStringLiteral("2"), QStringLiteral("-subj"), QStringLiteral("/CN=") + name,
         QStringLiteral("-addext"), QStringLiteral("subjectAltName=") + subjectAltName,
         QStringLiteral("-keyout"), made.keyPath, QStringLiteral("-out"), made.certificatePath});
    if (!openssl.waitForFinished(30'000) || openssl.exitStatus() != QProcess::NormalExit ||
        openssl.exitCode() != 0) {
        qWarning("openssl req failed: %s", openssl.readAllStandardError().constData());
        return {};
    }
    return made;
}

bool HttpFixture::init()
{
    m_dir = scratchDir();
    server =
        makeCertificate(dir(), QStringLiteral("localhost"), QStringLiteral("DNS:localhost,IP:127.0.0.1"));
    stranger =
        makeCertificate(dir(), QStringLiteral("stranger"), QStringLiteral("DNS:localhost,IP:127.0.0.1"));
    otherName = makeCertificate(dir(), QStringLiteral("other.example"), QStringLiteral("DNS:other.example"));
    return !server.certificatePath.isEmpty() && !stranger.certificatePath.isEmpty() &&
           !otherName.certificatePath.isEmpty();
}

std::unique_ptr<HttpServer> HttpFixture::start(RequestHandler& handler, const QString& uploadDir,
                                               const std::function<void(HttpServerOptions&)>& tweak,
                                               const TestCertificate* certificate) const
{
    HttpServerOptions options;
    options.host = QStringLiteral("127.0.0.1");
    options.port = 0;
    options.certificatePath = (certificate ? *certificate : server).certificatePath;
    options.privateKeyPath = (certificate ? *certificate : server).keyPath;
    options.uploadDir = uploadDir;
    options.threads = 2;
    if (tweak)
        tweak(options);
    auto started = std::make_unique<HttpServer>(options, handler);
    if (const Status status = started->start(); !status) {
        qWarning("the test server did not start: %s", qPrintable(status.error()));
        return nullptr;
    }
    return started;
}

QByteArray RawResponse::header(QByteArrayView name) const
{
    for (const QByteArray& line : head.split('\n')) {
        const qsizetype colon = line.indexOf(':');
        if (colon > 0 && line.left(colon).trimmed().compare(name, Qt::CaseInsensitive) == 0)
            return line.mid(colon + 1).trimmed();
    }
    return {};
}

RawTlsClient::~RawTlsClient()
{
    close();
}

void RawTlsClient::close()
{
    if (m_ssl)
        SSL_free(m_ssl);
    if (m_context)
        SSL_CTX_free(m_context);
    if (m_fd >= 0)
        ::close(m_fd);
    m_ssl = nullptr;
    m_context = nullptr;
    m_fd = -1;
}

namespace {

bool waitFor(int fd, short events, int timeoutMs)
{
    pollfd entry{fd, events, 0};
    return ::poll(&entry, 1, qMax(0, timeoutMs)) > 0;
}

} // namespace

QString RawTlsClient::connect(quint16 port, const QString& caPath, int maxVersion, const QString& from)
{
    close();
    m_context = SSL_CTX_new(TLS_client_method());
    if (maxVersion != 0) {
        // Old versions need the lowest security level in OpenSSL 3 (SHA-1 signatures); set it, so that only
        // the server's floor can refuse the handshake.
        SSL_CTX_set_security_level(m_context, 0);
        SSL_CTX_set_min_proto_version(m_context, TLS1_VERSION);
        SSL_CTX_set_max_proto_version(m_context, maxVersion);
        SSL_CTX_set_cipher_list(m_context, "DEFAULT:@SECLEVEL=0");
    }
    SSL_CTX_set_verify(m_context, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_load_verify_locations(m_context, caPath.toLocal8Bit().constData(), nullptr) != 1)
        return QStringLiteral("cannot load %1").arg(caPath);

    // A server that closes at accept (a connection cap) makes the handshake write to a closed socket: that must
    // be an error here, not a SIGPIPE that ends the test.
    ::signal(SIGPIPE, SIG_IGN);
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!from.isEmpty()) {
        sockaddr_in local{};
        local.sin_family = AF_INET;
        if (::inet_pton(AF_INET, from.toLatin1().constData(), &local.sin_addr) != 1 ||
            ::bind(m_fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0)
            return QStringLiteral("cannot connect from %1: %2").arg(from, QString::fromLocal8Bit(strerror(errno)));
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(m_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0)
        return QStringLiteral("connect failed: %1").arg(QString::fromLocal8Bit(strerror(errno)));
    ::fcntl(m_fd, F_SETFL, ::fcntl(m_fd, F_GETFL) | O_NONBLOCK);

    m_ssl = SSL_new(m_context);
    SSL_set_fd(m_ssl, m_fd);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(m_ssl), "127.0.0.1");
    QElapsedTimer timer;
    timer.start();
    for (;;) {
        const int result = SSL_connect(m_ssl);
        if (result == 1)
            return {};
        const int error = SSL_get_error(m_ssl, result);
        const short events = error == SSL_ERROR_WANT_READ    ? POLLIN
                             : error == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                             : 0;
        if (events == 0 || !waitFor(m_fd, events, 5000 - int(timer.elapsed()))) {
            char reason[256] = "timeout";
            if (const unsigned long code = ERR_get_error())
                ERR_error_string_n(code, reason, sizeof(reason));
            ERR_clear_error();
            return QStringLiteral("handshake failed: %1").arg(QString::fromLatin1(reason));
        }
    }
}

bool RawTlsClient::send(QByteArrayView data)
{
    qsizetype sent = 0;
    while (sent < data.size()) {
        const int result =
            SSL_write(m_ssl, data.data() + sent, int(qMin<qsizetype>(data.size() - sent, 1 << 20)));
        if (result > 0) {
            sent += result;
            continue;
        }
        const int error = SSL_get_error(m_ssl, result);
        if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) {
            if (!waitFor(m_fd, error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, 5000))
                return false;
            continue;
        }
        ERR_clear_error();
        return false;
    }
    return true;
}

bool RawTlsClient::readMore(int timeoutMs)
{
    if (m_peerClosed || !m_ssl)
        return false;
    QElapsedTimer timer;
    timer.start();
    for (;;) {
        char chunk[16 * 1024];
        const int result = SSL_read(m_ssl, chunk, sizeof(chunk));
        if (result > 0) {
            m_buffer.append(chunk, result);
            return true;
        }
        const int error = SSL_get_error(m_ssl, result);
        if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
            const int left = timeoutMs - int(timer.elapsed());
            if (left <= 0 || !waitFor(m_fd, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, left))
                return false;
            continue;
        }
        // close_notify, a TCP close or a reset: the server is gone either way.
        ERR_clear_error();
        m_peerClosed = true;
        return false;
    }
}

RawResponse RawTlsClient::readResponse(int timeoutMs)
{
    QElapsedTimer timer;
    timer.start();
    RawResponse response;
    qsizetype end = -1;
    while ((end = m_buffer.indexOf("\r\n\r\n")) < 0) {
        if (!readMore(timeoutMs - int(timer.elapsed())))
            return response;
    }
    response.head = m_buffer.left(end);
    const qsizetype lineEnd = response.head.indexOf('\r'); // none when the head is the status line alone
    const QList<QByteArray> statusLine =
        (lineEnd < 0 ? response.head : response.head.left(lineEnd)).split(' ');
    response.status = statusLine.value(1).toInt();
    // 1xx, 204 and 304 have no body, whatever their headers say.
    const bool bodyless = response.status < 200 || response.status == 204 || response.status == 304;
    const qsizetype length = bodyless ? 0 : response.header("Content-Length").toLongLong();
    while (m_buffer.size() < end + 4 + length) {
        if (!readMore(timeoutMs - int(timer.elapsed())))
            break;
    }
    response.body = m_buffer.mid(end + 4, length);
    m_buffer.remove(0, qMin(m_buffer.size(), end + 4 + length));
    return response;
}

QByteArray RawTlsClient::readUntil(QByteArrayView marker, int timeoutMs)
{
    QElapsedTimer timer;
    timer.start();
    qsizetype at = -1;
    qsizetype from = 0; // what was searched already: a long stream is scanned once
    while ((at = m_buffer.indexOf(marker, from)) < 0) {
        from = qMax<qsizetype>(0, m_buffer.size() - marker.size() + 1);
        if (!readMore(timeoutMs - int(timer.elapsed())))
            return {};
    }
    const QByteArray taken = m_buffer.left(at + marker.size());
    m_buffer.remove(0, at + marker.size());
    return taken;
}

bool RawTlsClient::waitClosed(int timeoutMs)
{
    QElapsedTimer timer;
    timer.start();
    while (!m_peerClosed && timer.elapsed() < timeoutMs)
        readMore(timeoutMs - int(timer.elapsed()));
    if (m_peerClosed && m_closedAfterMs < 0)
        m_closedAfterMs = int(timer.elapsed());
    return m_peerClosed;
}

FakeHandler::FakeHandler()
{
    onAdmit = [](const RequestHead&) -> std::variant<BodyPolicy, HttpResponse> { return BodyPolicy{}; };
    onHandle = [](HttpRequest request, Responder respond) {
        respond(HttpResponse::json(
            200, QJsonObject{
                     {QStringLiteral("method"), QString::fromLatin1(request.head.method)},
                     {QStringLiteral("path"), QString::fromLatin1(request.head.path())},
                     {QStringLiteral("body"), QString::fromUtf8(request.body)},
                     {QStringLiteral("bytes"), request.bodyBytes},
                     {QStringLiteral("token"), QString::fromLatin1(request.head.bearerToken())},
                     {QStringLiteral("remote"), request.head.remoteAddress},
                     {QStringLiteral("via_proxy"), request.head.viaProxy},
                 }));
    };
}

std::variant<BodyPolicy, HttpResponse> FakeHandler::admit(const RequestHead& head)
{
    ++admitted;
    return onAdmit(head);
}

void FakeHandler::handle(HttpRequest request, Responder respond)
{
    ++handled;
    onHandle(std::move(request), std::move(respond));
}

void FakeHandler::observe(const RequestHead&, const RequestOutcome& outcome)
{
    const std::lock_guard lock(m_mutex);
    m_outcomes.append(outcome);
}

QList<RequestOutcome> FakeHandler::outcomes() const
{
    const std::lock_guard lock(m_mutex);
    return m_outcomes;
}

} // namespace gleaner::test
