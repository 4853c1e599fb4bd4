// CoordinatorClient over a scripted transport: refused connections, hangs, truncated and slow bodies, 5xx and 429
// answers. The sleeper advances a ManualClock instead of sleeping, so every retry is checked in milliseconds.
#include "FakeTransport.h"
#include "TestSupport.h"

#include "net/CoordinatorClient.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;
using gleaner::agent::test::FakeTransport;
using Failure = TransportResponse::Failure;

namespace {

const QString kBase = QStringLiteral("https://coordinator.test:8443");
const QString kSha = QString(64, u'a');

// A lease id as the coordinator issues them (32 hex digits), named by one letter for the test's reading.
LeaseId lease(char letter)
{
    return *LeaseId::parse(QString(LeaseId::kLength, QLatin1Char(letter)));
}

QByteArray pattern(qint64 size)
{
    QByteArray bytes(size, '\0');
    for (qint64 i = 0; i < size; ++i)
        bytes[i] = char((i * 7 + i / 251) & 0xff);
    return bytes;
}

} // namespace

class TestCoordinatorClient : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void refusedConnectionIsRetriedWithGrowingWaits();
    void unreachableCoordinatorGivesUpWithAClearMessage();
    void serviceUnavailableThenWork();
    void tooManyRequestsHonoursRetryAfter();
    void hangEndsAsATimeoutError();
    void untrustedCertificateIsNeverRetried();
    void sleeperInterruptionStopsRetrying();
    void elapsedBudgetStopsRetrying();
    void enrollIsRetriedOnlyWhenUnreachable();
    void truncatedDownloadResumesWithRange();
    void slowDownloadReportsProgressAndCanBeCancelled();
    void serverIgnoringTheRangeRestartsTheFile();
    void refusedRangeRestartsFromZero();
    void downloadOfWrongSizeIsDeleted();
    void oversizedDownloadStopsAtTheSignedSize_data();
    void oversizedDownloadStopsAtTheSignedSize();
    void missingFileIsFinal();
    void badHashIsRefusedBeforeAnyRequest();
    void uploadOutcomes_data();
    void uploadOutcomes();
    void uploadAfterALostAnswerCountsOnce();
    void progressOfAGoneLeaseAborts();
    void failureReportOutcomes_data();
    void failureReportOutcomes();
    void failureReportIsRetriedLikeProgress();
    void failureReportIsCheckedBeforeItIsSent();
    void leaseKeepsTheExactManifestBytes();
    void leaseRefusesIdsThatAreNotLeaseIds_data();
    void leaseRefusesIdsThatAreNotLeaseIds();

private:
    CoordinatorClient client(RetryOptions options = {});

    std::unique_ptr<QTemporaryDir> m_dir;
    FakeTransport m_transport;
    ManualClock m_clock;
    QList<qint64> m_waits;
    bool m_interrupt = false;
};

void TestCoordinatorClient::init()
{
    m_dir = gleaner::test::scratchDir();
    m_transport = FakeTransport();
    m_waits.clear();
    m_interrupt = false;
    m_clock.set(ManualClock().nowMs());
}

CoordinatorClient TestCoordinatorClient::client(RetryOptions options)
{
    const RetryPolicy policy(options, [] { return 0.5; });
    CoordinatorClient c(m_transport, kBase + u'/', m_clock, policy, [this](qint64 ms) {
        m_waits.append(ms);
        m_clock.advance(ms);
        return !m_interrupt;
    });
    c.setAgentToken("gag_test");
    return c;
}

void TestCoordinatorClient::refusedConnectionIsRetriedWithGrowingWaits()
{
    m_transport.pushTimes(3, FakeTransport::failure(Failure::Connect, QStringLiteral("Couldn't connect to server")));
    m_transport.push(FakeTransport::answer(200, R"({"name": "gleaner-coordinator", "protocol": 1, "version": "0.1.0",
        "open_enrollment": true, "signing_public_key": "PEM"})"));
    auto c = client();
    const auto info = c.info();
    QVERIFY2(info.ok(), qPrintable(info.error()));
    QCOMPARE(info->signingPublicKeyPem, QByteArray("PEM"));
    QVERIFY(info->openEnrollment);
    QCOMPARE(m_transport.requests().size(), 4);
    QCOMPARE(m_transport.requests().first().url, kBase + QStringLiteral("/api/v1/info"));
    QCOMPARE(m_waits, (QList<qint64>{500, 1000, 2000})); // half of 1, 2, 4 s (the random source says 0.5)
}

