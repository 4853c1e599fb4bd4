#include "metrics/CoordinatorMetrics.h"

#include <QList>

namespace gleaner::coordinator::metrics {

namespace {

const char* const kRouteNames[] = {"info",  "enroll", "lease",   "progress", "result",    "fail", "handback",
                                   "files", "admin",  "events",  "metrics",  "dashboard", "other"};
static_assert(std::size(kRouteNames) == size_t(Route::Count));

const char* const kReasonNames[] = {"malformed", "unauthorized", "revoked", "unknown_lease", "conflict",
                                    "too_large", "invalid",      "error",   "other"};
static_assert(std::size(kReasonNames) == size_t(RefusalReason::Count));

constexpr const char* kRequestsHelp = "HTTP requests answered, by route and status code.";
constexpr const char* kDurationHelp = "Time from the first byte of a request to the last byte of its answer, "
                                      "by route (live event streams excluded).";

// Every reason is present from the start, at 0, so a rate() over it is defined before the first refusal.
std::array<Counter*, size_t(RefusalReason::Count)> registerRefusals(MetricsRegistry& registry)
{
    std::array<Counter*, size_t(RefusalReason::Count)> counters{};
    for (size_t i = 0; i < counters.size(); ++i)
        counters[i] = &registry.counter("gleaner_updates_refused_total",
                                        "Result uploads refused, by reason (from the answer's status code).",
                                        {{"reason", kReasonNames[i]}});
    return counters;
}

} // namespace

Route classifyRoute(const RequestHead& head)
{
    QList<QByteArray> parts = head.path().split('/');
    parts.removeAll(QByteArray());
    if (parts.isEmpty())
        return Route::Dashboard;
    if (parts.size() == 1 && parts[0] == "metrics")
        return Route::Metrics;
    if (parts[0] == "assets" || (parts.size() == 1 && parts[0] == "index.html"))
        return Route::Dashboard;
    if (parts.size() < 3 || parts[0] != "api" || parts[1] != "v1")
        return Route::Other;
    const QByteArray& area = parts[2];
    if (area == "info")
        return Route::Info;
    if (area == "agents")
        return Route::Enroll;
    if (area == "files")
        return Route::Files;
    if (area == "admin")
        return parts.value(3) == "events" ? Route::Events : Route::Admin;
    if (area == "work") {
        if (parts.size() == 4 && parts[3] == "lease")
            return Route::Lease;
        const QByteArray action = parts.size() == 5 ? parts[4] : QByteArray();
        if (action == "progress")
            return Route::Progress;
        if (action == "result")
            return Route::Result;
        if (action == "fail")
            return Route::Fail;
        if (action == "handback")
            return Route::HandBack;
    }
    return Route::Other;
}

const char* routeName(Route route)
{
    return route < Route::Count ? kRouteNames[size_t(route)] : "other";
}

RefusalReason refusalReason(int status)
{
    switch (status) {
    case 400:
    case 405:
        return RefusalReason::Malformed;
    case 401:
        return RefusalReason::Unauthorized;
    case 403:
        return RefusalReason::Revoked;
    case 404:
        return RefusalReason::UnknownLease;
    case 409:
        return RefusalReason::Conflict;
    case 413:
        return RefusalReason::TooLarge;
    case 422:
        return RefusalReason::Invalid;
    default:
        return status >= 500 ? RefusalReason::Error : RefusalReason::Other;
    }
}

const char* refusalReasonName(RefusalReason reason)
{
    return reason < RefusalReason::Count ? kReasonNames[size_t(reason)] : "other";
}

template <typename Make> std::array<Counter*, UploadSpec::kEncodings> perEncoding(Make make)
{
    std::array<Counter*, UploadSpec::kEncodings> counters{};
    for (int i = 0; i < UploadSpec::kEncodings; ++i)
        counters[size_t(i)] = &make(UploadSpec::encodingNames().at(i).toLatin1());
    return counters;
}

CoordinatorMetrics::CoordinatorMetrics()
    : m_updatesAccepted(
          m_registry.counter("gleaner_updates_accepted_total",
                             "Result uploads accepted (answered 202) and queued for aggregation.")),
      m_updatesNotFolded(m_registry.counter(
          "gleaner_updates_not_folded_total",
          "Accepted updates the aggregation refused to fold in: the blended weights were not "
          "finite or moved further than the job's bound.")),
      m_updatesRefused(registerRefusals(m_registry)),
      m_leasesIssued(m_registry.counter("gleaner_leases_issued_total", "Leases handed to agents.")),
      m_leasesExpired(m_registry.counter("gleaner_leases_expired_total",
                                         "Leases whose deadline passed before their result arrived.")),
      m_leasesFailed(m_registry.counter("gleaner_leases_failed_total",
                                        "Leases an agent gave back because it could not run the subtask.")),
      m_leasesHandedBack(
          m_registry.counter("gleaner_leases_handed_back_total",
                             "Leases an agent handed back when it left (with or without a checkpoint).")),
      m_bytesIn(m_registry.counter("gleaner_http_received_bytes_total", "Request body bytes received.")),
      m_bytesOut(m_registry.counter("gleaner_http_sent_bytes_total", "Response body bytes sent.")),
      m_resultBytes(perEncoding([this](const QByteArray& encoding) -> Counter& {
          return m_registry.counter("gleaner_result_bytes_total",
                                    "Body bytes of accepted result uploads, by the upload's encoding.",
                                    {{"encoding", encoding}});
      })),
      m_resultsByEncoding(perEncoding([this](const QByteArray& encoding) -> Counter& {
          return m_registry.counter("gleaner_results_total", "Accepted result uploads, by the upload's encoding.",
                                    {{"encoding", encoding}});
      })),
      m_assimilation(m_registry.histogram(
          "gleaner_assimilation_seconds",
          "Time from an update being recorded (202) until it is folded into the server weights.",
          latencyBuckets())),
      m_eventClientsDropped(
          m_registry.counter("gleaner_dashboard_clients_dropped_total",
                             "Live-event clients disconnected because they did not keep up.")),
      m_sharedFoldsRedone(m_registry.counter(
          "gleaner_shared_folds_redone_total",
          "Folds into the weights in Redis done again because another coordinator's fold committed first.")),
      m_updatesWaitingForRedis(m_registry.gauge(
          "gleaner_updates_waiting_for_redis",
          "Accepted updates kept until Redis answers again; folded then, in order (0 without Redis).")),
      m_foldBacklogUpdates(m_registry.gauge(
          "gleaner_fold_backlog_updates",
          "Updates this coordinator accepted that are not folded into the server weights yet.")),
      m_foldBacklogBytes(m_registry.gauge(
          "gleaner_fold_backlog_bytes",
          "Bytes of weights the updates not folded yet hold in memory (bounded by config fold_backlog_mb).")),
      m_leasesHeldBack(m_registry.counter("gleaner_leases_held_back_total",
                                          "Lease requests answered without work because the updates not "
                                          "folded yet exceeded fold_backlog_mb."))
{
}

Counter& CoordinatorMetrics::requestCounter(Route route, int status)
{
    const int slot = qBound(0, status - kFirstStatus, kStatuses - 1);
    std::atomic<Counter*>& cached = m_requests[size_t(route)][size_t(slot)];
    if (Counter* counter = cached.load(std::memory_order_acquire))
        return *counter;
    // First request of this kind: register under the registry's lock (the registry returns the same series if
    // two threads race here).
    Counter& counter =
        m_registry.counter("gleaner_http_requests_total", kRequestsHelp,
                           {{"route", routeName(route)}, {"code", QByteArray::number(slot + kFirstStatus)}});
    cached.store(&counter, std::memory_order_release);
    return counter;
}

Histogram& CoordinatorMetrics::durationHistogram(Route route)
{
    std::atomic<Histogram*>& cached = m_durations[size_t(route)];
    if (Histogram* histogram = cached.load(std::memory_order_acquire))
        return *histogram;
    Histogram& histogram = m_registry.histogram("gleaner_http_request_duration_seconds", kDurationHelp,
                                                latencyBuckets(), {{"route", routeName(route)}});
    cached.store(&histogram, std::memory_order_release);
    return histogram;
}

void CoordinatorMetrics::observeRequest(const RequestHead& head, const RequestOutcome& outcome)
{
    const Route route = classifyRoute(head);
    requestCounter(route, outcome.status).inc();
    // A live event stream lasts as long as the page stays open: its duration is not a latency.
    if (route != Route::Events)
        durationHistogram(route).observe(outcome.seconds);
    m_bytesIn.inc(quint64(qMax<qint64>(0, outcome.bytesIn)));
    m_bytesOut.inc(outcome.bytesOut);
    if (route == Route::Result && outcome.status != 202)
        m_updatesRefused[size_t(refusalReason(outcome.status))]->inc();
    if (route == Route::Fail && outcome.status == 200)
        m_leasesFailed.inc();
    if (route == Route::HandBack && outcome.status == 200)
        m_leasesHandedBack.inc();
}

void CoordinatorMetrics::fileSent(QByteArrayView role, quint64 bytes)
{
    // Roles are the manifest's few fixed names; the registry returns the same series for the same labels.
    m_registry.counter("gleaner_file_sent_bytes_total", "File bytes sent to agents, by the file's role.",
                       {{"role", role.toByteArray()}})
        .inc(bytes);
}

quint64 CoordinatorMetrics::updatesRefused(RefusalReason reason) const
{
    return reason < RefusalReason::Count ? m_updatesRefused[size_t(reason)]->value() : 0;
}

quint64 CoordinatorMetrics::requests(Route route, int status) const
{
    const int slot = qBound(0, status - kFirstStatus, kStatuses - 1);
    const Counter* counter = m_requests[size_t(route)][size_t(slot)].load(std::memory_order_acquire);
    return counter ? counter->value() : 0;
}

} // namespace gleaner::coordinator::metrics
