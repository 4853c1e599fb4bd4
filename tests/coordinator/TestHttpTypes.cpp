// The socket-free rules of the HTTP layer: the request-head helpers the API handlers rely on, the response
// factories, and the Range / If-None-Match parsing behind file downloads.

#include "http/HttpRange.h"
#include "http/HttpTypes.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

using namespace gleaner::coordinator;

class TestHttpTypes : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void pathDropsTheQuery_data();
    void pathDropsTheQuery();
    void headerIsCaseInsensitive();
    void bearerToken_data();
    void bearerToken();
    void responseFactories();
    void byteRange_data();
    void byteRange();
    void etagMatching_data();
    void etagMatching();
};

void TestHttpTypes::pathDropsTheQuery_data()
{
    QTest::addColumn<QByteArray>("target");
    QTest::addColumn<QByteArray>("path");
    QTest::newRow("plain") << QByteArray("/api/v1/files/ab12") << QByteArray("/api/v1/files/ab12");
    QTest::newRow("query") << QByteArray("/api/v1/files/ab12?x=1&y=2") << QByteArray("/api/v1/files/ab12");
    QTest::newRow("empty query") << QByteArray("/metrics?") << QByteArray("/metrics");
    QTest::newRow("encoded slash stays encoded") << QByteArray("/a%2Fb?c") << QByteArray("/a%2Fb");
}

void TestHttpTypes::pathDropsTheQuery()
{
    QFETCH(QByteArray, target);
    QFETCH(QByteArray, path);
    RequestHead head;
    head.target = target;
    QCOMPARE(head.path(), path);
}

void TestHttpTypes::headerIsCaseInsensitive()
{
    RequestHead head;
    head.headers = {{"content-type", "application/json"}, {"X-Twice", "first"}, {"x-twice", "second"}};
    QCOMPARE(head.header("Content-Type"), QByteArray("application/json"));
    QCOMPARE(head.header("X-TWICE"), QByteArray("first"));
    QVERIFY(head.header("Authorization").isEmpty());
}

void TestHttpTypes::bearerToken_data()
{
    QTest::addColumn<QByteArray>("authorization");
    QTest::addColumn<QByteArray>("token");
    QTest::newRow("bearer") << QByteArray("Bearer abc.def-123") << QByteArray("abc.def-123");
    QTest::newRow("scheme in any case") << QByteArray("bEaReR tok") << QByteArray("tok");
    QTest::newRow("blanks around") << QByteArray("  Bearer   tok  ") << QByteArray("tok");
    QTest::newRow("basic is not bearer") << QByteArray("Basic dXNlcjpwYXNz") << QByteArray();
    QTest::newRow("scheme alone") << QByteArray("Bearer") << QByteArray();
    QTest::newRow("two words") << QByteArray("Bearer a b") << QByteArray();
    QTest::newRow("absent") << QByteArray() << QByteArray();
}

void TestHttpTypes::bearerToken()
{
    QFETCH(QByteArray, authorization);
    QFETCH(QByteArray, token);
    RequestHead head;
    if (!authorization.isNull())
        head.headers.append({"Authorization", authorization});
    QCOMPARE(head.bearerToken(), token);
}

void TestHttpTypes::responseFactories()
{
    const HttpResponse json = HttpResponse::json(201, QJsonObject{{QStringLiteral("id"), 7}});
    QCOMPARE(json.status, 201);
    QCOMPARE(json.contentType, QByteArray("application/json"));
    QCOMPARE(json.body, QByteArray(R"({"id":7})"));

    const HttpResponse error = HttpResponse::error(409, QStringLiteral("lease \"x\" is stale"));
    QCOMPARE(error.status, 409);
    QCOMPARE(QJsonDocument::fromJson(error.body).object().value(QStringLiteral("error")).toString(),
             QStringLiteral("lease \"x\" is stale"));

    const HttpResponse file = HttpResponse::file(QStringLiteral("/data/blob"), "ab12", {});
    QCOMPARE(file.status, 200);
    QCOMPARE(file.filePath, QStringLiteral("/data/blob"));
    QCOMPARE(file.etag, QByteArray("ab12"));
    QCOMPARE(file.contentType, QByteArray("application/octet-stream"));
}

