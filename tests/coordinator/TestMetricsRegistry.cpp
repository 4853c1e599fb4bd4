// The metrics registry and its Prometheus text: exact exposition of each metric type, escaping, bucket
// arithmetic, and counts that stay exact under concurrent updates from several threads.
#include "metrics/CoordinatorMetrics.h"
#include "metrics/MetricsRegistry.h"

#include <QTest>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

using namespace gleaner::coordinator;
using namespace gleaner::coordinator::metrics;

class TestMetricsRegistry : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void counterAndGaugeExposition();
    void histogramBucketsAreCumulative();
    void histogramBoundaryLandsInItsBucket();
    void labelValuesAndHelpAreEscaped();
    void formatValue_data();
    void formatValue();
    void names_data();
    void names();
    void gaugeFamilyIsReplacedWholesale();
    void processLabelMarksOnlyTheProcesssFigures();
    void concurrentUpdatesAreExact();
    void routesAndRefusals_data();
    void routesAndRefusals();
    void coordinatorMetricsCountUploadRefusalsByReason();
};

void TestMetricsRegistry::counterAndGaugeExposition()
{
    MetricsRegistry registry;
    Counter& plain = registry.counter("gleaner_things_total", "Things done.");
    Counter& red = registry.counter("gleaner_colours_total", "By colour.", {{"colour", "red"}});
    registry.counter("gleaner_colours_total", "By colour.", {{"colour", "blue"}});
    Gauge& level = registry.gauge("gleaner_level_bytes", "A level.");
    plain.inc();
    plain.inc(41);
    red.inc(3);
    level.set(2.5);
    QCOMPARE(&registry.counter("gleaner_things_total", "Things done."), &plain); // the same series again
    QCOMPARE(registry.render(), QByteArray("# HELP gleaner_things_total Things done.\n"
                                           "# TYPE gleaner_things_total counter\n"
                                           "gleaner_things_total 42\n"
                                           "# HELP gleaner_colours_total By colour.\n"
                                           "# TYPE gleaner_colours_total counter\n"
                                           "gleaner_colours_total{colour=\"red\"} 3\n"
                                           "gleaner_colours_total{colour=\"blue\"} 0\n"
                                           "# HELP gleaner_level_bytes A level.\n"
                                           "# TYPE gleaner_level_bytes gauge\n"
                                           "gleaner_level_bytes 2.5\n"));
}

void TestMetricsRegistry::histogramBucketsAreCumulative()
{
    MetricsRegistry registry;
    Histogram& h = registry.histogram("gleaner_wait_seconds", "Waits.", {0.1, 1, 10}, {{"route", "lease"}});
    for (double v : {0.0625, 0.5, 0.75, 5.0, 50.0}) // exact in binary: so is their sum
        h.observe(v);
    const QByteArray text = registry.render();
    QVERIFY2(text.contains("# TYPE gleaner_wait_seconds histogram\n"), text.constData());
    QVERIFY(text.contains("gleaner_wait_seconds_bucket{route=\"lease\",le=\"0.1\"} 1\n"));
    QVERIFY(text.contains("gleaner_wait_seconds_bucket{route=\"lease\",le=\"1\"} 3\n"));
    QVERIFY(text.contains("gleaner_wait_seconds_bucket{route=\"lease\",le=\"10\"} 4\n"));
    QVERIFY(text.contains("gleaner_wait_seconds_bucket{route=\"lease\",le=\"+Inf\"} 5\n"));
    QVERIFY(text.contains("gleaner_wait_seconds_sum{route=\"lease\"} 56.3125\n"));
    QVERIFY(text.contains("gleaner_wait_seconds_count{route=\"lease\"} 5\n"));
}

void TestMetricsRegistry::histogramBoundaryLandsInItsBucket()
{
    // Prometheus buckets are "less than or equal to le".
    Histogram h({1, 2});
    h.observe(1.0);
    h.observe(2.0);
    h.observe(2.0000001);
    const Histogram::Snapshot s = h.snapshot();
    QCOMPARE(s.cumulative, (std::vector<quint64>{1, 2, 3}));
    QCOMPARE(s.count, quint64(3));
}

void TestMetricsRegistry::labelValuesAndHelpAreEscaped()
{
    MetricsRegistry registry;
    registry
        .counter("gleaner_x_total", "Line one\nback\\slash", {{"name", "a \"quoted\"\\ name\nwith a break"}})
        .inc();
    const QByteArray text = registry.render();
    QVERIFY2(text.contains("# HELP gleaner_x_total Line one\\nback\\\\slash\n"), text.constData());
    QVERIFY2(text.contains("gleaner_x_total{name=\"a \\\"quoted\\\"\\\\ name\\nwith a break\"} 1\n"),
             text.constData());
}

