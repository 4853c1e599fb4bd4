// CoordinatorClient + CurlTransport against a real coordinator over HTTPS on an ephemeral loopback port, trusted by
// pinning the coordinator's own cert.pem: the agent's whole cycle as it runs in production.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "api/ApiHandler.h"
#include "crypto/Sha256.h"
#include "crypto/SignedEnvelope.h"
#include "crypto/TlsCertificate.h"
#include "format/SafeTensors.h"
#include "http/HttpServer.h"
#include "net/CoordinatorClient.h"
#include "net/CurlTransport.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

class TestCoordinatorClientHttps : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void agentCycle();
    void resumesAPartialDownload();
    void failureReportReleasesTheLease();
    void certificateOfAnotherCoordinatorIsRefused();

private:
    QString url() const { return QStringLiteral("https://127.0.0.1:%1").arg(m_server->port()); }
    std::unique_ptr<CoordinatorClient> makeClient(Transport& transport);
    // Enrolls, submits the tiny job and leases one task; returns its verified manifest.
    QJsonObject leaseOne(CoordinatorClient& client, std::optional<LeasedTask>* task);

    test::CoordinatorFixture f;
    std::unique_ptr<coordinator::ApiHandler> m_handler;
    std::unique_ptr<coordinator::HttpServer> m_server;
    QString m_dataset;
};

void TestCoordinatorClientHttps::init()
{
    QVERIFY(f.setUp(/*openEnrollment=*/true));
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
    m_handler = std::make_unique<coordinator::ApiHandler>(*f.core);
    coordinator::HttpServerOptions options;
    options.certificatePath = f.dir.certificatePath();
    options.privateKeyPath = f.dir.tlsKeyPath();
    options.uploadDir = f.dir.uploadsDir();
    m_server = std::make_unique<coordinator::HttpServer>(options, *m_handler);
    const Status started = m_server->start();
    QVERIFY2(started.ok(), qPrintable(started.error()));
}

void TestCoordinatorClientHttps::cleanup()
{
    if (m_server)
        m_server->stop();
    m_server.reset();
    m_handler.reset();
    f.core.reset();
}

std::unique_ptr<CoordinatorClient> TestCoordinatorClientHttps::makeClient(Transport& transport)
{
    RetryOptions options;
    options.maxAttempts = 2;
    options.baseDelayMs = 10;
    return std::make_unique<CoordinatorClient>(transport, url(), f.clock, RetryPolicy(options), RetryPolicy::threadSleeper());
}

QJsonObject TestCoordinatorClientHttps::leaseOne(CoordinatorClient& client, std::optional<LeasedTask>* task)
{
    const auto info = client.info();
    if (!info) {
        qWarning() << info.error();
        return {};
    }
    const auto enrolled = client.enroll(EnrollRequest{QStringLiteral("box"), QStringLiteral("linux-x86_64"),
                                                      QJsonObject{{QStringLiteral("cores"), 4}}, {}});
    if (!enrolled) {
        qWarning() << enrolled.error();
        return {};
    }
    if (enrolled->signingPublicKeyPem != info->signingPublicKeyPem)
        return {};
    client.setAgentToken(enrolled->agentToken);
    if (f.submit(test::tinyJobSpec(m_dataset, 2, 3, 0.99, 60, QStringLiteral(R"(, "overlap_epochs": false)"))) <= 0)
        return {};
    const auto leased = client.lease({}, 1);
    if (!leased || leased->tasks.size() != 1) {
        qWarning() << (leased ? QStringLiteral("no task") : leased.error());
        return {};
    }
    *task = leased->tasks.first();
    // The manifest bytes the client kept verify with the key it pinned at enrollment.
    const auto key = VerifyKey::fromPem(enrolled->signingPublicKeyPem);
    const auto envelope = SignedEnvelope::fromJson(QJsonObject{{QStringLiteral("manifest"), QString::fromUtf8((*task)->manifest)},
                                                               {QStringLiteral("signature"), (*task)->signature}});
    if (!key || !envelope)
        return {};
    auto manifest = SignedEnvelope::verify(*key, *envelope);
    if (!manifest) {
        qWarning() << manifest.error();
        return {};
    }
    return *manifest;
}

