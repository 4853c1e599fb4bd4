// The real agent daemon against a hostile coordinator: a TLS server on a loopback port whose certificate the
// agent pins (as a man in the middle of an agent enrolled without --ca would hold a trusted one), answering
// lease requests with ids that are paths, files that never end, and old or repeated manifests. The manifests
// are signed with the key the agent pinned, so the signature check passes and each later check is what must
// refuse them. After each the agent has touched nothing outside its data folder (a sentinel folder beside it
// survives) and still asks for work.
#include "TestSupport.h"

#include "config/AgentConfig.h"
#include "config/PinnedKeys.h"
#include "crypto/KeyRotation.h"
#include "crypto/Ed25519.h"
#include "crypto/Sha256.h"
#include "crypto/SignedEnvelope.h"
#include "crypto/TlsCertificate.h"
#include "daemon/AgentDaemon.h"
#include "http/HttpServer.h"

#include <QDateTime>
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QMutex>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QTest>
#include <QUuid>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

const QString kAgentId = QStringLiteral("5d5b2290c70b5e9b263be48386cb5c43");
constexpr qint64 kFileSize = 100; // each file of the manifests, as signed
constexpr qint64 kStreamCap =
    64LL * 1024 * 1024; // an "endless" answer ends here, so a broken agent fills no disk

QString freshLeaseId()
{
    return QUuid::createUuid().toString(QUuid::Id128);
}

qint64 nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

// A file body that goes on (up to kStreamCap) whatever size the manifest gave: chunked, no Content-Length.
class EndlessFile final : public coordinator::ResponseStream
{
public:
    explicit EndlessFile(std::atomic<qint64>* streamed) : m_streamed(streamed) {}
    void start(std::function<void()>) override {}
    Chunk next() override
    {
        if (m_sent >= kStreamCap)
            return {QByteArray(), true};
        const QByteArray chunk(64 * 1024, 'x');
        m_sent += chunk.size();
        *m_streamed += chunk.size();
        return {chunk, false};
    }
    void finish() override {}

private:
    std::atomic<qint64>* m_streamed;
    qint64 m_sent = 0;
};

// Answers lease requests from a queue (then "no work, ask again in 1 s"), files as the test says, failure
// reports and progress with what a coordinator would; records every request.
class HostileCoordinator final : public coordinator::RequestHandler
{
public:
    enum class Files
    {
        Missing,     // 404: the agent gives the subtask back at once
        Unavailable, // 503: the agent keeps trying while the lease lasts
        Endless
    };

    void reset(Files files)
    {
        const QMutexLocker lock(&m_mutex);
        m_files = files;
        m_leases.clear();
        m_paths.clear();
        m_failures.clear();
        m_signingKeys = {};
        m_leaseRequests = 0;
        m_fileRequests = 0;
        m_streamed = 0;
    }
    // `signingKey`: the fingerprint the reply names as the key in force (none when empty).
    void queueLease(const QJsonArray& tasks, const QString& signingKey = {})
    {
        const QMutexLocker lock(&m_mutex);
        QJsonObject reply{{QStringLiteral("tasks"), tasks}};
        if (!signingKey.isEmpty())
            reply.insert(QStringLiteral("signing_key"), signingKey);
        m_leases.push_back(QJsonDocument(reply).toJson());
    }
    // A lease reply as it is, for replies without tasks (a quarantine, say).
    void queueReply(const QJsonObject& reply)
    {
        const QMutexLocker lock(&m_mutex);
        m_leases.push_back(QJsonDocument(reply).toJson());
    }
    // The answer to GET /api/v1/signing-keys.
    void setSigningKeys(const QJsonObject& keys)
    {
        const QMutexLocker lock(&m_mutex);
        m_signingKeys = keys;
    }
    int leaseRequests() const { return m_leaseRequests; }
    int fileRequests() const { return m_fileRequests; }
    qint64 streamed() const { return m_streamed; }
    QStringList paths() const
    {
        const QMutexLocker lock(&m_mutex);
        return m_paths;
    }
    // The failure reports for `leaseId`: their bodies.
    QList<QJsonObject> failures(const QString& leaseId) const
    {
        const QMutexLocker lock(&m_mutex);
        return m_failures.values(leaseId);
    }

    std::variant<coordinator::BodyPolicy, coordinator::HttpResponse>
    admit(const coordinator::RequestHead&) override
    {
        return coordinator::BodyPolicy{1 << 20, false};
    }

