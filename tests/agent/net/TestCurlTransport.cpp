// CurlTransport against a real TLS server on an ephemeral loopback port (the coordinator's HttpServer with a
// scripted handler and a fresh self-signed certificate): keep-alive, certificate pinning, hangs, uploads from a
// file, Range resumes and the headers of retry hints.
#include "TestSupport.h"

#include "crypto/TlsCertificate.h"
#include "http/HttpServer.h"
#include "net/CurlTransport.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QMutex>
#include <QTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace gleaner;
using namespace gleaner::agent;
using Failure = TransportResponse::Failure;

namespace {

class ScriptedHandler final : public coordinator::RequestHandler
{
public:
    QString filePath;

    std::variant<coordinator::BodyPolicy, coordinator::HttpResponse> admit(const coordinator::RequestHead&) override
    {
        return coordinator::BodyPolicy{8 << 20, false};
    }
    void handle(coordinator::HttpRequest request, coordinator::Responder respond) override
    {
        const QByteArray path = request.head.path();
        if (path == "/hang") {
            const QMutexLocker lock(&m_mutex);
            m_hanging.append(std::move(respond)); // answered never, or when the test ends
            return;
        }
        if (path == "/file") {
            respond(coordinator::HttpResponse::file(filePath, "tag", "application/octet-stream"));
            return;
        }
        if (path == "/busy") {
            coordinator::HttpResponse busy = coordinator::HttpResponse::error(429, QStringLiteral("slow down"));
            busy.headers.append(coordinator::HttpHeader{"Retry-After", "3"});
            respond(busy);
            return;
        }
        respond(coordinator::HttpResponse::json(
            200, QJsonObject{{QStringLiteral("method"), QString::fromLatin1(request.head.method)},
                             {QStringLiteral("bytes"), qint64(request.body.size())},
                             {QStringLiteral("auth"), QString::fromLatin1(request.head.header("Authorization"))}}));
    }
    void release()
    {
        const QMutexLocker lock(&m_mutex);
        m_hanging.clear();
    }

private:
    QMutex m_mutex;
    QList<coordinator::Responder> m_hanging;
};

QByteArray pattern(qint64 size)
{
    QByteArray bytes(size, '\0');
    for (qint64 i = 0; i < size; ++i)
        bytes[i] = char((i * 13 + i / 509) & 0xff);
    return bytes;
}

// A listening loopback socket that never accepts: the kernel completes TCP handshakes into its backlog, and
// nothing ever answers. Closed on destruction (then its port refuses connections).
class SilentListener
{
public:
    SilentListener()
    {
        m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof address;
        if (m_fd < 0 || ::bind(m_fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(m_fd, 8) != 0
            || ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
            return;
        m_port = ntohs(address.sin_port);
    }
    ~SilentListener() { close(); }
    void close()
    {
        if (m_fd >= 0)
            ::close(m_fd);
        m_fd = -1;
    }
    quint16 port() const { return m_port; }

private:
    int m_fd = -1;
    quint16 m_port = 0;
};

Status writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size())
        return fail(QStringLiteral("cannot write ") + path);
    return {};
}

} // namespace

class TestCurlTransport : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void cleanupTestCase();
    void requestsShareOneConnection();
    void uploadFromAFileSendsItAll();
    void resumeAppendsTheRestOfTheFile();
    void retryHintHeadersArrive();
    void hangAfterTheRequestTimesOut();
    void silentServerTimesOutInTheHandshake();
    void refusedConnectionIsAConnectFailure();
    void certificateOfAnotherServerIsRefused();
    void systemStoreRefusesASelfSignedCoordinator();
    void plainHttpIsNeverSpoken();
    void progressCanCancel();
    void rateCapsHoldForSmallFiles();

private:
    TransportRequest get(const QString& path) const;

    std::unique_ptr<QTemporaryDir> m_dir;
    ScriptedHandler m_handler;
    std::unique_ptr<coordinator::HttpServer> m_server;
    QString m_cert;
    QString m_otherCert;
    QByteArray m_file;
};