void TestCoordinatorClientHttps::agentCycle()
{
    CurlTransport transport(f.dir.certificatePath());
    auto client = makeClient(transport);
    std::optional<LeasedTask> task;
    const QJsonObject manifest = leaseOne(*client, &task);
    QVERIFY(!manifest.isEmpty());
    QCOMPARE(manifest.value(QStringLiteral("lease_id")).toString(), task->leaseId.toString());

    // Every file of the manifest lands in the cache folder with its size and hash.
    const auto scratch = test::scratchDir();
    QString weightsPath;
    for (const QJsonValue& value : manifest.value(QStringLiteral("files")).toArray()) {
        const QJsonObject file = value.toObject();
        const QString sha = file.value(QStringLiteral("sha256")).toString();
        const QString target = scratch->filePath(QStringLiteral("cache/") + sha);
        qint64 lastProgress = 0;
        const Status done = client->download(sha, target, file.value(QStringLiteral("size")).toInteger(),
                                             [&](const TransferProgress& p) {
                                                 lastProgress = p.downloaded;
                                                 return true;
                                             });
        QVERIFY2(done.ok(), qPrintable(done.error()));
        const auto hash = Sha256::hashFile(target);
        QVERIFY(hash.ok());
        QCOMPARE(Sha256::toHex(*hash), sha);
        QCOMPARE(lastProgress, file.value(QStringLiteral("size")).toInteger());
        if (file.value(QStringLiteral("role")).toString() == u"weights")
            weightsPath = target;
    }
    QVERIFY(!weightsPath.isEmpty());

    const auto progress = client->progress(task->leaseId, ProgressReport{1, 4, 1.2, 300});
    QVERIFY2(progress.ok(), qPrintable(progress.error()));
    QVERIFY(!progress->abort);
    QVERIFY(progress->deadlineMs >= task->deadlineMs);

    // The result: the base weights with the metadata the coordinator checks (protocol 10.2).
    auto weights = SafeTensors::load(weightsPath);
    QVERIFY2(weights.ok(), qPrintable(weights.error()));
    TensorBundle result = *weights;
    result.metadata().clear();
    result.setMetadata(QStringLiteral("gleaner.nonce"), manifest.value(QStringLiteral("nonce")).toString());
    result.setMetadata(QStringLiteral("gleaner.base_version"),
                       QString::number(manifest.value(QStringLiteral("base_version")).toInteger()));
    result.setMetadata(QStringLiteral("gleaner.samples"), QStringLiteral("64"));
    result.setMetadata(QStringLiteral("gleaner.loss"), QStringLiteral("0.25"));
    result.setMetadata(QStringLiteral("gleaner.train_seconds"), QStringLiteral("1.5"));
    const QString resultPath = scratch->filePath(QStringLiteral("result.safetensors"));
    QVERIFY(SafeTensors::save(resultPath, result).ok());

    const auto uploaded = client->uploadResult(task->leaseId, resultPath);
    QVERIFY2(uploaded.ok(), qPrintable(uploaded.error()));
    QCOMPARE(uploaded->outcome, UploadOutcome::Accepted);
    QVERIFY(uploaded->seq >= 1);
    // All of it over one kept-alive connection.
    QCOMPARE(transport.connectionsOpened(), 1);

    const auto again = client->uploadResult(task->leaseId, resultPath);
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(again->outcome, UploadOutcome::Closed);
    QVERIFY2(again->message.contains(u"duplicate"), qPrintable(again->message));

    const auto gone = client->progress(task->leaseId, ProgressReport{});
    QVERIFY(gone.ok());
    QVERIFY(gone->abort && gone->leaseGone);
}