void TestMetricsRegistry::formatValue_data()
{
    QTest::addColumn<double>("value");
    QTest::addColumn<QByteArray>("text");
    QTest::newRow("integer") << 3.0 << QByteArray("3");
    QTest::newRow("fraction") << 0.0025 << QByteArray("0.0025");
    QTest::newRow("negative") << -1.5 << QByteArray("-1.5");
    QTest::newRow("large") << 1e21 << QByteArray("1e+21");
    QTest::newRow("nan") << std::nan("") << QByteArray("NaN");
    QTest::newRow("+inf") << std::numeric_limits<double>::infinity() << QByteArray("+Inf");
    QTest::newRow("-inf") << -std::numeric_limits<double>::infinity() << QByteArray("-Inf");
}

void TestMetricsRegistry::formatValue()
{
    QFETCH(double, value);
    QFETCH(QByteArray, text);
    QCOMPARE(metrics::formatValue(value), text);
}

void TestMetricsRegistry::names_data()
{
    QTest::addColumn<QByteArray>("name");
    QTest::addColumn<bool>("metric");
    QTest::addColumn<bool>("label");
    QTest::newRow("snake") << QByteArray("gleaner_updates_total") << true << true;
    QTest::newRow("colon") << QByteArray("job:rate5m") << true << false;
    QTest::newRow("digit first") << QByteArray("5xx") << false << false;
    QTest::newRow("dash") << QByteArray("a-b") << false << false;
    QTest::newRow("empty") << QByteArray() << false << false;
    QTest::newRow("reserved label") << QByteArray("__name__") << true << false;
    QTest::newRow("le is the histogram's") << QByteArray("le") << true << false;
}

void TestMetricsRegistry::names()
{
    QFETCH(QByteArray, name);
    QFETCH(bool, metric);
    QFETCH(bool, label);
    QCOMPARE(MetricsRegistry::isValidMetricName(name), metric);
    QCOMPARE(MetricsRegistry::isValidLabelName(name), label);
}

void TestMetricsRegistry::gaugeFamilyIsReplacedWholesale()
{
    MetricsRegistry registry;
    registry.setGaugeFamily("gleaner_validation_accuracy", "Accuracy.",
                            {{{{"job_id", "1"}}, 0.5}, {{{"job_id", "2"}}, 0.75}});
    registry.setGaugeFamily("gleaner_validation_accuracy", "Accuracy.", {{{{"job_id", "2"}}, 0.8}});
    const QByteArray text = registry.render();
    QVERIFY(!text.contains("job_id=\"1\""));
    QVERIFY(text.contains("gleaner_validation_accuracy{job_id=\"2\"} 0.8\n"));
    // An empty family says nothing at all (no dangling HELP line).
    registry.setGaugeFamily("gleaner_validation_accuracy", "Accuracy.", {});
    QVERIFY(!registry.render().contains("gleaner_validation_accuracy"));
}

void TestMetricsRegistry::processLabelMarksOnlyTheProcesssFigures()
{
    MetricsRegistry registry;
    registry.counter("gleaner_hits_total", "Hits.", {{"route", "lease"}}).inc(3);
    registry.histogram("gleaner_hit_seconds", "Hit times.", {0.5}).observe(0.25);
    registry.setGaugeFamily("gleaner_backlog", "Backlog.", {{{}, 2}});
    registry.setGaugeFamily("gleaner_job_updates_received", "Received.", {{{{"job_id", "1"}}, 7}},
                            MetricsRegistry::Scope::Deployment);
    // A coordinator alone: no label of the process.
    QVERIFY(registry.render().contains("gleaner_hits_total{route=\"lease\"} 3\n"));
    registry.setProcessLabel("coordinator", "node-a:8443");
    const QByteArray text = registry.render();
    QVERIFY2(text.contains("gleaner_hits_total{coordinator=\"node-a:8443\",route=\"lease\"} 3\n"), text.constData());
    QVERIFY2(text.contains("gleaner_hit_seconds_bucket{coordinator=\"node-a:8443\",le=\"0.5\"} 1\n"), text.constData());
    QVERIFY2(text.contains("gleaner_hit_seconds_count{coordinator=\"node-a:8443\"} 1\n"), text.constData());
    QVERIFY2(text.contains("gleaner_backlog{coordinator=\"node-a:8443\"} 2\n"), text.constData());
    QVERIFY2(text.contains("gleaner_job_updates_received{job_id=\"1\"} 7\n"), text.constData());
}

