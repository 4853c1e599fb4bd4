// The admin API as the dashboard uses it, over real HTTPS: every admin endpoint answers to the admin token
// and to a session cookie (with its CSRF header when it changes something), and refuses a request without
// credentials (401), a cross-site one (403), one from an expired or logged-out session (401) and a cookie
// request that changes state without the CSRF header (403) -- and a refused request changes nothing. Also:
// logging in and out, the cookie's attributes, the page's files, and the views the page needs (job history,
// agents).
#include "DashboardFixture.h"
#include "TestSupport.h"

#include <QJsonArray>
#include <QProcess>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

enum class Mode
{
    Token,
    Session
};

} // namespace

class TestDashboardApi : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void cleanup() { d.stop(); }
    void everyAdminEndpoint_data();
    void everyAdminEndpoint();
    void loginRefusals();
    void loginCookieAndCsrf();
    void sessionExpiresWhenIdleAndAtItsLifetime();
    void logoutEndsTheSession();
    void getNeverChangesState();
    void eventsNeedASession();
    void pageAndAssets();
    void jobHistoryForTheCharts();
    void agentsWithWhatTheyHold();

private:
    // A fresh coordinator with one agent (and its enrollment token 1) and one running job (1).
    void prepare(QString* agentId);
    QByteArray jobState(qint64 id);
    // Who is revoked, which changes only by a request that was let through.
    QByteArray agentsRevoked();

    test::DashboardFixture d;
};

void TestDashboardApi::prepare(QString* agentId)
{
    d.stop();
    QVERIFY(d.start());
    QVERIFY(!d.enrollAgent(agentId).isEmpty());
    QCOMPARE(d.submitTinyJob(2, 3), 1);
}

QByteArray TestDashboardApi::jobState(qint64 id)
{
    return d.json(d.send("GET", "/api/v1/admin/jobs/" + QByteArray::number(id), d.f.init.adminToken))
        .value(QStringLiteral("state"))
        .toString()
        .toLatin1();
}

QByteArray TestDashboardApi::agentsRevoked()
{
    QByteArray out;
    for (const QJsonValue& agent : d.json(d.send("GET", "/api/v1/admin/agents", d.f.init.adminToken))
                                       .value(QStringLiteral("agents"))
                                       .toArray())
        out += agent[QStringLiteral("id")].toString().toLatin1() +
               (agent[QStringLiteral("revoked")].toBool() ? " revoked\n" : "\n");
    return out;
}

void TestDashboardApi::everyAdminEndpoint_data()
{
    QTest::addColumn<QByteArray>("method");
    QTest::addColumn<QByteArray>("path");
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<int>("status");
    const QByteArray spec = test::tinyJobSpec(QStringLiteral("/nonexistent"), 2, 3);
    QTest::newRow("list jobs") << QByteArray("GET") << QByteArray("/api/v1/admin/jobs") << QByteArray()
                               << 200;
    QTest::newRow("submit (invalid spec)")
        << QByteArray("POST") << QByteArray("/api/v1/admin/jobs") << spec << 422;
    QTest::newRow("job") << QByteArray("GET") << QByteArray("/api/v1/admin/jobs/1") << QByteArray() << 200;
    QTest::newRow("job history") << QByteArray("GET") << QByteArray("/api/v1/admin/jobs/1/history")
                                 << QByteArray() << 200;
    QTest::newRow("weights") << QByteArray("GET") << QByteArray("/api/v1/admin/jobs/1/weights")
                             << QByteArray() << 200;
    QTest::newRow("pause") << QByteArray("POST") << QByteArray("/api/v1/admin/jobs/1/pause") << QByteArray()
                           << 200;
    QTest::newRow("resume") << QByteArray("POST") << QByteArray("/api/v1/admin/jobs/1/resume") << QByteArray()
                            << 200;
    QTest::newRow("cancel") << QByteArray("POST") << QByteArray("/api/v1/admin/jobs/1/cancel") << QByteArray()
                            << 200;
    QTest::newRow("list tokens") << QByteArray("GET") << QByteArray("/api/v1/admin/tokens") << QByteArray()
                                 << 200;
    QTest::newRow("create token") << QByteArray("POST") << QByteArray("/api/v1/admin/tokens")
                                  << QByteArray(R"({"uses": 1})") << 201;
    QTest::newRow("revoke token") << QByteArray("POST") << QByteArray("/api/v1/admin/tokens/1/revoke")
                                  << QByteArray() << 200;
    QTest::newRow("list agents") << QByteArray("GET") << QByteArray("/api/v1/admin/agents") << QByteArray()
                                 << 200;
    QTest::newRow("agent") << QByteArray("GET") << QByteArray("/api/v1/admin/agents/AGENT") << QByteArray()
                           << 200;
    QTest::newRow("revoke agent") << QByteArray("POST") << QByteArray("/api/v1/admin/agents/AGENT/revoke")
                                  << QByteArray() << 200;
    QTest::newRow("session info") << QByteArray("GET") << QByteArray("/api/v1/admin/session") << QByteArray()
                                  << 200;
    QTest::newRow("logout") << QByteArray("DELETE") << QByteArray("/api/v1/admin/session") << QByteArray()
                            << 200;
}

