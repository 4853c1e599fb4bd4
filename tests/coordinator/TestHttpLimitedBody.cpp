// LimitedBody, the request body that counts its bytes: it refuses what passes its limit whatever the head said,
// with Beast's own checks switched off, so the limit holds even for a head that slipped past them.
#include "http/HttpLimitedBody.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <QTest>

#include <algorithm>
#include <limits>

using namespace gleaner::coordinator::http_detail;
namespace http = boost::beast::http;

namespace {

struct Parsed
{
    boost::beast::error_code error;
    std::string body;
};

// Feeds `request` in pieces of `step` bytes, as reads from a socket would.
Parsed parse(const QByteArray& request, std::uint64_t limit, std::size_t step)
{
    http::request_parser<LimitedBody<http::string_body>> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max()); // Beast's checks off: the sink alone counts
    parser.get().body().limit = limit;
    Parsed parsed;
    std::size_t at = 0;
    std::size_t pending = 0; // bytes Beast did not take yet (it wants the whole head at once)
    while (!parser.is_done() && at < std::size_t(request.size())) {
        pending = std::min(std::size_t(request.size()) - at, pending + step);
        const std::size_t used = parser.put(boost::asio::buffer(request.constData() + at, pending), parsed.error);
        if (parsed.error == http::error::need_more) {
            parsed.error = {};
            continue;
        }
        if (parsed.error)
            return parsed;
        at += used;
        pending -= used;
    }
    parsed.body = parser.get().body().inner;
    return parsed;
}

QByteArray chunked(int chunks, int chunkBytes)
{
    QByteArray request = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < chunks; ++i)
        request += QByteArray::number(chunkBytes, 16) + "\r\n" + QByteArray(chunkBytes, 'c') + "\r\n";
    return request + "0\r\n\r\n";
}

} // namespace

class TestHttpLimitedBody : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void bodiesWithinTheLimitPass_data();
    void bodiesWithinTheLimitPass();
    void bytesPastTheLimitAreRefused_data();
    void bytesPastTheLimitAreRefused();
};

void TestHttpLimitedBody::bodiesWithinTheLimitPass_data()
{
    QTest::addColumn<QByteArray>("request");
    QTest::addColumn<int>("bytes");
    QTest::newRow("Content-Length at the limit")
        << QByteArray("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n") + QByteArray(100, 'b') << 100;
    QTest::newRow("chunked at the limit") << chunked(10, 10) << 100;
    QTest::newRow("empty") << QByteArray("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n") << 0;
}

void TestHttpLimitedBody::bodiesWithinTheLimitPass()
{
    QFETCH(QByteArray, request);
    QFETCH(int, bytes);
    for (const std::size_t step : {std::size_t(1), std::size_t(7), std::size_t(4096)}) {
        const Parsed parsed = parse(request, 100, step);
        QVERIFY2(!parsed.error, parsed.error.message().c_str());
        QCOMPARE(int(parsed.body.size()), bytes);
    }
}

void TestHttpLimitedBody::bytesPastTheLimitAreRefused_data()
{
    QTest::addColumn<QByteArray>("request");
    QTest::newRow("Content-Length over the limit")
        << QByteArray("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n") + QByteArray(101, 'b');
    // What a wrapped or lying head amounts to: Beast believes the length, the sink counts the bytes.
    QTest::newRow("Content-Length 2^63")
        << QByteArray("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\n") +
               QByteArray(4096, 'b');
    QTest::newRow("chunked, many small chunks") << chunked(101, 1);
    QTest::newRow("chunked, one large chunk") << chunked(1, 4096);
}

void TestHttpLimitedBody::bytesPastTheLimitAreRefused()
{
    QFETCH(QByteArray, request);
    for (const std::size_t step : {std::size_t(1), std::size_t(7), std::size_t(4096)}) {
        const Parsed parsed = parse(request, 100, step);
        QVERIFY2(parsed.error == http::error::body_limit, parsed.error.message().c_str());
    }
}

QTEST_GUILESS_MAIN(TestHttpLimitedBody)
#include "TestHttpLimitedBody.moc"