void TestCoordinatorClient::unreachableCoordinatorGivesUpWithAClearMessage()
{
    m_transport.setFallback(FakeTransport::failure(Failure::Connect, QStringLiteral("Couldn't connect to server")));
    RetryOptions options;
    options.maxAttempts = 4;
    auto c = client(options);
    const auto leased = c.lease({}, 1);
    QVERIFY(!leased.ok());
    QCOMPARE(m_transport.requests().size(), 4);
    QVERIFY2(leased.error().contains(kBase), qPrintable(leased.error()));
    QVERIFY2(leased.error().contains(u"cannot reach the coordinator"), qPrintable(leased.error()));
    QVERIFY2(leased.error().contains(u"after 4 tries"), qPrintable(leased.error()));
    QVERIFY2(leased.error().contains(u"check that it runs"), qPrintable(leased.error()));
}

void TestCoordinatorClient::serviceUnavailableThenWork()
{
    m_transport.push(FakeTransport::answer(503, R"({"error": "the database is locked"})"));
    m_transport.push(FakeTransport::answer(200, R"({"tasks": [], "retry_after": 10})"));
    auto c = client();
    const auto leased = c.lease({kSha}, 2);
    QVERIFY2(leased.ok(), qPrintable(leased.error()));
    QVERIFY(leased->tasks.isEmpty());
    QCOMPARE(leased->retryAfterSeconds, 10); // the empty reply's hint goes to the caller, not to the retry loop
    QCOMPARE(m_transport.requests().size(), 2);
    QCOMPARE(m_waits.size(), 1);
    const TransportRequest& sent = m_transport.requests().last();
    QCOMPARE(sent.method, QByteArray("POST"));
    QCOMPARE(sent.url, kBase + QStringLiteral("/api/v1/work/lease"));
    QVERIFY(sent.headers.contains({"Authorization", "Bearer gag_test"}));
    const QJsonObject body = QJsonDocument::fromJson(sent.body).object();
    QCOMPARE(body.value(QStringLiteral("max_tasks")).toInt(), 2);
    QCOMPARE(body.value(QStringLiteral("cached")).toArray().first().toString(), kSha);
}

void TestCoordinatorClient::tooManyRequestsHonoursRetryAfter()
{
    m_transport.push(FakeTransport::answer(429, R"({"error": "slow down"})", {{"Retry-After", "42"}}));
    m_transport.push(FakeTransport::answer(503, R"({"error": "busy", "retry_after": 17})"));
    m_transport.push(FakeTransport::answer(200, R"({"abort": false, "deadline_ms": 1700000060000})"));
    auto c = client();
    const auto reply = c.progress(lease('1'), ProgressReport{3, 10, 0.5, 100});
    QVERIFY2(reply.ok(), qPrintable(reply.error()));
    QVERIFY(!reply->abort);
    QCOMPARE(reply->deadlineMs, 1700000060000);
    QCOMPARE(m_waits, (QList<qint64>{42'000, 17'000}));
}

void TestCoordinatorClient::hangEndsAsATimeoutError()
{
    // What CurlTransport reports when a server accepts and then sends nothing (the stall timeout).
    m_transport.setFallback(FakeTransport::failure(
        Failure::Timeout, QStringLiteral("Timeout was reached (Operation too slow. Less than 1 bytes/sec transferred "
                                         "the last 60 seconds)")));
    RetryOptions options;
    options.maxAttempts = 3;
    auto c = client(options);
    const auto reply = c.progress(lease('1'), ProgressReport{});
    QVERIFY(!reply.ok());
    QCOMPARE(m_transport.requests().size(), 3);
    QVERIFY2(reply.error().contains(u"did not answer in time"), qPrintable(reply.error()));
    QVERIFY2(reply.error().contains(u"Operation too slow"), qPrintable(reply.error()));
}

void TestCoordinatorClient::untrustedCertificateIsNeverRetried()
{
    m_transport.push(FakeTransport::failure(Failure::Tls, QStringLiteral("SSL peer certificate was not OK")));
    auto c = client();
    const auto info = c.info();
    QVERIFY(!info.ok());
    QCOMPARE(m_transport.requests().size(), 1);
    QVERIFY2(info.error().contains(u"not trusted"), qPrintable(info.error()));
    QVERIFY2(info.error().contains(u"--ca"), qPrintable(info.error()));
}