void TestDashboardApi::everyAdminEndpoint()
{
    QFETCH(QByteArray, method);
    QFETCH(QByteArray, path);
    QFETCH(QByteArray, body);
    QFETCH(int, status);
    const bool changes = method != "GET";

    for (const Mode mode : {Mode::Token, Mode::Session}) {
        QString agentId;
        prepare(&agentId);
        const QByteArray target = QByteArray(path).replace("AGENT", agentId.toLatin1());
        if (target.endsWith("/resume"))
            QCOMPARE(d.send("POST", "/api/v1/admin/jobs/1/pause", d.f.init.adminToken).status, 200);
        const QByteArray stateBefore = jobState(1);
        const QByteArray tokensBefore = d.send("GET", "/api/v1/admin/tokens", d.f.init.adminToken).body;
        const QByteArray agentsBefore = agentsRevoked();

        if (mode == Mode::Token) {
            const ClientResponse ok = d.send(method, target, d.f.init.adminToken, body);
            QVERIFY2(
                ok.status == status,
                qPrintable(QStringLiteral("token: %1 %2").arg(ok.status).arg(QString::fromUtf8(ok.body))));
            continue;
        }

        // Refusals first: none of them may change anything.
        const ClientResponse none = d.send(method, target, {}, body);
        QCOMPARE(none.status, 401);
        QVERIFY(d.json(none).value(QStringLiteral("error")).toString().contains(u"Authorization"));
        QCOMPARE(d.send(method, target, "gla_not-the-token", body).status, 401);

        test::AdminLogin login = d.login();
        QVERIFY(!login.cookie.isEmpty());
        const ClientResponse crossSite = d.send(method, target, {}, body,
                                                {{"Cookie", login.cookie},
                                                 {"Sec-Fetch-Site", "cross-site"},
                                                 {"Origin", "https://evil.example"},
                                                 {"X-Gleaner-CSRF", login.csrf}});
        QCOMPARE(crossSite.status, 403);
        const ClientResponse foreignOrigin = d.send(
            method, target, {}, body,
            {{"Cookie", login.cookie}, {"Origin", "https://evil.example"}, {"X-Gleaner-CSRF", login.csrf}});
        QCOMPARE(foreignOrigin.status, 403);
        if (changes) {
            const ClientResponse noCsrf = d.send(
                method, target, {}, body, {{"Cookie", login.cookie}, {"Sec-Fetch-Site", "same-origin"}});
            QCOMPARE(noCsrf.status, 403);
            QVERIFY(d.json(noCsrf).value(QStringLiteral("error")).toString().contains(u"X-Gleaner-CSRF"));
            test::AdminLogin wrong = login;
            wrong.csrf = "glc_forged";
            QCOMPARE(d.browser(method, target, wrong, body).status, 403);
        }
        // An expired session, then one that logged out.
        d.f.clock.advance(qint64(d.f.config.sessionIdleSeconds) * 1000 + 1);
        QCOMPARE(d.browser(method, target, login, body).status, 401);
        test::AdminLogin ended = d.login();
        QCOMPARE(d.browser("DELETE", "/api/v1/admin/session", ended).status, 200);
        QCOMPARE(d.browser(method, target, ended, body).status, 401);

        QCOMPARE(jobState(1), stateBefore);
        QCOMPARE(d.send("GET", "/api/v1/admin/tokens", d.f.init.adminToken).body, tokensBefore);
        QCOMPARE(agentsRevoked(), agentsBefore);

        login = d.login();
        const ClientResponse ok = d.browser(method, target, login, body);
        QVERIFY2(
            ok.status == status,
            qPrintable(
                QStringLiteral("session: %1 %2").arg(ok.status).arg(QString::fromUtf8(ok.body.left(300)))));
    }
}

