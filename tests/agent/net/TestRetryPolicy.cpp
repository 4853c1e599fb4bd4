// RetryPolicy: how long the agent waits before asking its coordinator again, and which failures are worth
// another try. A fixed random source makes every wait exact.
#include "net/RetryPolicy.h"

#include <QTest>

#include <set>

using namespace gleaner;
using namespace gleaner::agent;
using Failure = TransportResponse::Failure;

class TestRetryPolicy : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void delays_data();
    void delays();
    void jitterStaysWithinItsBoundsAndSpreads();
    void statuses_data();
    void statuses();
    void failures_data();
    void failures();
    void attemptsAndElapsedTimeAreLimited();
    void retryAfterHeader_data();
    void retryAfterHeader();
};

void TestRetryPolicy::delays_data()
{
    QTest::addColumn<int>("retry");
    QTest::addColumn<double>("random");
    QTest::addColumn<qint64>("retryAfterMs");
    QTest::addColumn<qint64>("expected");
    // Defaults: base 1 s, cap 5 min, full jitter = random × min(cap, base × 2^(retry-1)).
    QTest::newRow("first retry, top of the range") << 1 << 0.999 << qint64(-1) << qint64(999);
    QTest::newRow("first retry, bottom") << 1 << 0.0 << qint64(-1) << qint64(0);
    QTest::newRow("second retry doubles") << 2 << 0.5 << qint64(-1) << qint64(1000);
    QTest::newRow("third retry doubles again") << 3 << 0.5 << qint64(-1) << qint64(2000);
    QTest::newRow("ninth retry: 256 s") << 9 << 0.5 << qint64(-1) << qint64(128'000);
    QTest::newRow("tenth retry is capped at 5 min") << 10 << 0.5 << qint64(-1) << qint64(150'000);
    QTest::newRow("capped for good, no overflow") << 1000 << 0.999 << qint64(-1) << qint64(299'700);
    QTest::newRow("random source out of range is clamped") << 1 << 7.0 << qint64(-1) << qint64(1000);
    QTest::newRow("retry_after is a floor") << 1 << 0.5 << qint64(10'000) << qint64(10'000);
    QTest::newRow("retry_after below the backoff") << 12 << 0.5 << qint64(3'000) << qint64(150'000);
    QTest::newRow("retry_after of zero") << 1 << 0.25 << qint64(0) << qint64(250);
    QTest::newRow("absurd retry_after is capped at an hour") << 1 << 0.5 << qint64(99'000'000) << qint64(3'600'000);
}

void TestRetryPolicy::delays()
{
    QFETCH(int, retry);
    QFETCH(double, random);
    QFETCH(qint64, retryAfterMs);
    QFETCH(qint64, expected);
    const RetryPolicy policy(RetryOptions{}, [random] { return random; });
    QCOMPARE(policy.delayMs(retry, retryAfterMs), expected);
}

void TestRetryPolicy::jitterStaysWithinItsBoundsAndSpreads()
{
    const RetryPolicy policy; // the real random source
    for (int retry = 1; retry <= 12; ++retry) {
        const qint64 ceiling = qMin<qint64>(300'000, 1000LL << (retry - 1));
        std::set<qint64> seen;
        for (int i = 0; i < 200; ++i) {
            const qint64 d = policy.delayMs(retry);
            QVERIFY2(d >= 0 && d <= ceiling, qPrintable(QStringLiteral("retry %1 waited %2").arg(retry).arg(d)));
            seen.insert(d);
        }
        // Agents that failed together must not come back together.
        QVERIFY2(seen.size() > 100, qPrintable(QStringLiteral("retry %1: only %2 distinct waits").arg(retry).arg(seen.size())));
    }
}

void TestRetryPolicy::statuses_data()
{
    QTest::addColumn<int>("status");
    QTest::addColumn<bool>("retry");
    QTest::newRow("200") << 200 << false;
    QTest::newRow("202") << 202 << false;
    QTest::newRow("400 malformed") << 400 << false;
    QTest::newRow("401 token") << 401 << false;
    QTest::newRow("403 revoked") << 403 << false;
    QTest::newRow("404 unknown") << 404 << false;
    QTest::newRow("408 request timeout") << 408 << true;
    QTest::newRow("409 closed") << 409 << false;
    QTest::newRow("413 too large") << 413 << false;
    QTest::newRow("416 range") << 416 << false;
    QTest::newRow("422 invalid") << 422 << false;
    QTest::newRow("429 too many") << 429 << true;
    QTest::newRow("500 coordinator failed") << 500 << true;
    QTest::newRow("502 proxy") << 502 << true;
    QTest::newRow("503 unavailable") << 503 << true;
    QTest::newRow("504 gateway timeout") << 504 << true;
}

void TestRetryPolicy::statuses()
{
    QFETCH(int, status);
    QFETCH(bool, retry);
    QCOMPARE(RetryPolicy::isRetryableStatus(status), retry);
    TransportResponse r;
    r.status = status;
    QCOMPARE(RetryPolicy::isRetryable(r), retry);
}

void TestRetryPolicy::failures_data()
{
    QTest::addColumn<int>("failure");
    QTest::addColumn<bool>("retry");
    QTest::newRow("connection refused") << int(Failure::Connect) << true;
    QTest::newRow("timeout or hang") << int(Failure::Timeout) << true;
    QTest::newRow("broken or truncated") << int(Failure::Network) << true;
    QTest::newRow("untrusted certificate") << int(Failure::Tls) << false;
    QTest::newRow("cancelled") << int(Failure::Cancelled) << false;
    QTest::newRow("local file") << int(Failure::LocalFile) << false;
    QTest::newRow("malformed answer") << int(Failure::Protocol) << false;
}

void TestRetryPolicy::failures()
{
    QFETCH(int, failure);
    QFETCH(bool, retry);
    TransportResponse r;
    r.failure = Failure(failure);
    r.status = 503; // a failure's status is meaningless: it must not make a TLS error retryable
    QCOMPARE(RetryPolicy::isRetryable(r), retry);
}

void TestRetryPolicy::attemptsAndElapsedTimeAreLimited()
{
    RetryOptions options;
    options.maxAttempts = 3;
    options.maxElapsedMs = 60'000;
    const RetryPolicy policy(options, [] { return 0.5; });
    QVERIFY(policy.mayRetry(1, 0, 0, 500));
    QVERIFY(policy.mayRetry(2, 0, 1'000, 1'000));
    QVERIFY(!policy.mayRetry(3, 0, 2'000, 2'000)); // three tries made: no fourth
    QVERIFY(!policy.mayRetry(1, 0, 59'000, 2'000)); // the wait would end past the budget
    QVERIFY(policy.mayRetry(1, 0, 58'000, 2'000));
    options.maxAttempts = 0; // unlimited tries, until the time budget
    QVERIFY(RetryPolicy(options).mayRetry(1000, 0, 1'000, 1'000));
}

void TestRetryPolicy::retryAfterHeader_data()
{
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<qint64>("expected");
    QTest::newRow("absent") << QByteArray() << qint64(-1);
    QTest::newRow("seconds") << QByteArray("7") << qint64(7000);
    QTest::newRow("padded") << QByteArray(" 12 ") << qint64(12000);
    QTest::newRow("negative") << QByteArray("-3") << qint64(-1);
    QTest::newRow("HTTP date is not understood") << QByteArray("Wed, 21 Oct 2015 07:28:00 GMT") << qint64(-1);
}

void TestRetryPolicy::retryAfterHeader()
{
    QFETCH(QByteArray, value);
    QFETCH(qint64, expected);
    TransportResponse r;
    r.status = 429;
    if (!value.isNull())
        r.headers.emplaceBack("retry-after", value);
    QCOMPARE(RetryPolicy::retryAfterHeaderMs(r), expected);
}

QTEST_GUILESS_MAIN(TestRetryPolicy)
#include "TestRetryPolicy.moc"
