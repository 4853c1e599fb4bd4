// The HTTPS server and client together, over real TLS on loopback: JSON requests, keep-alive, admission
// before the body, body limits, uploads streamed to files, and files served with ETag and Range.
// TestHttpServerLimits covers timeouts, TLS trust, errors and shutdown.

#include "HttpTestSupport.h"
#include "TestSupport.h"

#include "http/HttpsClient.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTest>

#include <mutex>

#include <sys/stat.h>

using namespace gleaner;
using namespace gleaner::coordinator;
using namespace gleaner::test;

class TestHttpServer : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void init();
    void jsonRoundTrip();
    void keepAliveReusesOneConnection();
    void refusalIsAnsweredBeforeTheBody();
    void refusalReachesAClientThatSendsItsBody();
    void expectContinueWhenAdmitted();
    void contentLengthOverTheLimitIs413();
    void chunkedBodyOverTheLimitIs413();
    void uploadIsStreamedToAFile();
    void uploadFileIsRemovedWhenTheClientLeaves();
    void fileRanges_data();
    void fileRanges();
    void ifNoneMatchGives304();
    void fileSentByTheProxy();
    void headAndDownloadToFile();

private:
    std::unique_ptr<HttpServer> start(FakeHandler& handler,
                                      const std::function<void(HttpServerOptions&)>& tweak = {})
    {
        return m_fixture.start(handler, m_uploads->path(), tweak);
    }
    HttpsClient client(const HttpServer& server) const
    {
        return HttpsClient(QStringLiteral("127.0.0.1"), server.port(), m_fixture.server.certificatePath);
    }
    bool uploadsEmpty() const { return QDir(m_uploads->path()).entryList(QDir::Files).isEmpty(); }

    HttpFixture m_fixture;
    std::unique_ptr<QTemporaryDir> m_uploads;
};

namespace {

QJsonObject jsonOf(const QByteArray& body)
{
    return QJsonDocument::fromJson(body).object();
}

QByteArray randomBytes(qsizetype size, quint32 seed)
{
    QByteArray data(size, Qt::Uninitialized);
    QRandomGenerator generator(seed);
    generator.fillRange(reinterpret_cast<quint32*>(data.data()), size / 4);
    return data;
}

} // namespace

void TestHttpServer::initTestCase()
{
    QVERIFY2(m_fixture.init(), "the openssl command-line tool could not make the test certificates");
}

void TestHttpServer::init()
{
    m_uploads = scratchDir();
}

void TestHttpServer::jsonRoundTrip()
{
    FakeHandler handler;
    auto server = start(handler);
    QVERIFY(server);
    QVERIFY(server->port() != 0);
    HttpsClient https = client(*server);
    const auto response = https.request("POST", "/api/v1/echo?verbose=1", R"({"hello": "world"})",
                                        "application/json", {}, "agent-token-1");
    QVERIFY2(response.ok(), qPrintable(response.error()));
    QCOMPARE(response->status, 200);
    QCOMPARE(response->header("Content-Type"), QByteArray("application/json"));
    QCOMPARE(response->header("Server"), QByteArray("gleaner-coordinator"));
    QCOMPARE(response->header("Content-Length").toLongLong(), response->body.size());
    const QJsonObject echo = jsonOf(response->body);
    QCOMPARE(echo.value(QStringLiteral("method")).toString(), QStringLiteral("POST"));
    QCOMPARE(echo.value(QStringLiteral("path")).toString(), QStringLiteral("/api/v1/echo"));
    QCOMPARE(echo.value(QStringLiteral("body")).toString(), QStringLiteral(R"({"hello": "world"})"));
    QCOMPARE(echo.value(QStringLiteral("token")).toString(), QStringLiteral("agent-token-1"));
    QCOMPARE(echo.value(QStringLiteral("remote")).toString(), QStringLiteral("127.0.0.1"));
}