void TestDashboardApi::loginRefusals()
{
    QVERIFY(d.start());
    const QByteArray agent = d.enrollAgent();
    const QList<HttpHeader> sameOrigin{{"Origin", d.origin()}, {"Sec-Fetch-Site", "same-origin"}};
    QCOMPARE(d.send("POST", "/api/v1/admin/session", {}, {}, sameOrigin).status, 401);
    QCOMPARE(d.send("POST", "/api/v1/admin/session", {}, R"({"token": "gla_wrong"})", sameOrigin).status,
             401);
    QCOMPARE(
        d.send("POST", "/api/v1/admin/session", {}, R"({"token": ")" + agent + R"("})", sameOrigin).status,
        401);
    QCOMPARE(d.send("POST", "/api/v1/admin/session", {}, "[1]", sameOrigin).status, 400);
    const QByteArray good = R"({"token": ")" + d.f.init.adminToken + R"("})";
    // A foreign page may not log this browser in (login CSRF).
    QCOMPARE(d.send("POST", "/api/v1/admin/session", {}, good, {{"Origin", "https://evil.example"}}).status,
             403);
    QCOMPARE(d.send("POST", "/api/v1/admin/session", {}, good, {{"Sec-Fetch-Site", "same-site"}}).status,
             403);
    QCOMPARE(d.send("POST", "/api/v1/admin/session", {}, QByteArray(8 * 1024, ' '), sameOrigin).status, 413);
    QCOMPARE(d.handler->dashboard().sessions().count(), 0);
}

void TestDashboardApi::loginCookieAndCsrf()
{
    QVERIFY(d.start());
    const test::AdminLogin login = d.login();
    const QByteArray setCookie = login.setCookie;
    QVERIFY2(setCookie.startsWith("__Host-gleaner_session=gls_"), setCookie.constData());
    for (const char* attribute :
         {"; Path=/", "; Secure", "; HttpOnly", "; SameSite=Strict", "; Max-Age=604800"})
        QVERIFY2(setCookie.contains(attribute), setCookie.constData());
    QVERIFY(!setCookie.contains("Domain"));
    QVERIFY(login.csrf.startsWith("glc_"));
    // The page can ask for its CSRF token again after a reload: the same one, from the cookie alone.
    const ClientResponse info = d.browser("GET", "/api/v1/admin/session", login);
    QCOMPARE(info.status, 200);
    QCOMPARE(d.json(info).value(QStringLiteral("csrf_token")).toString().toLatin1(), login.csrf);
    QCOMPARE(d.json(info).value(QStringLiteral("via")).toString(), QStringLiteral("session"));
    // Another session's CSRF token does not fit this one.
    test::AdminLogin other = d.login();
    test::AdminLogin mixed = login;
    mixed.csrf = other.csrf;
    QCOMPARE(d.browser("POST", "/api/v1/admin/tokens", mixed, "{}").status, 403);
    QCOMPARE(d.browser("POST", "/api/v1/admin/tokens", login, "{}").status, 201);
    // The bearer token logs in too (scripts), and a session is never stored in clear.
    QCOMPARE(d.send("POST", "/api/v1/admin/session", d.f.init.adminToken).status, 201);
    QCOMPARE(d.handler->dashboard().sessions().count(), 3);
    const QByteArray id = login.cookie.mid(login.cookie.indexOf('=') + 1);
    QVERIFY(!test::readFile(d.f.dir.databasePath()).contains(id));
}