    void handle(coordinator::HttpRequest request, coordinator::Responder respond) override
    {
        const QString path = QString::fromUtf8(request.head.path());
        QMutexLocker lock(&m_mutex);
        m_paths.append(path);
        if (path == u"/api/v1/work/lease") {
            ++m_leaseRequests;
            QByteArray body = R"({"retry_after": 1, "tasks": []})";
            if (!m_leases.empty()) {
                body = m_leases.front();
                m_leases.pop_front();
            }
            coordinator::HttpResponse r;
            r.body = body;
            lock.unlock();
            return respond(r);
        }
        if (path == u"/api/v1/signing-keys") {
            const QJsonObject keys = m_signingKeys;
            lock.unlock();
            return respond(coordinator::HttpResponse::json(200, keys));
        }
        if (path.startsWith(u"/api/v1/files/")) {
            ++m_fileRequests;
            if (m_files == Files::Missing) {
                lock.unlock();
                return respond(coordinator::HttpResponse::error(404, QStringLiteral("no such file")));
            }
            if (m_files == Files::Unavailable) {
                lock.unlock();
                return respond(coordinator::HttpResponse::error(503, QStringLiteral("try again later")));
            }
            coordinator::HttpResponse r;
            r.contentType = "application/octet-stream";
            r.stream = std::make_shared<EndlessFile>(&m_streamed);
            lock.unlock();
            return respond(r);
        }
        const QStringList parts = path.split(u'/');
        if (parts.size() == 6 && parts[4].size() > 0 && parts[5] == u"fail") {
            m_failures.insert(parts[4], QJsonDocument::fromJson(request.body).object());
            lock.unlock();
            return respond(coordinator::HttpResponse::json(200, {{QStringLiteral("released"), true}}));
        }
        if (parts.size() == 6 && parts[5] == u"progress") {
            lock.unlock();
            return respond(coordinator::HttpResponse::json(
                200, {{QStringLiteral("abort"), false}, {QStringLiteral("deadline_ms"), nowMs() + 600'000}}));
        }
        lock.unlock();
        respond(coordinator::HttpResponse::error(404, QStringLiteral("no such endpoint")));
    }

private:
    mutable QMutex m_mutex;
    Files m_files = Files::Missing;
    std::deque<QByteArray> m_leases;
    QJsonObject m_signingKeys;
    QStringList m_paths;
    QMultiMap<QString, QJsonObject> m_failures;
    std::atomic<int> m_leaseRequests{0};
    std::atomic<int> m_fileRequests{0};
    std::atomic<qint64> m_streamed{0};
};

// The rows of the agent's subtask store, read after the daemon is gone: lease id -> state.
QMap<QString, QString> storedSubtasks(const QString& dataDir)
{
    QMap<QString, QString> rows;
    const QString connection = QStringLiteral("inspect-") + freshLeaseId();
    {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), connection);
        db.setDatabaseName(dataDir + QStringLiteral("/subtasks.db"));
        if (db.open()) {
            QSqlQuery q(db);
            if (q.exec(QStringLiteral("SELECT lease_id, state FROM subtasks")))
                while (q.next())
                    rows.insert(q.value(0).toString(), q.value(1).toString());
        }
    }
    QSqlDatabase::removeDatabase(connection);
    return rows;
}

// Every file under `dir`, relative to it.
QStringList filesUnder(const QString& dir)
{
    QStringList files;
    QDirIterator it(dir, QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
    while (it.hasNext())
        files << QDir(dir).relativeFilePath(it.next());
    return files;
}

} // namespace

class TestHostileCoordinator : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void init();
    void cleanup();
    void cleanupTestCase();
    void leaseIdsThatAreNotLeaseIdsTouchNothing_data();
    void leaseIdsThatAreNotLeaseIdsTouchNothing();
    void downloadLongerThanSignedIsCutOff();
    void fileTheCoordinatorDoesNotServeGivesTheSubtaskBack();
    void expiredManifestIsRefused();
    void leaseSentAgainIsNotRunAgain();
    void signingKeyRotationIsFollowed();
    void forgedRotationIsRefused();
    void subtaskLeasedBeforeARotationGoesOn();
    void quarantineIsShownUntilLifted();
    void workHeldBackIsLoggedOnce();
    void heldBackReasonIsOneLogLine();
    void batchAgentWaitsOutAHold();

private:
    QString url() const { return QStringLiteral("https://127.0.0.1:%1").arg(m_server->port()); }
    // A signed task of a lease reply. `agentId` other than this agent's makes the manifest one the agent
    // refuses at once (it is for another agent); `signer` null signs with the pinned key.
    QJsonObject task(const QString& leaseId, qint64 issuedMs, qint64 deadlineMs,
                     const QString& agentId = kAgentId, const SigningKey* signer = nullptr) const;
    QJsonObject freshTask(const QString& leaseId) const { return task(leaseId, nowMs(), nowMs() + 600'000); }
    // `enroll` false starts the daemon again on the data folder as the last run left it.
    void startDaemon(int maxTasks = 1, bool enroll = true,
                     const std::function<void(DaemonOptions&)>& adjust = {});
    void writeEnrollment(); // as `gleaner-agent enroll` leaves the data folder, pinning m_key
    // Waits for `count` more lease requests than were made so far: the agent took the reply and keeps going.
    bool waitForLeases(int count, int timeoutMs);
    void stopDaemon();
    bool logSays(const QString& words) const;
    // Nothing beside the data folder changed, and the data folder holds no task folder.
    void checkNothingOutsideTouched();

    std::unique_ptr<QTemporaryDir> m_dir;
    HostileCoordinator m_handler;
    std::unique_ptr<coordinator::HttpServer> m_server;
    QString m_certificate;
    std::optional<SigningKey> m_key;
    std::optional<SigningKey> m_otherKey;

    std::unique_ptr<QTemporaryDir> m_run; // per test: data/ and the sentinel victim/ beside it
    QString m_dataDir;
    QString m_victim;
    std::unique_ptr<AgentDaemon> m_daemon;
    QStringList m_log;
};

void TestHostileCoordinator::initTestCase()
{
    m_dir = test::scratchDir();
    const auto identity =
        TlsCertificate::generateSelfSigned({QStringLiteral("127.0.0.1"), QStringLiteral("localhost")});
    QVERIFY(identity.ok());
    m_certificate = m_dir->filePath(QStringLiteral("cert.pem"));
    const QString keyPath = m_dir->filePath(QStringLiteral("key.pem"));
    QVERIFY(TlsCertificate::save(*identity, m_certificate, keyPath).ok());
    coordinator::HttpServerOptions options;
    options.certificatePath = m_certificate;
    options.privateKeyPath = keyPath;
    options.uploadDir = m_dir->path();
    m_server = std::make_unique<coordinator::HttpServer>(options, m_handler);
    const Status started = m_server->start();
    QVERIFY2(started.ok(), qPrintable(started.error()));
    auto key = SigningKey::generate();
    auto other = SigningKey::generate();
    QVERIFY(key && other);
    m_key.emplace(std::move(*key));
    m_otherKey.emplace(std::move(*other));
}

void TestHostileCoordinator::init()
{
    m_handler.reset(HostileCoordinator::Files::Missing);
    m_run = test::scratchDir();
    m_dataDir = m_run->filePath(QStringLiteral("data"));
    m_victim = m_run->filePath(QStringLiteral("victim"));
    m_log.clear();
    QVERIFY(QDir().mkpath(m_dataDir));
    QVERIFY(QDir().mkpath(m_victim + QStringLiteral("/inner")));
    QVERIFY(test::writeFile(m_victim + QStringLiteral("/inner/keep.txt"), "the owner's file"));
}

void TestHostileCoordinator::cleanup()
{
    stopDaemon();
}

void TestHostileCoordinator::cleanupTestCase()
{
    if (m_server)
        m_server->stop();
}

QJsonObject TestHostileCoordinator::task(const QString& leaseId, qint64 issuedMs, qint64 deadlineMs,
                                         const QString& agentId, const SigningKey* signer) const
{
    QJsonArray files;
    for (const char* role : {"model", "weights", "shard"})
        files.append(QJsonObject{{QStringLiteral("role"), QString::fromLatin1(role)},
                                 {QStringLiteral("sha256"), Sha256::toHex(Sha256::hash(QByteArray(role)))},
                                 {QStringLiteral("size"), kFileSize}});
    const QJsonObject manifest{
        {QStringLiteral("format"), QStringLiteral("gleaner-manifest/1")},
        {QStringLiteral("agent_id"), agentId},
        {QStringLiteral("lease_id"), leaseId},
        {QStringLiteral("coordinator"), url()},
        {QStringLiteral("nonce"), freshLeaseId()},
        {QStringLiteral("base_version"), 0},
        {QStringLiteral("issued_ms"), issuedMs},
        {QStringLiteral("deadline_ms"), deadlineMs},
        {QStringLiteral("job"),
         QJsonObject{{QStringLiteral("id"), 1}, {QStringLiteral("name"), QStringLiteral("j")}}},
        {QStringLiteral("subtask"), QJsonObject{{QStringLiteral("workunit_id"), 1},
                                                {QStringLiteral("epoch"), 1},
                                                {QStringLiteral("shard"), 0},
                                                {QStringLiteral("samples"), 10}}},
        {QStringLiteral("files"), files},
        {QStringLiteral("model"), QJsonObject{{QStringLiteral("arch"), QStringLiteral("mlp")}}},
    };
    const SignedEnvelope envelope = SignedEnvelope::sign(
        signer ? *signer : *m_key, QJsonDocument(manifest).toJson(QJsonDocument::Compact));
    return QJsonObject{{QStringLiteral("lease_id"), leaseId},
                       {QStringLiteral("deadline_ms"), deadlineMs},
                       {QStringLiteral("manifest"), QString::fromUtf8(envelope.manifest)},
                       {QStringLiteral("signature"), QString::fromLatin1(envelope.signature)}};
}

void TestHostileCoordinator::startDaemon(int maxTasks, bool enroll,
                                         const std::function<void(DaemonOptions&)>& adjust)
{
    if (enroll)
        writeEnrollment();
    DaemonOptions options;
    options.dataDir = m_dataDir;
    options.dedicated = true;
    options.maxTasks = maxTasks;
    options.threads = 1;
    options.workerProgram = QStringLiteral("/bin/true"); // never started: nothing here may get that far
    options.maxBackoffMs = 100;
    options.policyFile = m_run->filePath(QStringLiteral("no-policy.json"));
    if (adjust)
        adjust(options);
    auto daemon = AgentDaemon::create(options);
    QVERIFY2(daemon.ok(), qPrintable(daemon.error()));
    m_daemon = std::move(*daemon);
    connect(m_daemon.get(), &AgentDaemon::controlEvent, this, [this](const QJsonObject& event) {
        if (event.value(QStringLiteral("event")).toString() == u"log")
            m_log.append(event.value(QStringLiteral("message")).toString());
    });
    m_daemon->start();
}

void TestHostileCoordinator::writeEnrollment()
{
    AgentConfig config;
    config.coordinatorUrl = url();
    config.agentId = kAgentId;
    config.name = QStringLiteral("target");
    config.enrolledMs = nowMs();
    QVERIFY(config.save(m_dataDir).ok());
    QVERIFY(test::writeFile(AgentConfig::tokenPath(m_dataDir), "gag_token"));
    QVERIFY(test::writeFile(AgentConfig::signingKeyPath(m_dataDir), m_key->publicKey().toPem()));
    QVERIFY(QFile::copy(m_certificate, AgentConfig::caPath(m_dataDir)));
}

bool TestHostileCoordinator::waitForLeases(int count, int timeoutMs)
{
    const int target = m_handler.leaseRequests() + count;
    QElapsedTimer timer;
    timer.start();
    while (m_handler.leaseRequests() < target && timer.elapsed() < timeoutMs)
        QTest::qWait(20);
    return m_handler.leaseRequests() >= target;
}

void TestHostileCoordinator::stopDaemon()
{
    m_daemon.reset();
}

bool TestHostileCoordinator::logSays(const QString& words) const
{
    for (const QString& line : m_log)
        if (line.contains(words))
            return true;
    return false;
}

void TestHostileCoordinator::checkNothingOutsideTouched()
{
    QCOMPARE(test::readFile(m_victim + QStringLiteral("/inner/keep.txt")), QByteArray("the owner's file"));
    QCOMPARE(QDir(m_run->path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot),
             (QStringList{QStringLiteral("data"), QStringLiteral("victim")}));
    QCOMPARE(QDir(m_dataDir + QStringLiteral("/tasks")).entryList(QDir::AllEntries | QDir::NoDotAndDotDot),
             QStringList());
    QCOMPARE(filesUnder(m_dataDir + QStringLiteral("/cache/partial")), QStringList());
}

void TestHostileCoordinator::leaseIdsThatAreNotLeaseIdsTouchNothing_data()
{
    QTest::addColumn<QString>("leaseId"); // "ABSOLUTE": the victim folder's absolute path
    QTest::addColumn<bool>("signedForThisAgent");
    // Signed for this agent, the id inside the manifest equal to the reply's: as a coordinator whose own key
    // signed the id would send it. Signed by another key: a man in the middle without the key.
    QTest::newRow("parent folders, signed") << QStringLiteral("../../victim") << true;
    QTest::newRow("parent folders, not signed") << QStringLiteral("../../victim") << false;
    QTest::newRow("absolute path, signed") << QStringLiteral("ABSOLUTE") << true;
    QTest::newRow("absolute path, not signed") << QStringLiteral("ABSOLUTE") << false;
    QTest::newRow("31 hex digits") << QString(31, u'a') << true;
    QTest::newRow("33 hex digits") << QString(33, u'a') << true;
    QTest::newRow("32 hex digits ending in a slash") << QString(31, u'a') + u'/' << true;
}

void TestHostileCoordinator::leaseIdsThatAreNotLeaseIdsTouchNothing()
{
    QFETCH(QString, leaseId);
    QFETCH(bool, signedForThisAgent);
    if (leaseId == u"ABSOLUTE")
        leaseId = m_victim;
    m_handler.queueLease(QJsonArray{signedForThisAgent
                                        ? freshTask(leaseId)
                                        : task(leaseId, nowMs(), nowMs() + 600'000, kAgentId, &*m_otherKey)});
    startDaemon();
    // The hostile reply, then more requests: the agent refused it and keeps asking for work.
    QVERIFY2(waitForLeases(3, 20'000), qPrintable(m_handler.paths().join(u' ')));
    QVERIFY2(logSays(QStringLiteral("is not a lease id")), qPrintable(m_log.join(u'\n')));
    QCOMPARE(m_handler.fileRequests(), 0);
    // Nothing was reported either: the id would have gone into the URL.
    for (const QString& path : m_handler.paths())
        QVERIFY2(path == u"/api/v1/work/lease", qPrintable(path));
    QVERIFY(m_daemon->status().value(QStringLiteral("subtasks")).toArray().isEmpty());
    stopDaemon();
    QCOMPARE(storedSubtasks(m_dataDir), (QMap<QString, QString>()));
    checkNothingOutsideTouched();
}

void TestHostileCoordinator::downloadLongerThanSignedIsCutOff()
{
    m_handler.reset(HostileCoordinator::Files::Endless);
    const QString lease = freshLeaseId();
    m_handler.queueLease(QJsonArray{freshTask(lease)});
    startDaemon();
    // Refused as soon as the body passes the signed size, reported at once (not tried again: the copy is
    // another file), and the agent goes on asking for work.
    QTRY_VERIFY_WITH_TIMEOUT(!m_handler.failures(lease).isEmpty(), 30'000);
    const QJsonObject report = m_handler.failures(lease).first();
    QCOMPARE(report.value(QStringLiteral("stage")).toString(), QStringLiteral("download"));
    QVERIFY2(
        report.value(QStringLiteral("reason")).toString().contains(u"more bytes than the signed manifest"),
        qPrintable(report.value(QStringLiteral("reason")).toString()));
    QCOMPARE(m_handler.fileRequests(), 1);
    // What the server pushed before the agent hung up is what the socket buffers hold, not the whole stream.
    qInfo("the server pushed %lld bytes before the agent hung up", m_handler.streamed());
    QVERIFY2(m_handler.streamed() < kStreamCap / 2, qPrintable(QString::number(m_handler.streamed())));
    QVERIFY(waitForLeases(2, 20'000));
    stopDaemon();
    QCOMPARE(storedSubtasks(m_dataDir).value(lease), QStringLiteral("failed"));
    checkNothingOutsideTouched();
}

void TestHostileCoordinator::fileTheCoordinatorDoesNotServeGivesTheSubtaskBack()
{
    // A 404 for a file of the lease is an answer, not an outage: the subtask is given back at once, so that the
    // workunit goes to another agent rather than waiting for the lease's deadline.
    m_handler.reset(HostileCoordinator::Files::Missing);
    const QString lease = freshLeaseId();
    m_handler.queueLease(QJsonArray{freshTask(lease)});
    startDaemon();
    QTRY_VERIFY_WITH_TIMEOUT(!m_handler.failures(lease).isEmpty(), 30'000);
    const QJsonObject report = m_handler.failures(lease).first();
    QCOMPARE(report.value(QStringLiteral("stage")).toString(), QStringLiteral("download"));
    QVERIFY2(report.value(QStringLiteral("reason")).toString().contains(u"has no such file"),
             qPrintable(report.value(QStringLiteral("reason")).toString()));
    QCOMPARE(m_handler.fileRequests(), 1);
    QVERIFY2(!logSays(QStringLiteral("Cannot reach the coordinator")), qPrintable(m_log.join(u'\n')));
    stopDaemon();
    QCOMPARE(storedSubtasks(m_dataDir).value(lease), QStringLiteral("failed"));
    checkNothingOutsideTouched();
}

void TestHostileCoordinator::expiredManifestIsRefused()
{
    // Signed, for this agent, but its lease ended two hours ago: an old manifest sent again.
    const QString lease = freshLeaseId();
    const qint64 issued = nowMs() - 2 * 3600 * 1000;
    m_handler.queueLease(QJsonArray{task(lease, issued, issued + 600'000)});
    startDaemon();
    QTRY_VERIFY_WITH_TIMEOUT(!m_handler.failures(lease).isEmpty(), 20'000);
    const QJsonObject report = m_handler.failures(lease).first();
    QCOMPARE(report.value(QStringLiteral("stage")).toString(), QStringLiteral("verify"));
    QVERIFY2(report.value(QStringLiteral("reason")).toString().contains(u"expired"),
             qPrintable(report.value(QStringLiteral("reason")).toString()));
    QVERIFY(waitForLeases(2, 20'000));
    QCOMPARE(m_handler.fileRequests(), 0); // nothing of it was fetched
    stopDaemon();
    QCOMPARE(storedSubtasks(m_dataDir).value(lease), QStringLiteral("failed"));
    checkNothingOutsideTouched();
}

void TestHostileCoordinator::leaseSentAgainIsNotRunAgain()
{
    // A lease the agent refused and reported (its manifest is another agent's), then the same lease id again
    // with a manifest this agent would take, and the first reply once more byte for byte: neither is run.
    const QString lease = freshLeaseId();
    const QJsonObject first =
        task(lease, nowMs(), nowMs() + 600'000, QStringLiteral("0123456789abcdef0123456789abcdef"));
    m_handler.queueLease(QJsonArray{first});
    startDaemon();
    QTRY_VERIFY_WITH_TIMEOUT(!m_handler.failures(lease).isEmpty(), 20'000);
    m_handler.queueLease(QJsonArray{freshTask(lease)});
    m_handler.queueLease(QJsonArray{first});
    QVERIFY(waitForLeases(4, 20'000));
    QCOMPARE(m_handler.failures(lease).size(), 1);
    QCOMPARE(m_handler.fileRequests(), 0);
    QVERIFY(m_daemon->status().value(QStringLiteral("subtasks")).toArray().isEmpty());
    stopDaemon();
    QCOMPARE(storedSubtasks(m_dataDir), (QMap<QString, QString>{{lease, QStringLiteral("failed")}}));
    checkNothingOutsideTouched();
}

void TestHostileCoordinator::signingKeyRotationIsFollowed()
{
    // The coordinator rotated twice (pinned -> k1 -> k2); its list gives the statements out of order.
    auto k1 = SigningKey::generate();
    auto k2 = SigningKey::generate();
    QVERIFY(k1 && k2);
    const QList<KeyRotation> chain{KeyRotation::announce(*k1, k2->publicKey(), nowMs()),
                                   KeyRotation::announce(*m_key, k1->publicKey(), nowMs())};
    const QString target = k2->publicKey().fingerprint();
    m_handler.setSigningKeys({{QStringLiteral("fingerprint"), target},
                              {QStringLiteral("key"), QString::fromLatin1(k2->publicKey().toPem())},
                              {QStringLiteral("rotations"), KeyRotation::toJson(chain)}});
    const QString lease = freshLeaseId();
    m_handler.reset(HostileCoordinator::Files::Unavailable);
    m_handler.setSigningKeys({{QStringLiteral("fingerprint"), target},
                              {QStringLiteral("key"), QString::fromLatin1(k2->publicKey().toPem())},
                              {QStringLiteral("rotations"), KeyRotation::toJson(chain)}});
    m_handler.queueLease(QJsonArray{task(lease, nowMs(), nowMs() + 600'000, kAgentId, &*k2)}, target);
    startDaemon();
    // The manifest signed with k2 verified: the subtask got as far as fetching its files (which are unavailable,
    // so the agent keeps trying while its lease lasts), and nothing was reported as failed.
    QTRY_VERIFY_WITH_TIMEOUT(m_handler.fileRequests() > 0, 20'000);
    QVERIFY(m_handler.failures(lease).isEmpty());
    QVERIFY2(logSays(QStringLiteral("rotated its signing key")), qPrintable(m_log.join(u'\n')));
    QCOMPARE(m_daemon->status()[QStringLiteral("coordinator")][QStringLiteral("signing_key")].toString(), target);
    stopDaemon();
    // Pinned on disk, and the keys passed kept for the manifests of subtasks leased before.
    QCOMPARE(test::readFile(AgentConfig::signingKeyPath(m_dataDir)), k2->publicKey().toPem());
    auto keys = PinnedKeys::load(m_dataDir);
    QVERIFY2(keys.ok(), qPrintable(keys.error()));
    QCOMPARE(keys->all().size(), 3);
    QVERIFY(keys->all()[1] == k1->publicKey());
    QVERIFY(keys->all()[2] == m_key->publicKey());
}

void TestHostileCoordinator::forgedRotationIsRefused()
{
    // A party between the agent and its coordinator, without the pinned key, announces a key of its own.
    auto mine = SigningKey::generate();
    QVERIFY(mine.ok());
    const QString target = mine->publicKey().fingerprint();
    m_handler.setSigningKeys(
        {{QStringLiteral("fingerprint"), target},
         {QStringLiteral("rotations"), KeyRotation::toJson({KeyRotation::announce(*m_otherKey, mine->publicKey(), nowMs())})}});
    const QString lease = freshLeaseId();
    m_handler.queueLease(QJsonArray{task(lease, nowMs(), nowMs() + 600'000, kAgentId, &*mine)}, target);
    startDaemon();
    QTRY_VERIFY_WITH_TIMEOUT(!m_handler.failures(lease).isEmpty(), 20'000);
    QCOMPARE(m_handler.failures(lease).first().value(QStringLiteral("stage")).toString(), QStringLiteral("verify"));
    QVERIFY2(logSays(QStringLiteral("cannot trust")), qPrintable(m_log.join(u'\n')));
    QVERIFY(waitForLeases(2, 20'000));
    QCOMPARE(m_handler.fileRequests(), 0);
    stopDaemon();
    QCOMPARE(test::readFile(AgentConfig::signingKeyPath(m_dataDir)), m_key->publicKey().toPem());
    QVERIFY(!QFile::exists(PinnedKeys::historyPath(m_dataDir)));
    checkNothingOutsideTouched();
}

void TestHostileCoordinator::subtaskLeasedBeforeARotationGoesOn()
{
    // Subtask A is leased under the pinned key; then the coordinator rotates and leases B under the new key.
    // A's stored manifest is checked again at every start: it must still verify, with the key it was signed by.
    auto next = SigningKey::generate();
    QVERIFY(next.ok());
    const QString target = next->publicKey().fingerprint();
    m_handler.reset(HostileCoordinator::Files::Unavailable); // the agent keeps asking for the files
    m_handler.setSigningKeys(
        {{QStringLiteral("fingerprint"), target},
         {QStringLiteral("rotations"), KeyRotation::toJson({KeyRotation::announce(*m_key, next->publicKey(), nowMs())})}});
    const QString a = freshLeaseId();
    const QString b = freshLeaseId();
    m_handler.queueLease(QJsonArray{freshTask(a)}, m_key->publicKey().fingerprint());
    m_handler.queueLease(QJsonArray{task(b, nowMs(), nowMs() + 600'000, kAgentId, &*next)}, target);
    startDaemon(2);
    QTRY_VERIFY_WITH_TIMEOUT(logSays(QStringLiteral("rotated its signing key")), 20'000);
    QTRY_COMPARE_WITH_TIMEOUT(m_daemon->status().value(QStringLiteral("subtasks")).toArray().size(), 2, 20'000);
    stopDaemon();
    QCOMPARE(storedSubtasks(m_dataDir).value(a), QStringLiteral("downloading"));

    // Started again, both subtasks go on: their files are asked for again, and neither is failed.
    const int before = m_handler.fileRequests();
    startDaemon(2, false);
    QTRY_VERIFY_WITH_TIMEOUT(m_handler.fileRequests() > before + 2, 20'000);
    QVERIFY2(m_handler.failures(a).isEmpty(), qPrintable(m_log.join(u'\n')));
    QVERIFY(m_handler.failures(b).isEmpty());
    QCOMPARE(m_daemon->status().value(QStringLiteral("subtasks")).toArray().size(), 2);
}

void TestHostileCoordinator::quarantineIsShownUntilLifted()
{
    // The coordinator's reason reaches the agent's status (and so its owner's tray and `gleaner-agent status`),
    // and goes once the coordinator hands out work again.
    const QString why = QStringLiteral("this agent is quarantined: 3 refused results in a row; the coordinator's "
                                       "admin can lift it (gleaner-coordinator agent release ID)");
    m_handler.queueReply({{QStringLiteral("tasks"), QJsonArray()},
                          {QStringLiteral("retry_after"), 1},
                          {QStringLiteral("quarantined"), why}});
    startDaemon();
    QTRY_COMPARE_WITH_TIMEOUT(m_daemon->status().value(QStringLiteral("reason_code")).toString(),
                              QStringLiteral("quarantined"), 20'000);
    const QJsonObject status = m_daemon->status();
    QVERIFY2(status.value(QStringLiteral("reason")).toString().contains(why),
             qPrintable(status.value(QStringLiteral("reason")).toString()));
    QCOMPARE(status[QStringLiteral("coordinator")][QStringLiteral("quarantined")].toString(), why);
    QVERIFY(logSays(QStringLiteral("gives this agent no work")));
    // The next reply (the default: no work, no quarantine) lifts it.
    QTRY_COMPARE_WITH_TIMEOUT(m_daemon->status().value(QStringLiteral("reason_code")).toString(),
                              QStringLiteral("no_work"), 20'000);
    QVERIFY(m_daemon->status()[QStringLiteral("coordinator")][QStringLiteral("quarantined")].isNull());
    QVERIFY(logSays(QStringLiteral("gives this agent work again")));
}

void TestHostileCoordinator::workHeldBackIsLoggedOnce()
{
    // A coordinator folding in what it received holds new work back for a moment: the agent logs why, once
    // (not at every ask), and asks again when told.
    const QString why =
        QStringLiteral("the coordinator is folding in the updates it received (1100.0 MiB wait, "
                       "above its fold_backlog_mb of 1024); ask again in a moment");
    for (int i = 0; i < 2; ++i)
        m_handler.queueReply({{QStringLiteral("tasks"), QJsonArray()},
                              {QStringLiteral("retry_after"), 1},
                              {QStringLiteral("held_back"), why}});
    startDaemon();
    // Both held back, then the default reply.
    QTRY_VERIFY_WITH_TIMEOUT(m_handler.leaseRequests() >= 3, 20'000);
    QCOMPARE(m_log.filter(QStringLiteral("holds new work back: ") + why).size(), 1);
}

void TestHostileCoordinator::heldBackReasonIsOneLogLine()
{
    // The reason is the coordinator's text: a newline or a terminal escape in it cannot forge a line of the
    // agent's log.
    m_handler.queueReply({{QStringLiteral("tasks"), QJsonArray()},
                          {QStringLiteral("retry_after"), 1},
                          {QStringLiteral("held_back"), QStringLiteral("folding\nerror: forged\x1b[2J")}});
    startDaemon();
    QTRY_VERIFY_WITH_TIMEOUT(logSays(QStringLiteral("holds new work back")), 20'000);
    const QStringList lines = m_log.filter(QStringLiteral("holds new work back"));
    QCOMPARE(lines.size(), 1);
    QCOMPARE(lines[0], QStringLiteral("the coordinator holds new work back: folding error: forged [2J"));
}

void TestHostileCoordinator::batchAgentWaitsOutAHold()
{
    // A batch agent (--until-empty) stops once the coordinator has had no work for it for --idle-exit. Held
    // back is not that: the job is not done, and three held-back answers a second apart outlast the 1 s.
    for (int i = 0; i < 3; ++i)
        m_handler.queueReply({{QStringLiteral("tasks"), QJsonArray()},
                              {QStringLiteral("retry_after"), 1},
                              {QStringLiteral("held_back"), QStringLiteral("folding")}});
    const auto stopped = std::make_shared<bool>(false); // outlives the test: the daemon stops in cleanup()
    startDaemon(1, true, [](DaemonOptions& options) {
        options.untilEmpty = true;
        options.idleExitSeconds = 1;
    });
    connect(m_daemon.get(), &AgentDaemon::stopped, this, [stopped] { *stopped = true; });
    QTRY_VERIFY_WITH_TIMEOUT(m_handler.leaseRequests() >= 3, 20'000);
    QVERIFY2(!*stopped, qPrintable(m_log.join(u'\n')));
    // Then no work (the default reply): it stops after its idle wait.
    QTRY_VERIFY_WITH_TIMEOUT(*stopped, 20'000);
    QVERIFY(logSays(QStringLiteral("no work for this agent")));
}

QTEST_GUILESS_MAIN(TestHostileCoordinator)
#include "TestHostileCoordinator.moc"