void TestHttpServer::keepAliveReusesOneConnection()
{
    FakeHandler handler;
    auto server = start(handler);
    QVERIFY(server);
    HttpsClient https = client(*server);
    for (int i = 0; i < 5; ++i) {
        const auto response = https.request("GET", "/ping/" + QByteArray::number(i));
        QVERIFY2(response.ok(), qPrintable(response.error()));
        QCOMPARE(response->status, 200);
    }
    QCOMPARE(https.connectionsOpened(), 1);

    // The server side of it: three requests on one raw connection, in order, and the connection stays open.
    RawTlsClient raw;
    QCOMPARE(raw.connect(server->port(), m_fixture.server.certificatePath), QString());
    for (int i = 0; i < 3; ++i) {
        QVERIFY(raw.send(
            QByteArray("GET /raw/" + QByteArray::number(i) + " HTTP/1.1\r\nHost: localhost\r\n\r\n")));
        const RawResponse response = raw.readResponse();
        QCOMPARE(response.status, 200);
        QCOMPARE(jsonOf(response.body).value(QStringLiteral("path")).toString(),
                 QStringLiteral("/raw/%1").arg(i));
        QVERIFY(response.header("Connection").compare("close", Qt::CaseInsensitive) != 0);
    }
    QVERIFY(!raw.waitClosed(200));
}

void TestHttpServer::refusalIsAnsweredBeforeTheBody()
{
    FakeHandler handler;
    handler.onAdmit = [](const RequestHead& head) -> std::variant<BodyPolicy, HttpResponse> {
        if (head.bearerToken() != "good")
            return HttpResponse::error(401, QStringLiteral("this endpoint needs a token"));
        return BodyPolicy{64 << 20, true};
    };
    auto server = start(handler);
    QVERIFY(server);
    RawTlsClient raw;
    QCOMPARE(raw.connect(server->port(), m_fixture.server.certificatePath), QString());
    // 10 MB announced, not one byte of it sent: an answer can only come from the head.
    QVERIFY(raw.send("PUT /api/v1/work/l1/result HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10485760\r\n"
                     "Content-Type: application/octet-stream\r\nExpect: 100-continue\r\n\r\n"));
    const RawResponse response = raw.readResponse(3000);
    QCOMPARE(response.status, 401); // not 100 Continue
    QCOMPARE(jsonOf(response.body).value(QStringLiteral("error")).toString(),
             QStringLiteral("this endpoint needs a token"));
    QCOMPARE(response.header("Connection").toLower(), QByteArray("close"));
    QVERIFY(raw.waitClosed(3000));
    QCOMPARE(handler.admitted.load(), 1);
    QCOMPARE(handler.handled.load(), 0);
    QVERIFY(uploadsEmpty());
}

void TestHttpServer::refusalReachesAClientThatSendsItsBody()
{
    FakeHandler handler;
    handler.onAdmit = [](const RequestHead&) -> std::variant<BodyPolicy, HttpResponse> {
        return HttpResponse::error(401, QStringLiteral("no token"));
    };
    auto server = start(handler);
    QVERIFY(server);
    // Without Expect the client sends all 10 MB; the server answers from the head and closes, and must do so
    // without a reset that would destroy its answer before the client reads it.
    HttpsClient https = client(*server);
    const auto response =
        https.request("PUT", "/upload", QByteArray(10 << 20, 'x'), "application/octet-stream");
    QVERIFY2(response.ok(), qPrintable(response.error()));
    QCOMPARE(response->status, 401);
    QCOMPARE(handler.handled.load(), 0);
    // The closed connection is replaced, not reused.
    const auto next = https.request("GET", "/next");
    QVERIFY2(next.ok(), qPrintable(next.error()));
    QCOMPARE(https.connectionsOpened(), 2);
}

