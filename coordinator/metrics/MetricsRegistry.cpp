#include "metrics/MetricsRegistry.h"

#include <QString>
#include <QtGlobal>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <variant>

namespace gleaner::coordinator::metrics {

// ---- Histogram
// ----------------------------------------------------------------------------------------------

Histogram::Histogram(std::vector<double> upperBounds)
    : m_bounds(std::move(upperBounds)), m_buckets(new std::atomic<quint64>[m_bounds.size() + 1])
{
    for (size_t i = 0; i <= m_bounds.size(); ++i)
        m_buckets[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) noexcept
{
    // Prometheus buckets are "less than or equal": the first bound >= value takes it.
    const auto it = std::lower_bound(m_bounds.begin(), m_bounds.end(), value);
    m_buckets[size_t(it - m_bounds.begin())].fetch_add(1, std::memory_order_relaxed);
    m_sum.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const
{
    Snapshot snapshot;
    snapshot.cumulative.reserve(m_bounds.size() + 1);
    quint64 running = 0;
    for (size_t i = 0; i <= m_bounds.size(); ++i) {
        running += m_buckets[i].load(std::memory_order_relaxed);
        snapshot.cumulative.push_back(running);
    }
    snapshot.count = running;
    snapshot.sum = m_sum.load(std::memory_order_relaxed);
    return snapshot;
}

std::vector<double> latencyBuckets()
{
    return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

// ---- text format
// --------------------------------------------------------------------------------------------

QByteArray formatValue(double value)
{
    if (std::isnan(value))
        return QByteArrayLiteral("NaN");
    if (std::isinf(value))
        return value > 0 ? QByteArrayLiteral("+Inf") : QByteArrayLiteral("-Inf");
    char buffer[64];
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    return ec == std::errc() ? QByteArray(buffer, end - buffer) : QByteArrayLiteral("NaN");
}

QByteArray escapeLabelValue(QByteArrayView value)
{
    QByteArray out;
    out.reserve(value.size());
    for (const char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

QByteArray escapeHelp(QByteArrayView help)
{
    QByteArray out;
    out.reserve(help.size());
    for (const char c : help) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

namespace {

bool isNameChar(char c, bool first, bool colonAllowed)
{
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colonAllowed && c == ':');
    return letter || (!first && c >= '0' && c <= '9');
}

// {a="x",b="y"} with `extra` (the histogram's le) last; empty when there is nothing to write.
QByteArray labelText(const Labels& labels, const std::pair<QByteArray, QByteArray>* leading,
                     const std::pair<QByteArray, QByteArray>* extra = nullptr)
{
    if (labels.empty() && !leading && !extra)
        return {};
    QByteArray out = "{";
    bool first = true;
    const auto append = [&](const std::pair<QByteArray, QByteArray>& label) {
        if (!first)
            out += ',';
        first = false;
        out += label.first + "=\"" + escapeLabelValue(label.second) + '"';
    };
    if (leading)
        append(*leading);
    for (const auto& label : labels)
        append(label);
    if (extra)
        append(*extra);
    out += '}';
    return out;
}

} // namespace

bool MetricsRegistry::isValidMetricName(QByteArrayView name)
{
    if (name.isEmpty())
        return false;
    for (qsizetype i = 0; i < name.size(); ++i)
        if (!isNameChar(name[i], i == 0, true))
            return false;
    return true;
}

bool MetricsRegistry::isValidLabelName(QByteArrayView name)
{
    if (name.isEmpty() || name.startsWith("__") || name == "le")
        return false;
    for (qsizetype i = 0; i < name.size(); ++i)
        if (!isNameChar(name[i], i == 0, false))
            return false;
    return true;
}

// ---- registry
// -----------------------------------------------------------------------------------------------

struct MetricsRegistry::Series
{
    Labels labels;
    std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>> metric;
};

struct MetricsRegistry::Family
{
    QByteArray name;
    QByteArray help;
    Type type = Type::Counter;
    std::vector<double> bounds; // histograms
    std::vector<std::unique_ptr<Series>> series;
    bool replaced = false; // a setGaugeFamily() family: plain samples, no live Gauge objects
    MetricsRegistry::Scope scope = MetricsRegistry::Scope::Process;
    std::vector<std::pair<Labels, double>> samples;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Family& MetricsRegistry::family(QByteArrayView name, QByteArrayView help, Type type)
{
    const QByteArray key = name.toByteArray();
    if (!isValidMetricName(name))
        qFatal("metrics: \"%s\" is not a valid Prometheus metric name", key.constData());
    if (auto it = m_byName.find(key); it != m_byName.end()) {
        if (it->second->type != type)
            qFatal("metrics: \"%s\" is registered twice with different types", key.constData());
        return *it->second;
    }
    auto created = std::make_unique<Family>();
    created->name = key;
    created->help = help.toByteArray();
    created->type = type;
    Family& ref = *created;
    m_byName.emplace(key, created.get());
    m_families.push_back(std::move(created));
    return ref;
}

MetricsRegistry::Series& MetricsRegistry::series(Family& family, const Labels& labels)
{
    for (const auto& label : labels)
        if (!isValidLabelName(label.first))
            qFatal("metrics: \"%s\" is not a valid label name (metric %s)", label.first.constData(),
                   family.name.constData());
    for (const auto& existing : family.series)
        if (existing->labels == labels)
            return *existing;
    family.series.push_back(std::make_unique<Series>());
    Series& created = *family.series.back();
    created.labels = labels;
    return created;
}

Counter& MetricsRegistry::counter(QByteArrayView name, QByteArrayView help, const Labels& labels)
{
    std::lock_guard lock(m_mutex);
    Series& s = series(family(name, help, Type::Counter), labels);
    if (!std::holds_alternative<std::unique_ptr<Counter>>(s.metric) || !std::get<0>(s.metric))
        s.metric = std::make_unique<Counter>();
    return *std::get<std::unique_ptr<Counter>>(s.metric);
}

Gauge& MetricsRegistry::gauge(QByteArrayView name, QByteArrayView help, const Labels& labels)
{
    std::lock_guard lock(m_mutex);
    Family& f = family(name, help, Type::Gauge);
    if (f.replaced)
        qFatal("metrics: \"%s\" is a gauge family set wholesale; it has no live gauges", f.name.constData());
    Series& s = series(f, labels);
    if (!std::holds_alternative<std::unique_ptr<Gauge>>(s.metric))
        s.metric = std::make_unique<Gauge>();
    return *std::get<std::unique_ptr<Gauge>>(s.metric);
}

Histogram& MetricsRegistry::histogram(QByteArrayView name, QByteArrayView help,
                                      const std::vector<double>& upperBounds, const Labels& labels)
{
    std::lock_guard lock(m_mutex);
    for (size_t i = 0; i < upperBounds.size(); ++i)
        if (!std::isfinite(upperBounds[i]) || (i > 0 && upperBounds[i] <= upperBounds[i - 1]))
            qFatal("metrics: the buckets of \"%s\" must be finite and strictly increasing",
                   name.toByteArray().constData());
    Family& f = family(name, help, Type::Histogram);
    if (f.series.empty())
        f.bounds = upperBounds;
    else if (f.bounds != upperBounds)
        qFatal("metrics: \"%s\" is registered with two sets of buckets", f.name.constData());
    Series& s = series(f, labels);
    if (!std::holds_alternative<std::unique_ptr<Histogram>>(s.metric))
        s.metric = std::make_unique<Histogram>(upperBounds);
    return *std::get<std::unique_ptr<Histogram>>(s.metric);
}

void MetricsRegistry::setProcessLabel(QByteArray name, QByteArray value)
{
    if (!value.isEmpty() && !isValidLabelName(name))
        qFatal("metrics: \"%s\" is not a valid label name", name.constData());
    std::lock_guard lock(m_mutex);
    m_processLabel = {std::move(name), std::move(value)};
}

void MetricsRegistry::setGaugeFamily(QByteArrayView name, QByteArrayView help,
                                     std::vector<std::pair<Labels, double>> samples, Scope scope)
{
    std::lock_guard lock(m_mutex);
    Family& f = family(name, help, Type::Gauge);
    if (!f.series.empty())
        qFatal("metrics: \"%s\" has live gauges; it cannot be set wholesale", f.name.constData());
    for (const auto& [labels, value] : samples)
        for (const auto& label : labels)
            if (!isValidLabelName(label.first))
                qFatal("metrics: \"%s\" is not a valid label name (metric %s)", label.first.constData(),
                       f.name.constData());
    f.replaced = true;
    f.scope = scope;
    f.samples = std::move(samples);
}

QByteArray MetricsRegistry::render() const
{
    std::lock_guard lock(m_mutex);
    QByteArray out;
    out.reserve(16 * 1024);
    for (const auto& f : m_families) {
        if (f->series.empty() && f->samples.empty())
            continue; // a family without samples says nothing; promtool would flag its HELP as dangling
        out += "# HELP " + f->name + ' ' + escapeHelp(f->help) + '\n';
        out += "# TYPE " + f->name + ' ' +
               (f->type == Type::Counter ? "counter"
                : f->type == Type::Gauge ? "gauge"
                                         : "histogram") +
               '\n';
        const auto* process =
            m_processLabel.second.isEmpty() || f->scope == Scope::Deployment ? nullptr : &m_processLabel;
        for (const auto& [labels, value] : f->samples)
            out += f->name + labelText(labels, process) + ' ' + formatValue(value) + '\n';
        for (const auto& s : f->series) {
            if (const auto* counter = std::get_if<std::unique_ptr<Counter>>(&s->metric)) {
                out += f->name + labelText(s->labels, process) + ' ' + QByteArray::number((*counter)->value()) + '\n';
            } else if (const auto* gauge = std::get_if<std::unique_ptr<Gauge>>(&s->metric)) {
                out += f->name + labelText(s->labels, process) + ' ' + formatValue((*gauge)->value()) + '\n';
            } else if (const auto* histogram = std::get_if<std::unique_ptr<Histogram>>(&s->metric)) {
                const Histogram::Snapshot snap = (*histogram)->snapshot();
                const auto& bounds = (*histogram)->upperBounds();
                for (size_t i = 0; i <= bounds.size(); ++i) {
                    const std::pair<QByteArray, QByteArray> le{
                        "le", i < bounds.size() ? formatValue(bounds[i]) : QByteArray("+Inf")};
                    out += f->name + "_bucket" + labelText(s->labels, process, &le) + ' ' +
                           QByteArray::number(snap.cumulative[i]) + '\n';
                }
                out += f->name + "_sum" + labelText(s->labels, process) + ' ' + formatValue(snap.sum) + '\n';
                out +=
                    f->name + "_count" + labelText(s->labels, process) + ' ' + QByteArray::number(snap.count) + '\n';
            }
        }
    }
    return out;
}

} // namespace gleaner::coordinator::metrics