void TestCoordinatorClientHttps::resumesAPartialDownload()
{
    CurlTransport transport(f.dir.certificatePath());
    auto client = makeClient(transport);
    std::optional<LeasedTask> task;
    const QJsonObject manifest = leaseOne(*client, &task);
    QVERIFY(!manifest.isEmpty());
    const QJsonObject weights = manifest.value(QStringLiteral("files")).toArray().at(1).toObject();
    const QString sha = weights.value(QStringLiteral("sha256")).toString();
    const qint64 size = weights.value(QStringLiteral("size")).toInteger();
    const auto scratch = test::scratchDir();
    const QString whole = scratch->filePath(QStringLiteral("whole"));
    QVERIFY(client->download(sha, whole, size).ok());

    // A partial file holding the first 40%: only the rest travels (Range, 206), and the file ends complete.
    QFile source(whole);
    QVERIFY(source.open(QIODevice::ReadOnly));
    const QByteArray bytes = source.readAll();
    const QString partial = scratch->filePath(QStringLiteral("partial"));
    QFile head(partial);
    QVERIFY(head.open(QIODevice::WriteOnly));
    head.write(bytes.left(size * 2 / 5));
    head.close();
    qint64 firstSeen = -1;
    qint64 lastSeen = -1;
    const Status done = client->download(sha, partial, size, [&](const TransferProgress& p) {
        if (firstSeen < 0)
            firstSeen = p.downloaded;
        lastSeen = p.downloaded;
        return true;
    });
    QVERIFY2(done.ok(), qPrintable(done.error()));
    QCOMPARE(firstSeen, size * 2 / 5); // progress continues from the bytes already held
    // Held + received = the file: had the whole file travelled again (200), this would overshoot.
    QCOMPARE(lastSeen, size);
    QFile resumed(partial);
    QVERIFY(resumed.open(QIODevice::ReadOnly));
    QCOMPARE(resumed.readAll(), bytes);

    // The wrong size is refused and leaves nothing behind.
    const QString wrong = scratch->filePath(QStringLiteral("wrong"));
    const Status refused = client->download(sha, wrong, size + 1);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(url()), qPrintable(refused.error()));
    QVERIFY(!QFile::exists(wrong));
}

void TestCoordinatorClientHttps::failureReportReleasesTheLease()
{
    CurlTransport transport(f.dir.certificatePath());
    auto client = makeClient(transport);
    std::optional<LeasedTask> task;
    const QJsonObject manifest = leaseOne(*client, &task);
    QVERIFY(!manifest.isEmpty());

    const auto released = client->reportFailure(task->leaseId, QStringLiteral("worker"),
                                                QStringLiteral("the worker crashed twice (signal 9)"));
    QVERIFY2(released.ok(), qPrintable(released.error()));
    QVERIFY(*released);
    const auto again = client->reportFailure(task->leaseId, QStringLiteral("worker"), QStringLiteral("again"));
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QVERIFY(!*again); // 409: nothing left to release
    const auto unknown =
        client->reportFailure(*LeaseId::parse(QString(32, u'0')), QStringLiteral("other"), QStringLiteral("x"));
    QVERIFY2(unknown.ok() && !*unknown, qPrintable(unknown.error())); // 404

    const auto gone = client->progress(task->leaseId, ProgressReport{});
    QVERIFY(gone.ok());
    QVERIFY(gone->abort && gone->leaseGone);
    QVERIFY2(gone->reason.contains(u"reported it failed"), qPrintable(gone->reason));

    // The workunit is handed out again at once (here to the same agent: the only one asking).
    const auto leased = client->lease({}, 2);
    QVERIFY2(leased.ok(), qPrintable(leased.error()));
    QCOMPARE(leased->tasks.size(), 2);
    bool reissued = false;
    for (const LeasedTask& t : leased->tasks)
        reissued =
            reissued || QJsonDocument::fromJson(t.manifest).object().value(QStringLiteral("subtask")) ==
                            manifest.value(QStringLiteral("subtask"));
    QVERIFY(reissued);
}

void TestCoordinatorClientHttps::certificateOfAnotherCoordinatorIsRefused()
{
    const auto other = TlsCertificate::generateSelfSigned({QStringLiteral("127.0.0.1"), QStringLiteral("localhost")});
    QVERIFY(other.ok());
    const auto scratch = test::scratchDir();
    const QString otherCert = scratch->filePath(QStringLiteral("other.pem"));
    QVERIFY(TlsCertificate::save(*other, otherCert, scratch->filePath(QStringLiteral("other.key"))).ok());
    CurlTransport transport(otherCert);
    auto client = makeClient(transport);
    const auto info = client->info();
    QVERIFY(!info.ok());
    QVERIFY2(info.error().contains(u"not trusted") && info.error().contains(url()) && info.error().contains(u"--ca"),
             qPrintable(info.error()));
}

QTEST_GUILESS_MAIN(TestCoordinatorClientHttps)
#include "TestCoordinatorClientHttps.moc"