void TestHttpServer::expectContinueWhenAdmitted()
{
    FakeHandler handler;
    auto server = start(handler);
    QVERIFY(server);
    RawTlsClient raw;
    QCOMPARE(raw.connect(server->port(), m_fixture.server.certificatePath), QString());
    QVERIFY(raw.send(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n"));
    const RawResponse interim = raw.readResponse(3000);
    QCOMPARE(interim.status, 100);
    QVERIFY(raw.send("hello world"));
    const RawResponse answer = raw.readResponse(3000);
    QCOMPARE(answer.status, 200);
    QCOMPARE(jsonOf(answer.body).value(QStringLiteral("body")).toString(), QStringLiteral("hello world"));
}

void TestHttpServer::contentLengthOverTheLimitIs413()
{
    FakeHandler handler; // admits 64 KiB
    auto server = start(handler);
    QVERIFY(server);
    RawTlsClient raw;
    QCOMPARE(raw.connect(server->port(), m_fixture.server.certificatePath), QString());
    QVERIFY(raw.send(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 65537\r\nExpect: 100-continue\r\n\r\n"));
    const RawResponse response = raw.readResponse(3000);
    QCOMPARE(response.status, 413);
    QVERIFY(
        jsonOf(response.body).value(QStringLiteral("error")).toString().contains(QStringLiteral("65536")));
    QVERIFY(raw.waitClosed(3000));

    // A body exactly at the limit passes, one byte more does not, also for a client that sends it at once.
    HttpsClient https = client(*server);
    const auto atLimit = https.request("POST", "/echo", QByteArray(65536, 'a'), "text/plain");
    QVERIFY2(atLimit.ok(), qPrintable(atLimit.error()));
    QCOMPARE(atLimit->status, 200);
    const auto over = https.request("POST", "/echo", QByteArray(65537, 'a'), "text/plain");
    QVERIFY2(over.ok(), qPrintable(over.error()));
    QCOMPARE(over->status, 413);
    QCOMPARE(handler.handled.load(), 1);
}

void TestHttpServer::chunkedBodyOverTheLimitIs413()
{
    FakeHandler handler;
    handler.onAdmit = [](const RequestHead&) -> std::variant<BodyPolicy, HttpResponse> {
        return BodyPolicy{1000, true};
    };
    auto server = start(handler);
    QVERIFY(server);
    RawTlsClient raw;
    QCOMPARE(raw.connect(server->port(), m_fixture.server.certificatePath), QString());
    // Two chunks of 600 bytes: each is under the limit, together they are not.
    QVERIFY(raw.send("PUT /upload HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"));
    QVERIFY(raw.send(QByteArray("258\r\n" + QByteArray(600, 'a') + "\r\n258\r\n" + QByteArray(600, 'b') +
                                "\r\n0\r\n\r\n")));
    const RawResponse response = raw.readResponse(3000);
    QCOMPARE(response.status, 413);
    QVERIFY(raw.waitClosed(3000));
    QCOMPARE(handler.handled.load(), 0);
    QTRY_VERIFY_WITH_TIMEOUT(uploadsEmpty(), 2000);
}

void TestHttpServer::uploadIsStreamedToAFile()
{
    struct Received
    {
        std::mutex mutex;
        QString bodyFile;
        QByteArray inMemory;
        qint64 bytes = -1;
        int mode = 0;
    } received;
    const QString kept = QDir(m_fixture.dir()).filePath(QStringLiteral("received.bin"));
    QFile::remove(kept);
    FakeHandler handler;
    handler.onAdmit = [](const RequestHead&) -> std::variant<BodyPolicy, HttpResponse> {
        return BodyPolicy{32 << 20, true};
    };
    handler.onHandle = [&received, kept](HttpRequest request, Responder respond) {
        std::lock_guard lock(received.mutex);
        received.bodyFile = request.bodyFile;
        received.inMemory = request.body;
        received.bytes = request.bodyBytes;
        struct stat info
        {
        };
        if (::stat(QFile::encodeName(request.bodyFile).constData(), &info) == 0)
            received.mode = int(info.st_mode & 0777);
        // The handler owns the file: it keeps it by moving it away.
        QFile::rename(request.bodyFile, kept);
        respond(HttpResponse::json(202, {}));
    };
    auto server = start(handler);
    QVERIFY(server);
    const QByteArray data = randomBytes(20 << 20, 7);
    HttpsClient https = client(*server);
    const auto response = https.request("PUT", "/api/v1/work/l1/result", data, "application/octet-stream");
    QVERIFY2(response.ok(), qPrintable(response.error()));
    QCOMPARE(response->status, 202);

    std::lock_guard lock(received.mutex);
    QCOMPARE(received.bytes, qint64(data.size()));
    QVERIFY(received.inMemory.isEmpty());
    QVERIFY(received.bodyFile.startsWith(m_uploads->path() + QLatin1Char('/')));
    QCOMPARE(received.mode, 0600);
    QFile file(kept);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QVERIFY2(file.readAll() == data, "the uploaded file differs from the bytes sent");
    QVERIFY(uploadsEmpty());
}

void TestHttpServer::uploadFileIsRemovedWhenTheClientLeaves()
{
    FakeHandler handler;
    handler.onAdmit = [](const RequestHead&) -> std::variant<BodyPolicy, HttpResponse> {
        return BodyPolicy{1 << 20, true};
    };
    auto server = start(handler);
    QVERIFY(server);
    {
        RawTlsClient raw;
        QCOMPARE(raw.connect(server->port(), m_fixture.server.certificatePath), QString());
        QVERIFY(raw.send("PUT /upload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n"));
        QVERIFY(raw.send(QByteArray(50000, 'x')));
        QTRY_VERIFY_WITH_TIMEOUT(!uploadsEmpty(), 3000);
    } // the client goes away halfway
    QTRY_VERIFY_WITH_TIMEOUT(uploadsEmpty(), 3000);
    QCOMPARE(handler.handled.load(), 0);
}

void TestHttpServer::fileRanges_data()
{
    QTest::addColumn<QByteArray>("range");
    QTest::addColumn<QByteArray>("ifRange");
    QTest::addColumn<int>("status");
    QTest::addColumn<int>("first");
    QTest::addColumn<int>("last");

    QTest::newRow("no range") << QByteArray() << QByteArray() << 200 << 0 << 999;
    QTest::newRow("a-b") << QByteArray("bytes=10-19") << QByteArray() << 206 << 10 << 19;
    QTest::newRow("a-b past the end") << QByteArray("bytes=990-5000") << QByteArray() << 206 << 990 << 999;
    QTest::newRow("a-") << QByteArray("bytes=900-") << QByteArray() << 206 << 900 << 999;
    QTest::newRow("-n") << QByteArray("bytes=-5") << QByteArray() << 206 << 995 << 999;
    QTest::newRow("-n longer than the file") << QByteArray("bytes=-5000") << QByteArray() << 206 << 0 << 999;
    QTest::newRow("start past the end") << QByteArray("bytes=1000-") << QByteArray() << 416 << 0 << -1;
    QTest::newRow("empty suffix") << QByteArray("bytes=-0") << QByteArray() << 416 << 0 << -1;
    QTest::newRow("several ranges: whole file")
        << QByteArray("bytes=0-1,5-6") << QByteArray() << 200 << 0 << 999;
    QTest::newRow("other unit: whole file") << QByteArray("items=0-1") << QByteArray() << 200 << 0 << 999;
    QTest::newRow("If-Range of an older file")
        << QByteArray("bytes=0-9") << QByteArray("\"old\"") << 200 << 0 << 999;
    QTest::newRow("If-Range of this file")
        << QByteArray("bytes=0-9") << QByteArray("\"abc123\"") << 206 << 0 << 9;
}

void TestHttpServer::fileRanges()
{
    QFETCH(QByteArray, range);
    QFETCH(QByteArray, ifRange);
    QFETCH(int, status);
    QFETCH(int, first);
    QFETCH(int, last);

    const QByteArray content = randomBytes(1000, 11);
    const QString path = QDir(m_fixture.dir()).filePath(QStringLiteral("served.bin"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(content);
    file.close();
    FakeHandler handler;
    handler.onHandle = [path](HttpRequest, Responder respond) {
        respond(HttpResponse::file(path, "abc123", "application/octet-stream"));
    };
    auto server = start(handler);
    QVERIFY(server);
    QList<HttpHeader> headers;
    if (!range.isEmpty())
        headers.append({"Range", range});
    if (!ifRange.isEmpty())
        headers.append({"If-Range", ifRange});
    HttpsClient https = client(*server);
    const auto response = https.request("GET", "/api/v1/files/abc123", {}, {}, headers);
    QVERIFY2(response.ok(), qPrintable(response.error()));
    QCOMPARE(response->status, status);
    QCOMPARE(response->header("ETag"), QByteArray("\"abc123\""));
    QCOMPARE(response->header("Accept-Ranges"), QByteArray("bytes"));
    QCOMPARE(response->header("Content-Length").toLongLong(), response->body.size());
    if (status == 416) {
        QCOMPARE(response->header("Content-Range"), QByteArray("bytes */1000"));
        QVERIFY(jsonOf(response->body).contains(QStringLiteral("error")));
        return;
    }
    QCOMPARE(response->header("Content-Type"), QByteArray("application/octet-stream"));
    QCOMPARE(response->body, content.mid(first, last - first + 1));
    QCOMPARE(response->header("Content-Range"),
             status == 206 ? "bytes " + QByteArray::number(first) + '-' + QByteArray::number(last) + "/1000"
                           : QByteArray());
}

// With accelRedirect, the proxy in front sends the file: the server sends the head with X-Accel-Redirect and
// no body, answers If-None-Match itself, and counts what the proxy will send as the answer's bytes.
void TestHttpServer::fileSentByTheProxy()
{
    const QString path = QDir(m_fixture.dir()).filePath(QStringLiteral("accel.bin"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(QByteArray(4096, 'a'));
    file.close();
    FakeHandler handler;
    handler.onHandle = [path](HttpRequest request, Responder respond) {
        HttpResponse answer = HttpResponse::file(request.head.path().endsWith("gone") ? path + ".gone" : path,
                                                 "abc123", "application/octet-stream");
        answer.headers.append(HttpHeader{"Cache-Control", "immutable"});
        answer.accelRedirect = "/_gleaner/blobs/ab/abc123";
        respond(answer);
    };
    auto server = start(handler);
    QVERIFY(server);
    HttpsClient https = client(*server);

    const auto whole = https.request("GET", "/api/v1/files/abc123");
    QVERIFY2(whole.ok(), qPrintable(whole.error()));
    QCOMPARE(whole->status, 200);
    QCOMPARE(whole->header("X-Accel-Redirect"), QByteArray("/_gleaner/blobs/ab/abc123"));
    QCOMPARE(whole->header("ETag"), QByteArray("\"abc123\""));
    QCOMPARE(whole->header("Cache-Control"), QByteArray("immutable"));
    QCOMPARE(whole->header("Content-Length"), QByteArray("0"));
    QVERIFY(whole->header("Accept-Ranges").isEmpty()); // the proxy says what it does with ranges
    QVERIFY(whole->body.isEmpty());
    // A range is the proxy's to send, with the status it decides: the head stays 200.
    const auto tail = https.request("GET", "/api/v1/files/abc123", {}, {},
                                    {{"Range", "bytes=1000-"}, {"If-Range", "\"abc123\""}});
    QVERIFY2(tail.ok(), qPrintable(tail.error()));
    QCOMPARE(tail->status, 200);
    QVERIFY(tail->header("Content-Range").isEmpty());
    const auto stale = https.request("GET", "/api/v1/files/abc123", {}, {},
                                     {{"Range", "bytes=1000-"}, {"If-Range", "\"old\""}});
    QVERIFY2(stale.ok(), qPrintable(stale.error()));
    const auto head = https.request("HEAD", "/api/v1/files/abc123");
    QVERIFY2(head.ok(), qPrintable(head.error()));
    QCOMPARE(head->header("X-Accel-Redirect"), QByteArray("/_gleaner/blobs/ab/abc123"));
    // A copy the client holds already: 304 from the server, nothing for the proxy to send.
    const auto current =
        https.request("GET", "/api/v1/files/abc123", {}, {}, {{"If-None-Match", "\"abc123\""}});
    QVERIFY2(current.ok(), qPrintable(current.error()));
    QCOMPARE(current->status, 304);
    QVERIFY(current->header("X-Accel-Redirect").isEmpty());
    // A file that is gone is the server's 404, never a redirect to nothing.
    const auto gone = https.request("GET", "/api/v1/files/gone");
    QVERIFY2(gone.ok(), qPrintable(gone.error()));
    QCOMPARE(gone->status, 404);
    QVERIFY(gone->header("X-Accel-Redirect").isEmpty());

    // What each answer counts: the whole file, the range, the whole file again (an older partial copy),
    // nothing for HEAD, 304 and 404; this server itself sent no file bytes.
    QTRY_COMPARE(handler.outcomes().size(), 6);
    const QList<quint64> expected{4096, 3096, 4096, 0, 0, 0};
    for (int i = 0; i < expected.size(); ++i) {
        QCOMPARE(handler.outcomes()[i].bytesByProxy, expected[i]);
        if (i < 4)
            QCOMPARE(handler.outcomes()[i].bytesOut, quint64(0));
    }
    QCOMPARE(https.connectionsOpened(), 1);
}

void TestHttpServer::ifNoneMatchGives304()
{
    const QString path = QDir(m_fixture.dir()).filePath(QStringLiteral("etag.bin"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(QByteArray(4096, 'e'));
    file.close();
    FakeHandler handler;
    handler.onHandle = [path](HttpRequest, Responder respond) {
        respond(HttpResponse::file(path, "abc123", "application/octet-stream"));
    };
    auto server = start(handler);
    QVERIFY(server);
    HttpsClient https = client(*server);
    for (const QByteArray& tag : {QByteArray("\"abc123\""), QByteArray("W/\"abc123\""),
                                  QByteArray("\"x\", \"abc123\""), QByteArray("*")}) {
        const auto response = https.request("GET", "/api/v1/files/abc123", {}, {}, {{"If-None-Match", tag}});
        QVERIFY2(response.ok(), qPrintable(response.error()));
        QCOMPARE(response->status, 304);
        QVERIFY(response->body.isEmpty());
        QCOMPARE(response->header("ETag"), QByteArray("\"abc123\""));
    }
    const auto changed =
        https.request("GET", "/api/v1/files/abc123", {}, {}, {{"If-None-Match", "\"other\""}});
    QVERIFY2(changed.ok(), qPrintable(changed.error()));
    QCOMPARE(changed->status, 200);
    QCOMPARE(changed->body.size(), 4096);
    // A 304 has no body to frame, and the connection carries on after it.
    QCOMPARE(https.connectionsOpened(), 1);
}

void TestHttpServer::headAndDownloadToFile()
{
    const QByteArray content = randomBytes(3 << 20, 5);
    const QString path = QDir(m_fixture.dir()).filePath(QStringLiteral("download.bin"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(content);
    file.close();
    FakeHandler handler;
    handler.onHandle = [path](HttpRequest request, Responder respond) {
        if (request.head.path() == "/files/present")
            respond(HttpResponse::file(path, "d1", "application/octet-stream"));
        else
            respond(HttpResponse::error(404, QStringLiteral("no such file")));
    };
    auto server = start(handler);
    QVERIFY(server);
    HttpsClient https = client(*server);

    const auto head = https.request("HEAD", "/files/present");
    QVERIFY2(head.ok(), qPrintable(head.error()));
    QCOMPARE(head->status, 200);
    QCOMPARE(head->header("Content-Length").toLongLong(), content.size());
    QVERIFY(head->body.isEmpty());

    const QString target = QDir(m_fixture.dir()).filePath(QStringLiteral("downloaded.bin"));
    const auto downloaded = https.download("/files/present", target);
    QVERIFY2(downloaded.ok(), qPrintable(downloaded.error()));
    QCOMPARE(downloaded->status, 200);
    QFile result(target);
    QVERIFY(result.open(QIODevice::ReadOnly));
    QVERIFY2(result.readAll() == content, "the downloaded file differs from the served one");

    const QString missing = QDir(m_fixture.dir()).filePath(QStringLiteral("missing.bin"));
    const auto notFound = https.download("/files/absent", missing);
    QVERIFY2(notFound.ok(), qPrintable(notFound.error()));
    QCOMPARE(notFound->status, 404);
    QVERIFY(jsonOf(notFound->body).contains(QStringLiteral("error")));
    QVERIFY(!QFile::exists(missing));
    QCOMPARE(https.connectionsOpened(), 1);
}

QTEST_GUILESS_MAIN(TestHttpServer)
#include "TestHttpServer.moc"