void TestHttpTypes::byteRange_data()
{
    using Outcome = ByteRangeRequest::Outcome;
    QTest::addColumn<QByteArray>("header");
    QTest::addColumn<qint64>("size");
    QTest::addColumn<int>("outcome");
    QTest::addColumn<qint64>("first");
    QTest::addColumn<qint64>("last");
    const int whole = int(Outcome::Whole);
    const int partial = int(Outcome::Partial);
    const int unsatisfiable = int(Outcome::Unsatisfiable);

    QTest::newRow("absent") << QByteArray() << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("a-b") << QByteArray("bytes=0-9") << qint64(100) << partial << qint64(0) << qint64(9);
    QTest::newRow("a-b clipped") << QByteArray("bytes=90-200") << qint64(100) << partial << qint64(90)
                                 << qint64(99);
    QTest::newRow("a-a") << QByteArray("bytes=5-5") << qint64(100) << partial << qint64(5) << qint64(5);
    QTest::newRow("a-") << QByteArray("bytes=40-") << qint64(100) << partial << qint64(40) << qint64(99);
    QTest::newRow("last byte") << QByteArray("bytes=99-") << qint64(100) << partial << qint64(99)
                               << qint64(99);
    QTest::newRow("-n") << QByteArray("bytes=-10") << qint64(100) << partial << qint64(90) << qint64(99);
    QTest::newRow("-n over size") << QByteArray("bytes=-500") << qint64(100) << partial << qint64(0)
                                  << qint64(99);
    QTest::newRow("blanks and case") << QByteArray(" Bytes= 1 - 2 ") << qint64(100) << partial << qint64(1)
                                     << qint64(2);
    QTest::newRow("start at size") << QByteArray("bytes=100-") << qint64(100) << unsatisfiable << qint64(0)
                                   << qint64(-1);
    QTest::newRow("-0") << QByteArray("bytes=-0") << qint64(100) << unsatisfiable << qint64(0) << qint64(-1);
    QTest::newRow("empty file") << QByteArray("bytes=0-") << qint64(0) << unsatisfiable << qint64(0)
                                << qint64(-1);
    QTest::newRow("empty file suffix")
        << QByteArray("bytes=-1") << qint64(0) << unsatisfiable << qint64(0) << qint64(-1);
    QTest::newRow("reversed") << QByteArray("bytes=9-3") << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("several") << QByteArray("bytes=0-1,4-5") << qint64(100) << whole << qint64(0)
                             << qint64(-1);
    QTest::newRow("other unit") << QByteArray("items=0-1") << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("no dash") << QByteArray("bytes=12") << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("only dash") << QByteArray("bytes=-") << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("sign") << QByteArray("bytes=+1-2") << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("hex") << QByteArray("bytes=0x1-2") << qint64(100) << whole << qint64(0) << qint64(-1);
    QTest::newRow("overflow") << QByteArray("bytes=99999999999999999999-") << qint64(100) << whole
                              << qint64(0) << qint64(-1);
}

void TestHttpTypes::byteRange()
{
    QFETCH(QByteArray, header);
    QFETCH(qint64, size);
    QFETCH(int, outcome);
    QFETCH(qint64, first);
    QFETCH(qint64, last);
    const ByteRangeRequest range = parseByteRange(header, size);
    QCOMPARE(int(range.outcome), outcome);
    if (range.outcome == ByteRangeRequest::Outcome::Partial) {
        QCOMPARE(range.first, first);
        QCOMPARE(range.last, last);
    }
}

void TestHttpTypes::etagMatching_data()
{
    QTest::addColumn<QByteArray>("ifNoneMatch");
    QTest::addColumn<bool>("matches");
    QTest::newRow("same") << QByteArray("\"abc\"") << true;
    QTest::newRow("weak") << QByteArray("W/\"abc\"") << true;
    QTest::newRow("in a list") << QByteArray("\"x\", \"abc\" ,\"y\"") << true;
    QTest::newRow("star") << QByteArray("*") << true;
    QTest::newRow("other") << QByteArray("\"abd\"") << false;
    QTest::newRow("unquoted") << QByteArray("abc") << false;
    QTest::newRow("empty") << QByteArray() << false;
}

void TestHttpTypes::etagMatching()
{
    QFETCH(QByteArray, ifNoneMatch);
    QFETCH(bool, matches);
    QCOMPARE(etagMatches(ifNoneMatch, "\"abc\""), matches);
}

QTEST_GUILESS_MAIN(TestHttpTypes)
#include "TestHttpTypes.moc"