void TestCoordinatorClient::sleeperInterruptionStopsRetrying()
{
    m_transport.setFallback(FakeTransport::answer(500, R"({"error": "disk full"})"));
    m_interrupt = true;
    auto c = client();
    const auto leased = c.lease({}, 1);
    QVERIFY(!leased.ok());
    QCOMPARE(m_transport.requests().size(), 1);
    QVERIFY2(leased.error().contains(u"disk full"), qPrintable(leased.error()));
    QVERIFY2(leased.error().contains(u"stopping"), qPrintable(leased.error()));
}

void TestCoordinatorClient::elapsedBudgetStopsRetrying()
{
    m_transport.setFallback(FakeTransport::answer(502, "<html>bad gateway</html>"));
    RetryOptions options;
    options.maxAttempts = 0;
    options.maxElapsedMs = 10'000; // waits of 0.5, 1, 2, 4 s fit (7.5 s); the next 8 s would not
    auto c = client(options);
    const auto leased = c.lease({}, 1);
    QVERIFY(!leased.ok());
    QCOMPARE(m_transport.requests().size(), 5);
    QCOMPARE(m_clock.nowMs() - ManualClock().nowMs(), 7'500);
    QVERIFY2(leased.error().contains(u"bad gateway"), qPrintable(leased.error()));
}

void TestCoordinatorClient::enrollIsRetriedOnlyWhenUnreachable()
{
    m_transport.push(FakeTransport::failure(Failure::Connect, QStringLiteral("Connection refused")));
    m_transport.push(FakeTransport::answer(500, R"({"error": "database failure"})"));
    auto c = client();
    EnrollRequest request{QStringLiteral("box"), QStringLiteral("linux"), {}, QStringLiteral("gle_x")};
    const auto enrolled = c.enroll(request);
    QVERIFY(!enrolled.ok());
    // A 500 may have enrolled the agent already: asking again could make a second one. Refused connections are safe.
    QCOMPARE(m_transport.requests().size(), 2);
    QCOMPARE(QJsonDocument::fromJson(m_transport.requests().last().body).object().value(QStringLiteral("enrollment_token")),
             QJsonValue(QStringLiteral("gle_x")));
    QVERIFY(!m_transport.requests().last().headers.contains({"Authorization", "Bearer gag_test"}));

    m_transport.push(FakeTransport::answer(401, R"({"error": "the enrollment token was revoked"})"));
    const auto refused = c.enroll(request);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"revoked") && refused.error().contains(u"token create"), qPrintable(refused.error()));
}