void TestMetricsRegistry::concurrentUpdatesAreExact()
{
    MetricsRegistry registry;
    Counter& counter = registry.counter("gleaner_hits_total", "Hits.");
    Histogram& histogram = registry.histogram("gleaner_hit_seconds", "Hit times.", latencyBuckets());
    constexpr int kThreads = 4;
    constexpr int kEach = 100'000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < kEach; ++i) {
                counter.inc();
                histogram.observe(0.5); // exact in binary: the sum stays exact too
            }
        });
    // Rendering while they run must be safe (and never see a +Inf bucket below a smaller one).
    for (int i = 0; i < 20; ++i)
        QVERIFY(registry.render().contains("gleaner_hits_total"));
    for (auto& thread : threads)
        thread.join();
    QCOMPARE(counter.value(), quint64(kThreads * kEach));
    const Histogram::Snapshot s = histogram.snapshot();
    QCOMPARE(s.count, quint64(kThreads * kEach));
    QCOMPARE(s.sum, 0.5 * kThreads * kEach);
}

void TestMetricsRegistry::routesAndRefusals_data()
{
    QTest::addColumn<QByteArray>("method");
    QTest::addColumn<QByteArray>("target");
    QTest::addColumn<QString>("route");
    QTest::newRow("page") << QByteArray("GET") << QByteArray("/") << "dashboard";
    QTest::newRow("asset") << QByteArray("GET") << QByteArray("/assets/app.js") << "dashboard";
    QTest::newRow("metrics") << QByteArray("GET") << QByteArray("/metrics?x=1") << "metrics";
    QTest::newRow("lease") << QByteArray("POST") << QByteArray("/api/v1/work/lease") << "lease";
    QTest::newRow("result") << QByteArray("PUT") << QByteArray("/api/v1/work/abc/result") << "result";
    QTest::newRow("fail") << QByteArray("POST") << QByteArray("/api/v1/work/abc/fail") << "fail";
    QTest::newRow("progress") << QByteArray("POST") << QByteArray("/api/v1/work/abc/progress") << "progress";
    QTest::newRow("file") << QByteArray("GET") << QByteArray("/api/v1/files/ab") << "files";
    QTest::newRow("events") << QByteArray("GET") << QByteArray("/api/v1/admin/events") << "events";
    QTest::newRow("admin") << QByteArray("GET") << QByteArray("/api/v1/admin/jobs") << "admin";
    QTest::newRow("unknown") << QByteArray("GET") << QByteArray("/etc/passwd") << "other";
}

void TestMetricsRegistry::routesAndRefusals()
{
    QFETCH(QByteArray, method);
    QFETCH(QByteArray, target);
    QFETCH(QString, route);
    RequestHead head;
    head.method = method;
    head.target = target;
    QCOMPARE(QString::fromLatin1(routeName(classifyRoute(head))), route);
}

void TestMetricsRegistry::coordinatorMetricsCountUploadRefusalsByReason()
{
    CoordinatorMetrics metrics;
    RequestHead upload;
    upload.method = "PUT";
    upload.target = "/api/v1/work/0123/result";
    for (int status : {202, 409, 409, 413, 422, 500, 404})
        metrics.observeRequest(upload, RequestOutcome{status, 100, 10, 0.01});
    QCOMPARE(metrics.updatesRefused(RefusalReason::Conflict), quint64(2));
    QCOMPARE(metrics.updatesRefused(RefusalReason::TooLarge), quint64(1));
    QCOMPARE(metrics.updatesRefused(RefusalReason::Invalid), quint64(1));
    QCOMPARE(metrics.updatesRefused(RefusalReason::Error), quint64(1));
    QCOMPARE(metrics.updatesRefused(RefusalReason::UnknownLease), quint64(1));
    QCOMPARE(metrics.requests(Route::Result, 409), quint64(2));
    const QByteArray text = metrics.registry().render();
    QVERIFY(text.contains("gleaner_http_requests_total{route=\"result\",code=\"409\"} 2\n"));
    QVERIFY(
        text.contains("gleaner_updates_refused_total{reason=\"revoked\"} 0\n")); // present before it happens
    QVERIFY(text.contains("gleaner_http_received_bytes_total 700\n"));
    QVERIFY(text.contains("gleaner_http_request_duration_seconds_count{route=\"result\"} 7\n"));
}

QTEST_GUILESS_MAIN(TestMetricsRegistry)
#include "TestMetricsRegistry.moc"