void TestDashboardApi::sessionExpiresWhenIdleAndAtItsLifetime()
{
    QVERIFY(d.start([](CoordinatorConfig& c) {
        c.sessionIdleSeconds = 600;
        c.sessionLifetimeSeconds = 3600;
    }));
    const test::AdminLogin login = d.login();
    // Used every 9 minutes, it stays alive past its idle time ...
    for (int i = 0; i < 6; ++i) {
        d.f.clock.advance(9 * 60'000);
        QCOMPARE(d.browser("GET", "/api/v1/admin/jobs", login).status, 200);
    }
    // ... but not past its lifetime (54 min so far; the next use is at 63 min).
    d.f.clock.advance(9 * 60'000);
    QCOMPARE(d.browser("GET", "/api/v1/admin/jobs", login).status, 401);
    const test::AdminLogin idle = d.login();
    d.f.clock.advance(600'000);
    const ClientResponse expired = d.browser("GET", "/api/v1/admin/jobs", idle);
    QCOMPARE(expired.status, 401);
    QVERIFY(d.json(expired).value(QStringLiteral("error")).toString().contains(u"log in again"));
}

void TestDashboardApi::logoutEndsTheSession()
{
    QVERIFY(d.start());
    const test::AdminLogin login = d.login();
    const ClientResponse out = d.browser("DELETE", "/api/v1/admin/session", login);
    QCOMPARE(out.status, 200);
    QVERIFY(out.header("Set-Cookie").contains("Max-Age=0"));
    QCOMPARE(d.browser("GET", "/api/v1/admin/jobs", login).status, 401);
    QCOMPARE(d.handler->dashboard().sessions().count(), 0);
}

void TestDashboardApi::getNeverChangesState()
{
    QString agentId;
    prepare(&agentId);
    const test::AdminLogin login = d.login();
    const QList<QByteArray> targets{"/api/v1/admin/jobs/1/pause", "/api/v1/admin/jobs/1/cancel",
                                    QByteArray("/api/v1/admin/agents/" + agentId.toLatin1() + "/revoke"),
                                    "/api/v1/admin/tokens/1/revoke"};
    for (const QByteArray& target : targets) {
        QCOMPARE(d.browser("GET", target, login).status, 404);
        QCOMPARE(d.send("GET", target, d.f.init.adminToken).status, 404);
    }
    QCOMPARE(jobState(1), QByteArray("running"));
    const QJsonObject agent =
        d.json(d.send("GET", "/api/v1/admin/agents/" + agentId.toLatin1(), d.f.init.adminToken));
    QCOMPARE(agent.value(QStringLiteral("revoked")).toBool(), false);
    const QJsonArray tokens = d.json(d.send("GET", "/api/v1/admin/tokens", d.f.init.adminToken))
                                  .value(QStringLiteral("tokens"))
                                  .toArray();
    QVERIFY(tokens.first()[QStringLiteral("state")].toString() != u"revoked");
}

void TestDashboardApi::eventsNeedASession()
{
    QVERIFY(d.start());
    QCOMPARE(d.send("GET", "/api/v1/admin/events").status, 401);
    const test::AdminLogin login = d.login();
    QCOMPARE(d.send("GET", "/api/v1/admin/events", {}, {},
                    {{"Cookie", login.cookie}, {"Sec-Fetch-Site", "cross-site"}})
                 .status,
             403);
    d.f.clock.advance(qint64(d.f.config.sessionIdleSeconds) * 1000);
    QCOMPARE(d.browser("GET", "/api/v1/admin/events", login).status, 401);
}

void TestDashboardApi::pageAndAssets()
{
    QVERIFY(d.start());
    const ClientResponse page = d.send("GET", "/");
    QCOMPARE(page.status, 200);
    QCOMPARE(page.header("Content-Type"), QByteArray("text/html; charset=utf-8"));
    QVERIFY(page.body.contains("/assets/app.js"));
    QVERIFY(page.header("Content-Security-Policy").contains("script-src 'self'"));
    QVERIFY(page.header("Content-Security-Policy").contains("frame-ancestors 'none'"));
    QCOMPARE(page.header("X-Content-Type-Options"), QByteArray("nosniff"));
    const QByteArray etag = page.header("ETag");
    QVERIFY(!etag.isEmpty());
    QCOMPARE(d.send("GET", "/", {}, {}, {{"If-None-Match", etag}}).status, 304);
    QCOMPARE(d.send("HEAD", "/index.html").status, 200);

    const ClientResponse script = d.send("GET", "/assets/app.js");
    QCOMPARE(script.status, 200);
    QCOMPARE(script.header("Content-Type"), QByteArray("text/javascript; charset=utf-8"));
    const ClientResponse zipped = d.send("GET", "/assets/app.js", {}, {}, {{"Accept-Encoding", "gzip, br"}});
    QCOMPARE(zipped.status, 200);
    QCOMPARE(zipped.header("Content-Encoding"), QByteArray("gzip"));
    QProcess gunzip; // the compressed copy holds the same bytes
    gunzip.start(QStringLiteral("gzip"), {QStringLiteral("-dc")});
    gunzip.write(zipped.body);
    gunzip.closeWriteChannel();
    QVERIFY(gunzip.waitForFinished(10'000));
    QCOMPARE(gunzip.readAllStandardOutput(), script.body);
    QVERIFY(zipped.body.size() < script.body.size());
    QVERIFY(zipped.header("ETag") != script.header("ETag"));
    QCOMPARE(
        d.send("GET", "/assets/app.js", {}, {}, {{"Accept-Encoding", "gzip;q=0"}}).header("Content-Encoding"),
        QByteArray());
    QCOMPARE(d.send("GET", "/assets/app.css").status, 200);
    QCOMPARE(d.send("GET", "/assets/nothing.js").status, 404);
    QCOMPARE(d.send("POST", "/", {}, "x").status, 405);
    QCOMPARE(d.send("GET", "/etc/passwd").status, 404);
}

void TestDashboardApi::jobHistoryForTheCharts()
{
    QVERIFY(d.start());
    const QByteArray agent = d.enrollAgent();
    QCOMPARE(d.submitTinyJob(2, 3), 1);
    qint64 base = 0;
    const QByteArray a = d.leaseOne(agent, &base);
    const QByteArray b = d.leaseOne(agent, &base);
    QCOMPARE(d.upload(agent, a, base, 0.5f, 0.75).status, 202);
    d.f.core->drain();
    QCOMPARE(d.upload(agent, b, base, 0.5f, 0.25).status,
             202); // trained from version 0, folded after 1: staleness 1
    d.f.core->drain();

    const ClientResponse r = d.send("GET", "/api/v1/admin/jobs/1/history", d.f.init.adminToken);
    QCOMPARE(r.status, 200);
    const QJsonObject h = d.json(r);
    const QJsonObject validations = h.value(QStringLiteral("validations")).toObject();
    QCOMPARE(validations.value(QStringLiteral("accuracy")).toArray().size(), 1); // epoch 1's end
    QCOMPARE(validations.value(QStringLiteral("epoch_end")).toArray().first().toBool(), true);
    const QJsonArray epochs = h.value(QStringLiteral("epochs")).toArray();
    QVERIFY(epochs.size() >= 1);
    const QJsonObject first = epochs.first().toObject();
    QCOMPARE(first.value(QStringLiteral("updates")).toInt(), 2);
    const QJsonObject spread = first.value(QStringLiteral("subtask_loss")).toObject();
    QCOMPARE(spread.value(QStringLiteral("min")).toDouble(), 0.25);
    QCOMPARE(spread.value(QStringLiteral("max")).toDouble(), 0.75);
    QCOMPARE(spread.value(QStringLiteral("mean")).toDouble(), 0.5);
    QVERIFY(first.value(QStringLiteral("started_ms")).toInteger() > 0);
    QVERIFY(!first.value(QStringLiteral("validated_ms")).isNull());
    const QJsonObject updates = h.value(QStringLiteral("updates")).toObject();
    QCOMPARE(updates.value(QStringLiteral("staleness")).toArray(), (QJsonArray{0, 1}));
    QCOMPARE(updates.value(QStringLiteral("loss")).toArray(), (QJsonArray{0.75, 0.25}));
    QCOMPARE(
        h.value(QStringLiteral("updates_per_minute")).toObject().value(QStringLiteral("count")).toArray(),
        QJsonArray{2});
    const QJsonObject subtasks =
        h.value(QStringLiteral("job")).toObject().value(QStringLiteral("subtasks")).toObject();
    QCOMPARE(subtasks.value(QStringLiteral("epoch")).toInt(), 2);
    QCOMPARE(subtasks.value(QStringLiteral("total")).toInt(), 2);
    QCOMPARE(subtasks.value(QStringLiteral("pending")).toInt(), 2);

    // A lease that misses its deadline: its workunit is late, then re-issued.
    const QByteArray late = d.leaseOne(agent, &base);
    QVERIFY(!late.isEmpty());
    d.f.clock.advance(61'000);
    d.f.core->state().call([&] { d.f.core->tick(); });
    QVERIFY(!d.leaseOne(agent).isEmpty()); // the expired workunit goes out again
    const QJsonObject counts = d.json(d.send("GET", "/api/v1/admin/jobs/1/history", d.f.init.adminToken))
                                   .value(QStringLiteral("job"))
                                   .toObject()
                                   .value(QStringLiteral("subtasks"))
                                   .toObject();
    QCOMPARE(counts.value(QStringLiteral("late")).toInt(), 1);
    QCOMPARE(counts.value(QStringLiteral("reissued")).toInt(), 1);
    QCOMPARE(counts.value(QStringLiteral("leased")).toInt(), 1);
    QCOMPARE(counts.value(QStringLiteral("pending")).toInt(), 1);
    QCOMPARE(d.send("GET", "/api/v1/admin/jobs/9/history", d.f.init.adminToken).status, 404);
}

void TestDashboardApi::agentsWithWhatTheyHold()
{
    QVERIFY(d.start());
    QString id;
    const QByteArray agent = d.enrollAgent(&id, QStringLiteral("lab-pc-07"));
    QCOMPARE(d.submitTinyJob(2, 3), 1);
    const QByteArray lease = d.leaseOne(agent);
    const QJsonObject a = d.json(d.send("GET", "/api/v1/admin/agents/" + id.toLatin1(), d.f.init.adminToken));
    QCOMPARE(a.value(QStringLiteral("name")).toString(), QStringLiteral("lab-pc-07"));
    QCOMPARE(a.value(QStringLiteral("online")).toBool(), true);
    QCOMPARE(a.value(QStringLiteral("cores")).toInt(), 8);
    QCOMPARE(a.value(QStringLiteral("gpu")).toString(), QStringLiteral("none"));
    QCOMPARE(a.value(QStringLiteral("failed")).toInt(), 0);
    const QJsonArray current = a.value(QStringLiteral("current")).toArray();
    QCOMPARE(current.size(), 1);
    QCOMPARE(current.first()[QStringLiteral("lease")].toString().toLatin1(), lease);
    QCOMPARE(current.first()[QStringLiteral("epoch")].toInt(), 1);
    // Not seen for longer than agent_online_seconds: offline.
    d.f.clock.advance(qint64(d.f.config.agentOnlineSeconds) * 1000 + 1);
    const QJsonArray all = d.json(d.send("GET", "/api/v1/admin/agents", d.f.init.adminToken))
                               .value(QStringLiteral("agents"))
                               .toArray();
    QCOMPARE(all.size(), 1);
    QCOMPARE(all.first()[QStringLiteral("online")].toBool(), false);
    QCOMPARE(d.send("GET", "/api/v1/admin/agents/0123", d.f.init.adminToken).status, 404);
}

QTEST_GUILESS_MAIN(TestDashboardApi)
#include "TestDashboardApi.moc"