void TestCoordinatorClient::truncatedDownloadResumesWithRange()
{
    const QByteArray content = pattern(100'000);
    const QString target = m_dir->filePath(QStringLiteral("cache/partial/file"));
    m_transport.push(FakeTransport::serveFile(content, 30'000));
    m_transport.push(FakeTransport::serveFile(content, 50'000));
    m_transport.push(FakeTransport::serveFile(content));
    auto c = client();
    c.setRateLimits(1000, 2000);
    const Status done = c.download(kSha, target, content.size());
    QVERIFY2(done.ok(), qPrintable(done.error()));
    QCOMPARE(gleaner::test::readFile(target), content);
    const auto& requests = m_transport.requests();
    QCOMPARE(requests.size(), 3);
    QCOMPARE(requests[0].maxReceiveBytesPerSecond, 2000); // the owner's download cap
    QCOMPARE(requests[0].url, kBase + QStringLiteral("/api/v1/files/") + kSha);
    QCOMPARE(requests[0].resumeFrom, 0);
    QCOMPARE(requests[1].resumeFrom, 30'000);
    QCOMPARE(requests[2].resumeFrom, 80'000);
    // The range applies only while the file is still this one: If-Range carries its ETag, the hash.
    QVERIFY(requests[2].headers.contains({"If-Range", '"' + kSha.toLatin1() + '"'}));
    QVERIFY(!requests[0].headers.contains({"If-Range", '"' + kSha.toLatin1() + '"'}));
    QCOMPARE(requests[2].downloadFile, target);

    // A later call with the complete file asks nothing.
    QVERIFY(c.download(kSha, target, content.size()).ok());
    QCOMPARE(m_transport.requests().size(), 3);
}

void TestCoordinatorClient::slowDownloadReportsProgressAndCanBeCancelled()
{
    const QByteArray content = pattern(64'000);
    const QString target = m_dir->filePath(QStringLiteral("slow"));
    m_transport.push(FakeTransport::serveFile(content, 16'000, true, 1000));
    m_transport.push(FakeTransport::serveFile(content, -1, true, 1000));
    auto c = client();
    QList<qint64> seen;
    const Status done = c.download(kSha, target, content.size(), [&](const TransferProgress& p) {
        seen.append(p.downloaded);
        return p.downloadTotal == content.size();
    });
    QVERIFY2(done.ok(), qPrintable(done.error()));
    QCOMPARE(seen.size(), 64);
    // Whole-file figures: the resumed part continues from 16 000 instead of starting over.
    for (int i = 0; i < seen.size(); ++i)
        QCOMPARE(seen[i], qint64(i + 1) * 1000);

    // Returning false cancels, keeps what arrived for a later resume, and is not retried.
    QFile::remove(target);
    m_transport.push(FakeTransport::serveFile(content, -1, true, 1000));
    const Status cancelled = c.download(kSha, target, content.size(), [](const TransferProgress& p) {
        return p.downloaded < 5000;
    });
    QVERIFY(!cancelled.ok());
    QVERIFY2(cancelled.error().contains(u"cancelled"), qPrintable(cancelled.error()));
    QCOMPARE(QFileInfo(target).size(), 5000);
    QCOMPARE(m_transport.pending(), 0);
}

void TestCoordinatorClient::serverIgnoringTheRangeRestartsTheFile()
{
    const QByteArray content = pattern(20'000);
    const QString target = m_dir->filePath(QStringLiteral("f"));
    QFile partial(target);
    QVERIFY(partial.open(QIODevice::WriteOnly));
    partial.write(QByteArray(5000, 'x'));
    partial.close();
    m_transport.push(FakeTransport::serveFile(content, -1, /*honourRange=*/false));
    auto c = client();
    QVERIFY(c.download(kSha, target, content.size()).ok());
    QCOMPARE(m_transport.requests().first().resumeFrom, 5000);
    QCOMPARE(gleaner::test::readFile(target), content); // a 200 answer replaced the stale bytes
}

void TestCoordinatorClient::refusedRangeRestartsFromZero()
{
    const QByteArray content = pattern(2000);
    const QString target = m_dir->filePath(QStringLiteral("f"));
    QFile partial(target);
    QVERIFY(partial.open(QIODevice::WriteOnly));
    partial.write(QByteArray(1500, 'x'));
    partial.close();
    m_transport.push(FakeTransport::answer(416, R"({"error": "range"})", {{"Content-Range", "bytes */1000"}}));
    m_transport.push(FakeTransport::serveFile(content));
    auto c = client();
    const Status done = c.download(kSha, target, content.size());
    QVERIFY2(done.ok(), qPrintable(done.error()));
    QCOMPARE(m_transport.requests()[1].resumeFrom, 0);
    QCOMPARE(gleaner::test::readFile(target), content);
}

void TestCoordinatorClient::downloadOfWrongSizeIsDeleted()
{
    const QString target = m_dir->filePath(QStringLiteral("f"));
    m_transport.push(FakeTransport::serveFile(pattern(999)));
    auto c = client();
    const Status done = c.download(kSha, target, 1000);
    QVERIFY(!done.ok());
    QVERIFY2(done.error().contains(u"999") && done.error().contains(u"1000"), qPrintable(done.error()));
    QVERIFY(!QFile::exists(target));
}

void TestCoordinatorClient::oversizedDownloadStopsAtTheSignedSize_data()
{
    QTest::addColumn<qint64>("held"); // bytes of the partial file before the download: a resume from there
    QTest::newRow("from zero") << qint64(0);
    QTest::newRow("resumed") << qint64(600);
}

void TestCoordinatorClient::oversizedDownloadStopsAtTheSignedSize()
{
    // A server that sends far more than the signed size (a hostile one could send without end): the body is
    // cut off at the size, not after it all arrived, the partial file is deleted, and it is not asked again.
    QFETCH(qint64, held);
    const QString target = m_dir->filePath(QStringLiteral("f"));
    const QByteArray content = pattern(1'000'000);
    if (held > 0)
        QVERIFY(gleaner::test::writeFile(target, content.left(held)));
    m_transport.push(FakeTransport::serveFile(content, -1, true, 100));
    auto c = client();
    const Status done = c.download(kSha, target, 1000);
    QVERIFY(!done.ok());
    QVERIFY2(CoordinatorClient::isOversizedDownload(done.error()), qPrintable(done.error()));
    QVERIFY2(done.error().contains(u"1000"), qPrintable(done.error()));
    QCOMPARE(m_transport.requests().size(), 1);
    QCOMPARE(m_transport.requests().first().maxDownloadBytes, 1000);
    QVERIFY(!QFile::exists(target));
}

void TestCoordinatorClient::missingFileIsFinal()
{
    m_transport.push(FakeTransport::answer(404, R"({"error": "no such file"})"));
    auto c = client();
    const QString target = m_dir->filePath(QStringLiteral("f"));
    const Status done = c.download(kSha, target, 10);
    QVERIFY(!done.ok());
    QCOMPARE(m_transport.requests().size(), 1);
    QVERIFY2(done.error().contains(u"no such file") && done.error().contains(kBase), qPrintable(done.error()));
    QVERIFY(!QFile::exists(target)); // an error answer's body never lands in the cache
}

void TestCoordinatorClient::badHashIsRefusedBeforeAnyRequest()
{
    auto c = client();
    QVERIFY(!c.download(QStringLiteral("../../etc/passwd"), m_dir->filePath(QStringLiteral("f")), 10).ok());
    QVERIFY(!c.download(kSha.toUpper(), m_dir->filePath(QStringLiteral("f")), 10).ok());
    QCOMPARE(m_transport.requests().size(), 0);
}

void TestCoordinatorClient::uploadOutcomes_data()
{
    QTest::addColumn<int>("status");
    QTest::addColumn<int>("outcome"); // -1: an error
    QTest::addColumn<QString>("message");
    QTest::newRow("202 accepted") << 202 << int(UploadOutcome::Accepted) << QString();
    QTest::newRow("409 duplicate") << 409 << int(UploadOutcome::Closed) << QStringLiteral("duplicate");
    QTest::newRow("404 unknown lease") << 404 << int(UploadOutcome::Unknown) << QStringLiteral("not open");
    QTest::newRow("413 too large") << 413 << int(UploadOutcome::TooLarge) << QStringLiteral("exceeds");
    QTest::newRow("422 invalid") << 422 << int(UploadOutcome::Invalid) << QStringLiteral("NaN");
    QTest::newRow("401 token") << 401 << -1 << QStringLiteral("enroll the agent again");
    QTest::newRow("403 revoked") << 403 << -1 << QStringLiteral("revoked");
}

void TestCoordinatorClient::uploadOutcomes()
{
    QFETCH(int, status);
    QFETCH(int, outcome);
    QFETCH(QString, message);
    const QString file = m_dir->filePath(QStringLiteral("result.safetensors"));
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("weights");
    f.close();
    const QByteArray body = status == 202 ? QByteArray(R"({"accepted": true, "seq": 4, "staleness": 1})")
                                          : R"({"error": ")" + message.toUtf8() + R"( and revoked"})";
    m_transport.push(FakeTransport::answer(status, body));
    auto c = client();
    c.setRateLimits(5000, 0);
    const auto reply = c.uploadResult(lease('9'), file);
    QCOMPARE(m_transport.requests().first().maxSendBytesPerSecond, 5000); // the owner's upload cap
    QCOMPARE(m_transport.requests().size(), 1);
    QCOMPARE(m_transport.requests().first().method, QByteArray("PUT"));
    QCOMPARE(m_transport.requests().first().url, kBase + QStringLiteral("/api/v1/work/%1/result").arg(lease('9').toString()));
    QCOMPARE(m_transport.requests().first().uploadFile, file);
    if (outcome < 0) {
        QVERIFY(!reply.ok());
        QVERIFY2(reply.error().contains(message), qPrintable(reply.error()));
        // 401 and 403 are what the daemon stops on; nothing else is.
        QVERIFY(CoordinatorClient::isCredentialRefusal(reply.error()));
        return;
    }
    QVERIFY2(reply.ok(), qPrintable(reply.error()));
    QCOMPARE(int(reply->outcome), outcome);
    if (status == 202) {
        QCOMPARE(reply->seq, 4);
        QCOMPARE(reply->staleness, 1);
    } else {
        QVERIFY(reply->message.contains(message));
    }
}

void TestCoordinatorClient::uploadAfterALostAnswerCountsOnce()
{
    const QString file = m_dir->filePath(QStringLiteral("result.safetensors"));
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("weights");
    f.close();
    // The first upload arrived but its answer was lost; a 500 follows; the third try learns it counted.
    m_transport.push(FakeTransport::failure(Failure::Network, QStringLiteral("Recv failure: Connection reset by peer")));
    m_transport.push(FakeTransport::answer(500, R"({"error": "the server did not answer in time"})"));
    m_transport.push(FakeTransport::answer(
        409, R"({"error": "the result of lease L was already received; this copy is a duplicate"})"));
    auto c = client();
    const auto reply = c.uploadResult(lease('c'), file);
    QVERIFY2(reply.ok(), qPrintable(reply.error()));
    QCOMPARE(reply->outcome, UploadOutcome::Closed);
    QVERIFY(reply->message.contains(u"duplicate"));
    QCOMPARE(m_transport.requests().size(), 3);
}

void TestCoordinatorClient::progressOfAGoneLeaseAborts()
{
    m_transport.push(FakeTransport::answer(409, R"({"error": "lease X is closed: its result was already received"})"));
    m_transport.push(FakeTransport::answer(200, R"({"abort": true, "reason": "job 1 is cancelled"})"));
    auto c = client();
    const auto gone = c.progress(lease('d'), ProgressReport{});
    QVERIFY2(gone.ok(), qPrintable(gone.error()));
    QVERIFY(gone->abort && gone->leaseGone);
    QVERIFY(gone->reason.contains(u"closed"));
    const auto cancelled = c.progress(lease('d'), ProgressReport{1, 2, std::nan(""), 3});
    QVERIFY(cancelled.ok());
    QVERIFY(cancelled->abort && !cancelled->leaseGone);
    QCOMPARE(cancelled->reason, QStringLiteral("job 1 is cancelled"));
    // JSON has no NaN: a diverged loss is left out, the report still goes.
    QVERIFY(!QJsonDocument::fromJson(m_transport.requests().last().body).object().contains(QStringLiteral("loss")));
}

void TestCoordinatorClient::failureReportOutcomes_data()
{
    QTest::addColumn<int>("status");
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<int>("released"); // -1: an error
    QTest::addColumn<QString>("message");
    QTest::newRow("200 released") << 200 << QByteArray(R"({"released": true})") << 1 << QString();
    QTest::newRow("404 unknown lease")
        << 404 << QByteArray(R"({"error": "lease L is not known"})") << 0 << QString();
    QTest::newRow("409 closed") << 409
                                << QByteArray(
                                       R"({"error": "lease L is closed: the agent reported it failed"})")
                                << 0 << QString();
    QTest::newRow("400 refused") << 400 << QByteArray(R"({"error": "stage: expected one of ..."})") << -1
                                 << QStringLiteral("stage: expected");
    QTest::newRow("401 token") << 401 << QByteArray(R"({"error": "not valid"})") << -1
                               << QStringLiteral("enroll the agent again");
    QTest::newRow("403 revoked") << 403 << QByteArray(R"({"error": "revoked"})") << -1
                                 << QStringLiteral("revoked");
    QTest::newRow("200 not JSON") << 200 << QByteArray("<html>portal</html>") << -1
                                  << QStringLiteral("not JSON");
    QTest::newRow("200 without the field")
        << 200 << QByteArray(R"({"ok": true})") << -1 << QStringLiteral("\"released\"");
}

void TestCoordinatorClient::failureReportOutcomes()
{
    QFETCH(int, status);
    QFETCH(QByteArray, body);
    QFETCH(int, released);
    QFETCH(QString, message);
    m_transport.push(FakeTransport::answer(status, body));
    auto c = client();
    const auto reply =
        c.reportFailure(lease('c'), QStringLiteral("worker"), QStringLiteral("out of memory"));
    QCOMPARE(m_transport.requests().size(), 1);
    if (released < 0) {
        QVERIFY(!reply.ok());
        QVERIFY2(reply.error().contains(message) && reply.error().contains(kBase), qPrintable(reply.error()));
        QVERIFY2(reply.error().contains(QStringLiteral("lease ") + lease('c').toString()), qPrintable(reply.error()));
        return;
    }
    QVERIFY2(reply.ok(), qPrintable(reply.error()));
    QCOMPARE(*reply, released == 1);
}

void TestCoordinatorClient::failureReportIsRetriedLikeProgress()
{
    m_transport.push(FakeTransport::failure(Failure::Connect, QStringLiteral("Connection refused")));
    m_transport.push(FakeTransport::answer(503, R"({"error": "busy", "retry_after": 7})"));
    m_transport.push(FakeTransport::answer(200, R"({"released": true})"));
    auto c = client();
    const auto reply = c.reportFailure(lease('7'), QStringLiteral("download"),
                                       QStringLiteral("  shard 1: SHA-256 mismatch\n"));
    QVERIFY2(reply.ok(), qPrintable(reply.error()));
    QVERIFY(*reply);
    QCOMPARE(m_waits, (QList<qint64>{500, 7000}));
    QCOMPARE(m_transport.requests().size(), 3);
    const TransportRequest& sent = m_transport.requests().last();
    QCOMPARE(sent.method, QByteArray("POST"));
    QCOMPARE(sent.url, kBase + QStringLiteral("/api/v1/work/%1/fail").arg(lease('7').toString()));
    QVERIFY(sent.headers.contains({"Authorization", "Bearer gag_test"}));
    QVERIFY(sent.headers.contains({"Content-Type", "application/json"}));
    QCOMPARE(QJsonDocument::fromJson(sent.body).object(),
             (QJsonObject{{QStringLiteral("stage"), QStringLiteral("download")},
                          {QStringLiteral("reason"), QStringLiteral("shard 1: SHA-256 mismatch")}}));

    // The first report got through but its answer was lost: the repeat meets 409, nothing left to release.
    m_transport.push(
        FakeTransport::failure(Failure::Network, QStringLiteral("Recv failure: Connection reset by peer")));
    m_transport.push(
        FakeTransport::answer(409, R"({"error": "lease lease7 is closed: the agent reported it failed"})"));
    const auto repeat =
        c.reportFailure(lease('7'), QStringLiteral("download"), QStringLiteral("again"));
    QVERIFY2(repeat.ok(), qPrintable(repeat.error()));
    QVERIFY(!*repeat);

    m_transport.setFallback(
        FakeTransport::failure(Failure::Connect, QStringLiteral("Couldn't connect to server")));
    const auto unreachable =
        c.reportFailure(lease('7'), QStringLiteral("other"), QStringLiteral("x"));
    QVERIFY(!unreachable.ok());
    QVERIFY2(unreachable.error().contains(u"cannot reach the coordinator"), qPrintable(unreachable.error()));
}

void TestCoordinatorClient::failureReportIsCheckedBeforeItIsSent()
{
    auto c = client();
    const auto badStage =
        c.reportFailure(lease('c'), QStringLiteral("training"), QStringLiteral("oom"));
    QVERIFY(!badStage.ok());
    QVERIFY2(badStage.error().contains(u"\"training\"") &&
                 badStage.error().contains(u"verify, download, worker"),
             qPrintable(badStage.error()));
    const auto blank = c.reportFailure(lease('c'), QStringLiteral("worker"), QStringLiteral(" \n "));
    QVERIFY(!blank.ok());
    QVERIFY2(blank.error().contains(u"reason"), qPrintable(blank.error()));
    QCOMPARE(m_transport.requests().size(), 0);

    // A worker's whole error output is longer than the coordinator takes: it is cut, not refused, and never
    // in the middle of a character.
    m_transport.push(FakeTransport::answer(200, R"({"released": true})"));
    const QString longReason = QString(1999, u'x') + QStringLiteral("\U0001F525") + QString(3000, u'y');
    QVERIFY(c.reportFailure(lease('c'), QStringLiteral("worker"), longReason).ok());
    const QString sent = QJsonDocument::fromJson(m_transport.requests().last().body)
                             .object()
                             .value(QStringLiteral("reason"))
                             .toString();
    QCOMPARE(sent, QString(1999, u'x'));
    QCOMPARE(CoordinatorMessages::failureStages().size(), 5);
}

void TestCoordinatorClient::leaseKeepsTheExactManifestBytes()
{
    // Escapes, a slash and non-ASCII text: the signed bytes are the string's UTF-8, not a re-serialisation.
    const QString manifest = QStringLiteral(R"({"job":{"name":"fashion \"ü\" /x"},"lease_id":"L1"})");
    QJsonObject task{{QStringLiteral("lease_id"), lease('e').toString()},
                     {QStringLiteral("deadline_ms"), 1795295711026.0},
                     {QStringLiteral("manifest"), manifest},
                     {QStringLiteral("signature"), QStringLiteral("c2ln")}};
    QJsonObject broken{{QStringLiteral("lease_id"), 5}};
    const QJsonObject reply{{QStringLiteral("tasks"), QJsonArray{task, broken}}};
    m_transport.push(FakeTransport::answer(200, QJsonDocument(reply).toJson(QJsonDocument::Indented)));
    auto c = client();
    const auto leased = c.lease({}, 2);
    QVERIFY2(leased.ok(), qPrintable(leased.error()));
    QCOMPARE(leased->tasks.size(), 1); // the malformed task is dropped, the good one kept
    QCOMPARE(leased->refused.size(), 1);
    QCOMPARE(leased->tasks.first().leaseId.toString(), lease('e').toString());
    QCOMPARE(leased->tasks.first().manifest, manifest.toUtf8());
    QCOMPARE(leased->tasks.first().deadlineMs, 1795295711026);
    QCOMPARE(leased->tasks.first().signature, QStringLiteral("c2ln"));

    m_transport.push(FakeTransport::answer(200, "<html>captive portal</html>"));
    const auto portal = c.lease({}, 1);
    QVERIFY(!portal.ok());
    QVERIFY2(portal.error().contains(u"not JSON") && portal.error().contains(kBase), qPrintable(portal.error()));
}

void TestCoordinatorClient::leaseRefusesIdsThatAreNotLeaseIds_data()
{
    // Each would become a folder name under DATA_DIR/tasks/ and a URL path: only 32 lowercase hex digits pass.
    QTest::addColumn<QString>("id");
    QTest::newRow("parent folders") << QStringLiteral("../../victim");
    QTest::newRow("absolute path") << QStringLiteral("/home/someone/.ssh");
    QTest::newRow("31 hex digits") << QString(31, u'a');
    QTest::newRow("33 hex digits") << QString(33, u'a');
    QTest::newRow("upper case") << QString(32, u'A');
    QTest::newRow("dots and hex") << QStringLiteral("..") + QString(30, u'a');
    QTest::newRow("slash in hex") << QString(15, u'a') + u'/' + QString(16, u'a');
    QTest::newRow("query") << QString(28, u'a') + QStringLiteral("?x=1");
    QTest::newRow("empty") << QString();
}

void TestCoordinatorClient::leaseRefusesIdsThatAreNotLeaseIds()
{
    QFETCH(QString, id);
    const auto task = [](const QString& leaseId) {
        return QJsonObject{{QStringLiteral("lease_id"), leaseId},
                           {QStringLiteral("deadline_ms"), 1795295711026.0},
                           {QStringLiteral("manifest"), QStringLiteral("{}")},
                           {QStringLiteral("signature"), QStringLiteral("c2ln")}};
    };
    const QJsonObject reply{{QStringLiteral("tasks"), QJsonArray{task(id), task(lease('f').toString())}}};
    m_transport.push(FakeTransport::answer(200, QJsonDocument(reply).toJson()));
    auto c = client();
    const auto leased = c.lease({}, 2);
    QVERIFY2(leased.ok(), qPrintable(leased.error()));
    QCOMPARE(leased->tasks.size(), 1); // the well-formed task of the same reply is kept
    QCOMPARE(leased->tasks.first().leaseId.toString(), lease('f').toString());
    QCOMPARE(leased->refused.size(), 1);
    QVERIFY2(leased->refused.first().contains(u"not a lease id"), qPrintable(leased->refused.first()));
}

QTEST_GUILESS_MAIN(TestCoordinatorClient)
#include "TestCoordinatorClient.moc"