void TestCurlTransport::initTestCase()
{
    m_dir = gleaner::test::scratchDir();
    const auto identity = TlsCertificate::generateSelfSigned({QStringLiteral("127.0.0.1"), QStringLiteral("localhost")});
    QVERIFY(identity.ok());
    m_cert = m_dir->filePath(QStringLiteral("cert.pem"));
    QVERIFY(TlsCertificate::save(*identity, m_cert, m_dir->filePath(QStringLiteral("key.pem"))).ok());
    const auto other = TlsCertificate::generateSelfSigned({QStringLiteral("127.0.0.1"), QStringLiteral("localhost")});
    QVERIFY(other.ok());
    m_otherCert = m_dir->filePath(QStringLiteral("other.pem"));
    QVERIFY(TlsCertificate::save(*other, m_otherCert, m_dir->filePath(QStringLiteral("other-key.pem"))).ok());

    m_file = pattern(300'000);
    m_handler.filePath = m_dir->filePath(QStringLiteral("served.bin"));
    QVERIFY(writeFile(m_handler.filePath, m_file).ok());

    coordinator::HttpServerOptions options;
    options.certificatePath = m_cert;
    options.privateKeyPath = m_dir->filePath(QStringLiteral("key.pem"));
    options.uploadDir = m_dir->path();
    m_server = std::make_unique<coordinator::HttpServer>(options, m_handler);
    const Status started = m_server->start();
    QVERIFY2(started.ok(), qPrintable(started.error()));
}

void TestCurlTransport::cleanupTestCase()
{
    m_handler.release();
    if (m_server)
        m_server->stop();
}

TransportRequest TestCurlTransport::get(const QString& path) const
{
    TransportRequest r;
    r.url = QStringLiteral("https://127.0.0.1:%1%2").arg(m_server->port()).arg(path);
    r.connectTimeoutMs = 5000;
    r.stallTimeoutMs = 5000;
    return r;
}

void TestCurlTransport::requestsShareOneConnection()
{
    CurlTransport transport(m_cert);
    for (int i = 0; i < 3; ++i) {
        TransportRequest r = get(QStringLiteral("/echo"));
        r.method = "POST";
        r.body = R"({"n": 1})";
        r.headers.emplaceBack("Authorization", "Bearer gag_x");
        const TransportResponse response = transport.perform(r, {});
        QVERIFY2(response.ok(), qPrintable(response.error));
        QCOMPARE(response.status, 200);
        const QJsonObject echo = QJsonDocument::fromJson(response.body).object();
        QCOMPARE(echo.value(QStringLiteral("method")).toString(), QStringLiteral("POST"));
        QCOMPARE(echo.value(QStringLiteral("bytes")).toInt(), 8);
        QCOMPARE(echo.value(QStringLiteral("auth")).toString(), QStringLiteral("Bearer gag_x"));
        QCOMPARE(response.header("server"), QByteArray("gleaner-coordinator"));
    }
    QCOMPARE(transport.connectionsOpened(), 1); // one TLS handshake for all three
}

void TestCurlTransport::uploadFromAFileSendsItAll()
{
    const QString upload = m_dir->filePath(QStringLiteral("upload.bin"));
    QVERIFY(writeFile(upload, pattern(1'000'000)).ok());
    CurlTransport transport(m_cert);
    TransportRequest r = get(QStringLiteral("/echo"));
    r.method = "PUT";
    r.uploadFile = upload;
    qint64 lastUploaded = 0;
    const TransportResponse response = transport.perform(r, [&](const TransferProgress& p) {
        lastUploaded = p.uploaded;
        return true;
    });
    QVERIFY2(response.ok(), qPrintable(response.error));
    const QJsonObject echo = QJsonDocument::fromJson(response.body).object();
    QCOMPARE(echo.value(QStringLiteral("method")).toString(), QStringLiteral("PUT"));
    QCOMPARE(echo.value(QStringLiteral("bytes")).toInteger(), 1'000'000);
    QCOMPARE(response.bytesSent, 1'000'000);
    QCOMPARE(lastUploaded, 1'000'000);
}

void TestCurlTransport::resumeAppendsTheRestOfTheFile()
{
    const QString target = m_dir->filePath(QStringLiteral("resumed.bin"));
    QVERIFY(writeFile(target, m_file.left(123'456)).ok());
    CurlTransport transport(m_cert);
    TransportRequest r = get(QStringLiteral("/file"));
    r.downloadFile = target;
    r.resumeFrom = 123'456;
    const TransportResponse response = transport.perform(r, {});
    QVERIFY2(response.ok(), qPrintable(response.error));
    QCOMPARE(response.status, 206);
    QCOMPARE(response.bytesReceived, m_file.size() - 123'456);
    QFile f(target);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), m_file);

    // An error answer to a download leaves the file alone and keeps its JSON in memory.
    TransportRequest busy = get(QStringLiteral("/busy"));
    busy.downloadFile = target;
    const TransportResponse refused = transport.perform(busy, {});
    QCOMPARE(refused.status, 429);
    QVERIFY(refused.body.contains("slow down"));
    QCOMPARE(QFileInfo(target).size(), m_file.size());
}

void TestCurlTransport::retryHintHeadersArrive()
{
    CurlTransport transport(m_cert);
    const TransportResponse response = transport.perform(get(QStringLiteral("/busy")), {});
    QVERIFY2(response.ok(), qPrintable(response.error));
    QCOMPARE(response.status, 429);
    QCOMPARE(response.header("retry-after"), QByteArray("3"));
}

void TestCurlTransport::hangAfterTheRequestTimesOut()
{
    CurlTransport transport(m_cert);
    TransportRequest r = get(QStringLiteral("/hang"));
    r.stallTimeoutMs = 1000;
    QElapsedTimer timer;
    timer.start();
    const TransportResponse response = transport.perform(r, {});
    QCOMPARE(response.failure, Failure::Timeout);
    QVERIFY2(timer.elapsed() < 4000, qPrintable(QString::number(timer.elapsed())));
    QVERIFY2(response.error.contains(u"slow") || response.error.contains(u"Timeout"), qPrintable(response.error));
}

void TestCurlTransport::silentServerTimesOutInTheHandshake()
{
    // The kernel completes the TCP handshake for a listening socket; nobody ever answers the TLS hello.
    SilentListener silent;
    QVERIFY(silent.port() != 0);
    CurlTransport transport(m_cert);
    TransportRequest r;
    r.url = QStringLiteral("https://127.0.0.1:%1/api/v1/info").arg(silent.port());
    r.connectTimeoutMs = 700;
    const TransportResponse response = transport.perform(r, {});
    QCOMPARE(response.failure, Failure::Timeout);
}

void TestCurlTransport::refusedConnectionIsAConnectFailure()
{
    SilentListener closed;
    const quint16 port = closed.port();
    QVERIFY(port != 0);
    closed.close();
    CurlTransport transport(m_cert);
    TransportRequest r;
    r.url = QStringLiteral("https://127.0.0.1:%1/").arg(port);
    const TransportResponse response = transport.perform(r, {});
    QCOMPARE(response.failure, Failure::Connect);
}

void TestCurlTransport::certificateOfAnotherServerIsRefused()
{
    CurlTransport transport(m_otherCert);
    const TransportResponse response = transport.perform(get(QStringLiteral("/echo")), {});
    QCOMPARE(response.failure, Failure::Tls);
    QVERIFY2(response.error.contains(u"certificate"), qPrintable(response.error));

    CurlTransport missing(m_dir->filePath(QStringLiteral("no-such.pem")));
    QCOMPARE(missing.perform(get(QStringLiteral("/echo")), {}).failure, Failure::Tls);
}

void TestCurlTransport::systemStoreRefusesASelfSignedCoordinator()
{
    CurlTransport transport;
    const TransportResponse response = transport.perform(get(QStringLiteral("/echo")), {});
    QCOMPARE(response.failure, Failure::Tls);
}

void TestCurlTransport::plainHttpIsNeverSpoken()
{
    CurlTransport transport(m_cert);
    TransportRequest r;
    r.url = QStringLiteral("http://127.0.0.1:%1/echo").arg(m_server->port());
    const TransportResponse response = transport.perform(r, {});
    QCOMPARE(response.failure, Failure::Protocol);
    QVERIFY(response.error.contains(u"https://"));
}

void TestCurlTransport::progressCanCancel()
{
    CurlTransport transport(m_cert);
    TransportRequest r = get(QStringLiteral("/file"));
    r.downloadFile = m_dir->filePath(QStringLiteral("cancelled.bin"));
    r.maxReceiveBytesPerSecond = 100'000; // slow enough that the cancel lands mid-body
    const TransportResponse response = transport.perform(r, [](const TransferProgress& p) { return p.downloaded < 50'000; });
    QCOMPARE(response.failure, Failure::Cancelled);
    QVERIFY(QFileInfo(r.downloadFile).size() < 300'000); // what arrived stays for a resume
}

void TestCurlTransport::rateCapsHoldForSmallFiles()
{
    CurlTransport transport(m_cert);
    TransportRequest r = get(QStringLiteral("/file"));
    r.downloadFile = m_dir->filePath(QStringLiteral("capped.bin"));
    r.maxReceiveBytesPerSecond = 120'000; // 300 000 bytes: 2.5 s
    QElapsedTimer timer;
    timer.start();
    const TransportResponse response = transport.perform(r, {});
    QVERIFY2(response.ok(), qPrintable(response.error));
    QCOMPARE(QFileInfo(r.downloadFile).size(), m_file.size());
    QVERIFY2(timer.elapsed() >= 2'200 && timer.elapsed() < 6'000, qPrintable(QString::number(timer.elapsed())));

    const QString upload = m_dir->filePath(QStringLiteral("capped-upload.bin"));
    QVERIFY(writeFile(upload, pattern(200'000)).ok());
    TransportRequest put = get(QStringLiteral("/echo"));
    put.method = "PUT";
    put.uploadFile = upload;
    put.maxSendBytesPerSecond = 100'000; // 2 s
    timer.restart();
    const TransportResponse sent = transport.perform(put, {});
    QVERIFY2(sent.ok(), qPrintable(sent.error));
    QCOMPARE(QJsonDocument::fromJson(sent.body).object().value(QStringLiteral("bytes")).toInteger(), 200'000);
    QVERIFY2(timer.elapsed() >= 1'700 && timer.elapsed() < 5'000, qPrintable(QString::number(timer.elapsed())));
}

QTEST_GUILESS_MAIN(TestCurlTransport)
#include "TestCurlTransport.moc"
