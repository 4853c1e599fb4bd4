// The API's limits on what anyone who reaches the coordinator may ask of it, over real HTTPS with a ManualClock:
// the per-client enrollment rate (429 with Retry-After, decided before the state thread), and the terms of
// enrollment tokens (a bounded default life, lifetimes that cannot overflow the expiry time).
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "api/ApiHandler.h"
#include "enrollment/EnrollmentTokenTerms.h"
#include "http/HttpServer.h"
#include "http/HttpsClient.h"

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

#include <future>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

QJsonObject json(const ClientResponse& r)
{
    return QJsonDocument::fromJson(r.body).object();
}

QByteArray enrollBody(const QString& name)
{
    return QJsonDocument(QJsonObject{{QStringLiteral("name"), name}, {QStringLiteral("platform"), QStringLiteral("linux")}})
        .toJson(QJsonDocument::Compact);
}

} // namespace

class TestApiLimits : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void enrollmentFloodIsAnswered429();
    void refusedEnrollmentsNeverReachTheStateThread();
    void enrollmentRateIsPerClientAndConfigurable();
    void tokensLiveSevenDaysUnlessToldOtherwise_data();
    void tokensLiveSevenDaysUnlessToldOtherwise();
    void configKeysAreChecked_data();
    void configKeysAreChecked();

private:
    void startServer();
    ClientResponse send(const QByteArray& method, const QByteArray& target, const QByteArray& token,
                        const QByteArray& body = {});
    int enrolledAgents();

    test::CoordinatorFixture f;
    std::unique_ptr<ApiHandler> m_handler;
    std::unique_ptr<HttpServer> m_server;
    std::unique_ptr<HttpsClient> m_client;
};

void TestApiLimits::init()
{
    QVERIFY(f.setUp(/*openEnrollment=*/true));
    startServer();
}

void TestApiLimits::startServer()
{
    m_handler = std::make_unique<ApiHandler>(*f.core);
    HttpServerOptions options;
    options.certificatePath = f.dir.certificatePath();
    options.privateKeyPath = f.dir.tlsKeyPath();
    options.uploadDir = f.dir.uploadsDir();
    m_server = std::make_unique<HttpServer>(options, *m_handler);
    const Status started = m_server->start();
    QVERIFY2(started.ok(), qPrintable(started.error()));
    m_client = std::make_unique<HttpsClient>(QStringLiteral("127.0.0.1"), m_server->port(), f.dir.certificatePath());
}

void TestApiLimits::cleanup()
{
    m_client.reset();
    if (m_server)
        m_server->stop();
    m_server.reset();
    m_handler.reset();
    f.core.reset();
}

ClientResponse TestApiLimits::send(const QByteArray& method, const QByteArray& target, const QByteArray& token,
                                   const QByteArray& body)
{
    auto response =
        m_client->request(method, target, body, body.isEmpty() ? QByteArray() : QByteArray("application/json"), {}, token);
    if (!response) {
        qWarning() << response.error();
        return {};
    }
    return *response;
}

int TestApiLimits::enrolledAgents()
{
    return json(send("GET", "/api/v1/admin/agents", f.init.adminToken)).value(QStringLiteral("agents")).toArray().size();
}

