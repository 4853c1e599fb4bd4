// GET /metrics of a real coordinator over HTTPS after real traffic (accepted, duplicate, invalid and
// oversized uploads, a validation, an expired lease): the text passes `promtool check metrics` (Debian's
// prometheus package), the numbers are the traffic's, and the endpoint is closed to anyone without admin
// credentials unless config.json opens it to loopback.
#include "DashboardFixture.h"
#include "TestSupport.h"

#include <QJsonArray>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

// The value of the sample whose line starts with `series` (name and labels exactly as rendered); NaN if
// absent.
double sample(const QByteArray& text, const QByteArray& series)
{
    for (const QByteArray& line : text.split('\n'))
        if (line.startsWith(QByteArray(series + ' ')))
            return line.mid(series.size() + 1).toDouble();
    return std::nan("");
}

} // namespace

class TestMetricsEndpoint : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void cleanup() { d.stop(); }
    void metricsAfterTrafficPassPromtool();
    void metricsNeedAdminCredentials();
    void loopbackAccessWhenConfigured();
    void loopbackAccessBehindATrustedProxyCountsItsClients();

private:
    test::DashboardFixture d;
};

void TestMetricsEndpoint::metricsAfterTrafficPassPromtool()
{
    const QString promtool = QStandardPaths::findExecutable(QStringLiteral("promtool"));
    if (promtool.isEmpty())
        QFAIL(
            "promtool is not installed: install the Debian package prometheus (installers/install-deps.sh)");
    QVERIFY(d.start());
    const QByteArray agent = d.enrollAgent();
    const qint64 job = d.submitTinyJob(2, 3);
    QVERIFY(job > 0);

    qint64 base = -1;
    const QByteArray first = d.leaseOne(agent, &base);
    QVERIFY(!first.isEmpty());
    QCOMPARE(d.upload(agent, first, base).status, 202);
    QCOMPARE(d.upload(agent, first, base).status, 409); // the duplicate
    const QByteArray second = d.leaseOne(agent, &base);
    auto invalid = d.client->request("PUT", "/api/v1/work/" + second + "/result", "not safetensors",
                                     "application/octet-stream", {}, agent);
    QVERIFY(invalid.ok());
    QCOMPARE(invalid->status, 422);
    const QByteArray third = d.leaseOne(agent, &base); // the same workunit again
    QCOMPARE(d.upload(agent, third, base, 0.25f, 0.5).status, 202);
    d.f.core->drain(); // epoch 1 is complete: it is validated
    const QByteArray fourth = d.leaseOne(agent, &base);
    QVERIFY(!fourth.isEmpty());
    auto oversized = d.client->request("PUT", "/api/v1/work/" + fourth + "/result", QByteArray(8 << 20, 'x'),
                                       "application/octet-stream", {}, agent);
    QVERIFY(oversized.ok());
    QCOMPARE(oversized->status, 413);
    d.f.clock.advance(61'000); // past the 60 s deadline
    d.f.core->state().call([&] { d.f.core->tick(); });
    d.f.core->drain();

    const ClientResponse scraped = d.send("GET", "/metrics", d.f.init.adminToken);
    QCOMPARE(scraped.status, 200);
    QCOMPARE(scraped.header("Content-Type"), QByteArray("text/plain; version=0.0.4; charset=utf-8"));
    const QByteArray text = scraped.body;

    const QString file = d.f.scratch->filePath(QStringLiteral("metrics.txt"));
    test::writeFile(file, text);
    QProcess check;
    check.setStandardInputFile(file);
    check.start(promtool, {QStringLiteral("check"), QStringLiteral("metrics")});
    QVERIFY(check.waitForFinished(30'000));
    const QByteArray complaints = check.readAllStandardOutput() + check.readAllStandardError();
    QVERIFY2(check.exitStatus() == QProcess::NormalExit && check.exitCode() == 0,
             qPrintable(QStringLiteral("promtool check metrics failed:\n%1\n--- the text ---\n%2")
                            .arg(QString::fromUtf8(complaints), QString::fromUtf8(text))));
    QVERIFY2(complaints.trimmed().isEmpty(), complaints.constData());

    // The numbers are the traffic's.
    QCOMPARE(sample(text, "gleaner_updates_accepted_total"), 2.0);
    QCOMPARE(sample(text, "gleaner_updates_refused_total{reason=\"conflict\"}"), 1.0);
    QCOMPARE(sample(text, "gleaner_updates_refused_total{reason=\"invalid\"}"), 1.0);
    QCOMPARE(sample(text, "gleaner_updates_refused_total{reason=\"too_large\"}"), 1.0);
    QCOMPARE(sample(text, "gleaner_updates_refused_total{reason=\"unknown_lease\"}"), 0.0);
    QCOMPARE(sample(text, "gleaner_leases_issued_total"), 4.0);
    QCOMPARE(sample(text, "gleaner_leases_expired_total"), 1.0);
    QCOMPARE(sample(text, "gleaner_agents_online"), 1.0);
    QCOMPARE(sample(text, "gleaner_agents{state=\"active\"}"), 1.0);
    QCOMPARE(sample(text, "gleaner_jobs{state=\"running\"}"), 1.0);
    QCOMPARE(sample(text, "gleaner_assimilation_seconds_count"), 2.0);
    QCOMPARE(sample(text, "gleaner_http_requests_total{route=\"lease\",code=\"200\"}"), 4.0);
    QVERIFY(sample(text, "gleaner_http_received_bytes_total") > 1000.0); // the uploads
    QVERIFY(sample(text, "gleaner_http_sent_bytes_total") > 1000.0);     // weights downloads and JSON
    const double accuracy = sample(text, "gleaner_validation_accuracy{job_id=\"1\",job_name=\"tiny\"}");
    QVERIFY2(accuracy >= 0.0 && accuracy <= 1.0, text.constData());
    QCOMPARE(sample(text, "gleaner_job_epoch{job_id=\"1\",job_name=\"tiny\"}"), 2.0);
    QVERIFY(text.contains("gleaner_http_request_duration_seconds_bucket{route=\"result\",le=\"+Inf\"} 5\n"));
}

void TestMetricsEndpoint::metricsNeedAdminCredentials()
{
    QVERIFY(d.start());
    const QByteArray agent = d.enrollAgent();
    QCOMPARE(d.send("GET", "/metrics").status, 401);
    QCOMPARE(d.send("GET", "/metrics", agent).status, 401);
    QCOMPARE(d.send("GET", "/metrics", "gla_wrong").status, 401);
    QCOMPARE(d.send("POST", "/metrics", d.f.init.adminToken).status, 405);
    const test::AdminLogin login = d.login();
    QCOMPARE(d.browser("GET", "/metrics", login).status, 200);
    QCOMPARE(d.send("GET", "/metrics", d.f.init.adminToken).status, 200);
}

void TestMetricsEndpoint::loopbackAccessWhenConfigured()
{
    QVERIFY(d.start([](CoordinatorConfig& config) {
        config.metricsAccess = CoordinatorConfig::MetricsAccess::Loopback;
    }));
    const ClientResponse open = d.send("GET", "/metrics");
    QCOMPARE(open.status, 200);
    QVERIFY(open.body.contains("# TYPE gleaner_updates_accepted_total counter"));
    // Only /metrics is opened: the admin API still needs credentials.
    QCOMPARE(d.send("GET", "/api/v1/admin/jobs").status, 401);
}

void TestMetricsEndpoint::loopbackAccessBehindATrustedProxyCountsItsClients()
{
    // A reverse proxy on the coordinator's machine: every request arrives from loopback. Named as a proxy, the
    // clients it forwards for are who asks, and a remote one needs credentials.
    QVERIFY(d.start([](CoordinatorConfig& config) {
        config.metricsAccess = CoordinatorConfig::MetricsAccess::Loopback;
        config.trustedProxies = {QStringLiteral("127.0.0.1")};
    }));
    const QList<HttpHeader> remote{HttpHeader{"X-Forwarded-For", "203.0.113.9"}};
    QCOMPARE(d.send("GET", "/metrics", {}, {}, remote).status, 401);
    QCOMPARE(d.send("GET", "/metrics", d.f.init.adminToken, {}, remote).status, 200);
    // A Prometheus beside it that asks the proxy: forwarded for loopback, still open.
    QCOMPARE(d.send("GET", "/metrics", {}, {}, {HttpHeader{"X-Forwarded-For", "127.0.0.1"}}).status, 200);
}

QTEST_GUILESS_MAIN(TestMetricsEndpoint)
#include "TestMetricsEndpoint.moc"
