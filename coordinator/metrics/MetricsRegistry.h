#pragma once
// A small thread-safe metrics registry that renders the Prometheus text exposition format (version 0.0.4).
//
// Hot paths (HTTP threads, the state thread, the weights thread) only touch atomics: a Counter is one relaxed
// atomic add, a Histogram observation one relaxed add into a fixed bucket plus one into its sum. Registering
// a series and rendering take the registry's mutex; both are rare (registration at start or on the first use
// of a label value, rendering once per scrape). Series live as long as the registry, so the references handed
// out stay valid and hot code keeps them instead of looking names up.
//
// Gauges whose values are derived from state at scrape time (agents online, accuracy per job) are replaced
// wholesale with setGaugeFamily() by whoever owns that state, just before render().

#include <QByteArray>
#include <QByteArrayView>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gleaner::coordinator::metrics {

// Label name -> value, in the order they are rendered.
using Labels = std::vector<std::pair<QByteArray, QByteArray>>;

class Counter
{
public:
    void inc(quint64 n = 1) noexcept { m_value.fetch_add(n, std::memory_order_relaxed); }
    quint64 value() const noexcept { return m_value.load(std::memory_order_relaxed); }

private:
    std::atomic<quint64> m_value{0};
};

class Gauge
{
public:
    void set(double value) noexcept { m_value.store(value, std::memory_order_relaxed); }
    void add(double delta) noexcept { m_value.fetch_add(delta, std::memory_order_relaxed); }
    double value() const noexcept { return m_value.load(std::memory_order_relaxed); }

private:
    std::atomic<double> m_value{0.0};
};

// Fixed buckets, chosen at registration. Each observation lands in exactly one (non-cumulative) bucket; the
// cumulative counts Prometheus wants are summed when rendering, so `_count` always equals the `+Inf` bucket.
class Histogram
{
public:
    // `upperBounds` must be finite and strictly increasing; the +Inf bucket is implicit.
    explicit Histogram(std::vector<double> upperBounds);
    void observe(double value) noexcept;

    struct Snapshot
    {
        std::vector<quint64> cumulative; // one per upper bound, then +Inf
        quint64 count = 0;
        double sum = 0.0;
    };
    Snapshot snapshot() const;
    const std::vector<double>& upperBounds() const { return m_bounds; }

private:
    const std::vector<double> m_bounds;
    const std::unique_ptr<std::atomic<quint64>[]> m_buckets; // m_bounds.size() + 1
    std::atomic<double> m_sum{0.0};
};

// Bucket bounds in seconds for request and processing latencies: 1 ms to 60 s.
std::vector<double> latencyBuckets();

class MetricsRegistry
{
public:
    static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

    MetricsRegistry();
    ~MetricsRegistry();
    MetricsRegistry(const MetricsRegistry&) = delete;
    MetricsRegistry& operator=(const MetricsRegistry&) = delete;

    // The series `name{labels}`, created on first use. Registering one name with two types, or a histogram
    // with two sets of buckets, is a programming error and aborts with a message (names are constants in the
    // code).
    Counter& counter(QByteArrayView name, QByteArrayView help, const Labels& labels = {});
    Gauge& gauge(QByteArrayView name, QByteArrayView help, const Labels& labels = {});
    Histogram& histogram(QByteArrayView name, QByteArrayView help, const std::vector<double>& upperBounds,
                         const Labels& labels = {});
    // Whose figure a family is, among several coordinators of one deployment: this process's (what it counted
    // or holds itself), or the deployment's (read from the shared database: every coordinator answers the same).
    enum class Scope
    {
        Process,
        Deployment
    };
    // Replaces every sample of a gauge family (values computed from state when a scrape comes).
    void setGaugeFamily(QByteArrayView name, QByteArrayView help, std::vector<std::pair<Labels, double>> samples,
                        Scope scope = Scope::Process);
    // Among several coordinators: every series of this process's families (counters, histograms, live gauges and
    // the gauge families set as Scope::Process) carries the label `name="value"` first, so that scrapes through
    // one load balancer tell the processes apart. An empty value: no such label (a coordinator alone).
    void setProcessLabel(QByteArray name, QByteArray value);

    // Every family in registration order, each with its # HELP and # TYPE lines.
    QByteArray render() const;

    static bool isValidMetricName(QByteArrayView name);
    static bool isValidLabelName(QByteArrayView name);

private:
    enum class Type
    {
        Counter,
        Gauge,
        Histogram
    };
    struct Series;
    struct Family;
    Family& family(QByteArrayView name, QByteArrayView help, Type type);
    Series& series(Family& family, const Labels& labels);

    mutable std::mutex m_mutex;
    std::pair<QByteArray, QByteArray> m_processLabel;
    std::vector<std::unique_ptr<Family>> m_families; // registration order
    std::map<QByteArray, Family*> m_byName;
};

// Text-format helpers, public for their tests.
QByteArray formatValue(double value);              // shortest round-trip form; NaN, +Inf, -Inf
QByteArray escapeLabelValue(QByteArrayView value); // \\ \" \n
QByteArray escapeHelp(QByteArrayView help);        // \\ \n

} // namespace gleaner::coordinator::metrics