void TestApiLimits::enrollmentFloodIsAnswered429()
{
    // The default: bursts of 10, then 10 a minute.
    int enrolled = 0;
    int refused = 0;
    ClientResponse last;
    for (int i = 0; i < 30; ++i) {
        last = send("POST", "/api/v1/agents/enroll", {}, enrollBody(QStringLiteral("box-%1").arg(i)));
        enrolled += last.status == 200 ? 1 : 0;
        refused += last.status == 429 ? 1 : 0;
    }
    qInfo("30 enrollments at once from 127.0.0.1: %d enrolled, %d answered 429", enrolled, refused);
    QCOMPARE(enrolled, 10);
    QCOMPARE(refused, 20);
    QCOMPARE(enrolledAgents(), 10);
    QCOMPARE(last.header("Retry-After"), QByteArray("6"));
    QCOMPARE(json(last).value(QStringLiteral("retry_after")).toInteger(), 6);
    const QString error = json(last).value(QStringLiteral("error")).toString();
    QVERIFY2(error.contains(QStringLiteral("too many enrollment requests from 127.0.0.1")), qPrintable(error));
    QVERIFY2(error.contains(QStringLiteral("10 a minute")), qPrintable(error));

    // Retry-After is honest: after it, one more enrollment goes through, and the next is refused again.
    f.clock.advance(6'000);
    QCOMPARE(send("POST", "/api/v1/agents/enroll", {}, enrollBody(QStringLiteral("patient"))).status, 200);
    QCOMPARE(send("POST", "/api/v1/agents/enroll", {}, enrollBody(QStringLiteral("eager"))).status, 429);
    QCOMPARE(enrolledAgents(), 11);
    // Other endpoints are not limited by it.
    QCOMPARE(send("GET", "/api/v1/info", {}).status, 200);
}

void TestApiLimits::refusedEnrollmentsNeverReachTheStateThread()
{
    for (int i = 0; i < 10; ++i)
        QCOMPARE(send("POST", "/api/v1/agents/enroll", {}, enrollBody(QStringLiteral("box"))).status, 200);
    // The state thread is held busy; refusals are decided on the HTTP thread, so they still come at once.
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    f.core->state().post([released] { released.wait(); });
    QElapsedTimer timer;
    timer.start();
    for (int i = 0; i < 50; ++i)
        QCOMPARE(send("POST", "/api/v1/agents/enroll", {}, enrollBody(QStringLiteral("flood"))).status, 429);
    const qint64 floodMs = timer.elapsed();
    release.set_value();
    qInfo("50 refused enrollments answered in %lld ms while the state thread was busy", floodMs);
    QVERIFY2(floodMs < 5'000, qPrintable(QString::number(floodMs)));
    QCOMPARE(enrolledAgents(), 10);
}

void TestApiLimits::enrollmentRateIsPerClientAndConfigurable()
{
    // A lower rate from config.json; the decision is per client (an IPv4 address or an IPv6 /64).
    cleanup();
    f.config.enrollBurst = 2;
    f.config.enrollPerMinute = 1;
    QVERIFY(f.reopen());
    startServer();
    const auto admitFrom = [this](const QString& key) {
        RequestHead head;
        head.method = "POST";
        head.target = "/api/v1/agents/enroll";
        head.remoteAddress = key;
        head.remoteKey = key;
        const auto decision = m_handler->admit(head);
        return std::holds_alternative<BodyPolicy>(decision) ? 0 : std::get<HttpResponse>(decision).status;
    };
    QCOMPARE(admitFrom(QStringLiteral("127.0.0.1")), 0);
    QCOMPARE(admitFrom(QStringLiteral("127.0.0.1")), 0);
    QCOMPARE(admitFrom(QStringLiteral("127.0.0.1")), 429);
    QCOMPARE(admitFrom(QStringLiteral("127.0.0.2")), 0); // another client is not held back
    QCOMPARE(admitFrom(QStringLiteral("2001:db8:1:2::/64")), 0);
    QCOMPARE(admitFrom(QStringLiteral("2001:db8:1:2::/64")), 0);
    QCOMPARE(admitFrom(QStringLiteral("2001:db8:1:2::/64")), 429);
    // Over the wire, 127.0.0.1 has used its burst above.
    const ClientResponse refused = send("POST", "/api/v1/agents/enroll", {}, enrollBody(QStringLiteral("box")));
    QCOMPARE(refused.status, 429);
    QCOMPARE(refused.header("Retry-After"), QByteArray("60"));
}

void TestApiLimits::tokensLiveSevenDaysUnlessToldOtherwise_data()
{
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<int>("status");
    QTest::addColumn<qint64>("lifetimeSeconds"); // -1: never expires
    QTest::addColumn<QString>("error");
    QTest::newRow("default") << QByteArray("{}") << 201 << qint64(7 * 86'400) << QString();
    QTest::newRow("empty body") << QByteArray() << 201 << qint64(7 * 86'400) << QString();
    QTest::newRow("an hour") << QByteArray(R"({"expires_seconds": 3600, "uses": 3})") << 201 << qint64(3600) << QString();
    QTest::newRow("never, explicitly") << QByteArray(R"({"expires_seconds": null})") << 201 << qint64(-1) << QString();
    QTest::newRow("ten years") << QByteArray(R"({"expires_seconds": 315360000})") << 201 << qint64(315'360'000)
                               << QString();
    // Seconds that overflow qint64 once turned into an expiry time in milliseconds.
    QTest::newRow("9999999999999 days") << QByteArray(R"({"expires_seconds": 863999999999913600})") << 422 << qint64(0)
                                        << QStringLiteral("863999999999913600");
    QTest::newRow("past ten years") << QByteArray(R"({"expires_seconds": 315360001})") << 422 << qint64(0)
                                    << QStringLiteral("expires_seconds");
    QTest::newRow("past qint64") << QByteArray(R"({"expires_seconds": 1e300})") << 422 << qint64(0)
                                 << QStringLiteral("1e+300");
    QTest::newRow("fraction") << QByteArray(R"({"expires_seconds": 1.5})") << 422 << qint64(0) << QStringLiteral("1.5");
    QTest::newRow("text") << QByteArray(R"({"expires_seconds": "7d"})") << 422 << qint64(0) << QStringLiteral("\"7d\"");
    QTest::newRow("too many uses") << QByteArray(R"({"uses": 1000001})") << 422 << qint64(0) << QStringLiteral("uses");
    QTest::newRow("zero uses") << QByteArray(R"({"uses": 0})") << 422 << qint64(0) << QStringLiteral("uses");
}

void TestApiLimits::tokensLiveSevenDaysUnlessToldOtherwise()
{
    QFETCH(QByteArray, body);
    QFETCH(int, status);
    QFETCH(qint64, lifetimeSeconds);
    QFETCH(QString, error);
    const ClientResponse created = send("POST", "/api/v1/admin/tokens", f.init.adminToken, body);
    QCOMPARE(created.status, status);
    if (status != 201) {
        const QString message = json(created).value(QStringLiteral("error")).toString();
        QVERIFY2(message.contains(error), qPrintable(message));
        QVERIFY(json(send("GET", "/api/v1/admin/tokens", f.init.adminToken)).value(QStringLiteral("tokens")).toArray().isEmpty());
        return;
    }
    const QJsonArray tokens = json(send("GET", "/api/v1/admin/tokens", f.init.adminToken)).value(QStringLiteral("tokens")).toArray();
    QCOMPARE(tokens.size(), 1);
    const QJsonObject token = tokens.first().toObject();
    if (lifetimeSeconds < 0)
        QVERIFY(token.value(QStringLiteral("expires_ms")).isNull());
    else
        QCOMPARE(token.value(QStringLiteral("expires_ms")).toInteger(), f.clock.nowMs() + lifetimeSeconds * 1000);
    QCOMPARE(token.value(QStringLiteral("state")).toString(), QStringLiteral("valid"));
}

void TestApiLimits::configKeysAreChecked_data()
{
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QString>("message");
    QTest::newRow("set") << QByteArray(R"({"listen": "h:1", "max_connections_per_address": 8, "enroll_per_minute": 2,
                                           "enroll_burst": 5})")
                         << QString();
    QTest::newRow("no connections") << QByteArray(R"({"listen": "h:1", "max_connections_per_address": 0})")
                                    << "config.max_connections_per_address";
    QTest::newRow("no enrollments") << QByteArray(R"({"listen": "h:1", "enroll_per_minute": 0})")
                                    << "config.enroll_per_minute";
    QTest::newRow("no burst") << QByteArray(R"({"listen": "h:1", "enroll_burst": -1})") << "config.enroll_burst";
}

void TestApiLimits::configKeysAreChecked()
{
    QFETCH(QByteArray, json);
    QFETCH(QString, message);
    auto config = CoordinatorConfig::fromJson(QJsonDocument::fromJson(json).object());
    if (message.isEmpty()) {
        QVERIFY2(config.ok(), qPrintable(config.error()));
        QCOMPARE(config->maxConnectionsPerAddress, 8);
        QCOMPARE(config->enrollPerMinute, 2);
        QCOMPARE(config->enrollBurst, 5);
        // Written back as read.
        auto again = CoordinatorConfig::fromJson(config->toJson());
        QVERIFY(again.ok());
        QCOMPARE(again->maxConnectionsPerAddress, 8);
        QCOMPARE(again->enrollBurst, 5);
        return;
    }
    QVERIFY(!config.ok());
    QVERIFY2(config.error().contains(message), qPrintable(config.error()));
}

QTEST_GUILESS_MAIN(TestApiLimits)
#include "TestApiLimits.moc"
