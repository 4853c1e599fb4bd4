#pragma once
// The coordinator's metrics (docs/dashboard.md lists them): counters and histograms updated where things
// happen, from any thread, with atomics only; gauges derived from the coordinator's state are set by the
// state thread when a scrape arrives (JobViews::metricsText).

#include "http/HttpTypes.h"
#include "metrics/MetricsRegistry.h"
#include "spec/UploadSpec.h"

#include <array>
#include <atomic>

namespace gleaner::coordinator::metrics {

// What an HTTP request was for, as a small fixed set of label values (never the raw path: lease ids and
// hashes would make a new series per request).
enum class Route
{
    Info,
    Enroll,
    Lease,
    Progress,
    Result,
    Fail,
    HandBack,
    Files,
    Admin,
    Events,
    Metrics,
    Dashboard,
    Other,
    Count
};
Route classifyRoute(const RequestHead& head);
const char* routeName(Route route);

// Why a result upload was refused, from its answer's status.
enum class RefusalReason
{
    Malformed,
    Unauthorized,
    Revoked,
    UnknownLease,
    Conflict,
    TooLarge,
    Invalid,
    Error,
    Other,
    Count
};
RefusalReason refusalReason(int status);
const char* refusalReasonName(RefusalReason reason);

class CoordinatorMetrics
{
public:
    CoordinatorMetrics();
    CoordinatorMetrics(const CoordinatorMetrics&) = delete;
    CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

    MetricsRegistry& registry() { return m_registry; }

    // Any thread (the HTTP server, once per answered request): request count, latency, bytes, and for result
    // uploads the refusals by reason.
    void observeRequest(const RequestHead& head, const RequestOutcome& outcome);

    // [state] An update was recorded (answered 202).
    void updateAccepted() { m_updatesAccepted.inc(); }
    // [state] The body of an accepted result, by its encoding.
    void resultUploaded(UploadSpec::Encoding encoding, qint64 bytes)
    {
        m_resultBytes[size_t(encoding)]->inc(quint64(qMax<qint64>(0, bytes)));
        m_resultsByEncoding[size_t(encoding)]->inc();
    }
    // Any thread: file bytes sent for a lease, by the file's role in the manifest.
    void fileSent(QByteArrayView role, quint64 bytes);
    // [state] An accepted update whose fold the weights thread refused (not finite, or too long a step).
    void updateNotFolded() { m_updatesNotFolded.inc(); }
    // [state]
    void leaseIssued() { m_leasesIssued.inc(); }
    void leaseExpired() { m_leasesExpired.inc(); }
    // [weights] From the moment an update was recorded until it is folded into the server weights.
    void updateAssimilated(double seconds) { m_assimilation.observe(seconds); }
    // [weights] With the weights in Redis: folds done again because another fold committed first, and the
    // accepted updates waiting for Redis to answer.
    void sharedFoldsRedone(quint64 count) { m_sharedFoldsRedone.inc(count); }
    void updatesWaitingForRedis(qsizetype count) { m_updatesWaitingForRedis.set(double(count)); }
    double updatesWaitingForRedis() const { return m_updatesWaitingForRedis.value(); }
    // [state] The updates received here and not folded yet, and the bytes they hold (WeightsKeeper::backlog),
    // as each tick sees them; a lease request held back while they are too many.
    void foldBacklog(qint64 updates, qint64 bytes)
    {
        m_foldBacklogUpdates.set(double(updates));
        m_foldBacklogBytes.set(double(bytes));
    }
    void leaseHeldBack() { m_leasesHeldBack.inc(); }
    quint64 leasesHeldBack() const { return m_leasesHeldBack.value(); }
    // Any thread: a live-event client went away because it did not keep up.
    void eventClientDropped() { m_eventClientsDropped.inc(); }

    quint64 updatesAccepted() const { return m_updatesAccepted.value(); }
    quint64 updatesRefused(RefusalReason reason) const;
    quint64 requests(Route route, int status) const;

private:
    Counter& requestCounter(Route route, int status);
    Histogram& durationHistogram(Route route);

    MetricsRegistry m_registry;
    Counter& m_updatesAccepted;
    Counter& m_updatesNotFolded;
    std::array<Counter*, size_t(RefusalReason::Count)> m_updatesRefused;
    Counter& m_leasesIssued;
    Counter& m_leasesExpired;
    Counter& m_leasesFailed;
    Counter& m_leasesHandedBack;
    Counter& m_bytesIn;
    Counter& m_bytesOut;
    std::array<Counter*, UploadSpec::kEncodings> m_resultBytes;       // by UploadSpec::Encoding
    std::array<Counter*, UploadSpec::kEncodings> m_resultsByEncoding; // by UploadSpec::Encoding
    Histogram& m_assimilation;
    Counter& m_eventClientsDropped;
    Counter& m_sharedFoldsRedone;
    Gauge& m_updatesWaitingForRedis;
    Gauge& m_foldBacklogUpdates;
    Gauge& m_foldBacklogBytes;
    Counter& m_leasesHeldBack;
    // Registered on first use, then read without the registry's lock.
    static constexpr int kFirstStatus = 100;
    static constexpr int kStatuses = 500; // 100 .. 599
    std::array<std::array<std::atomic<Counter*>, kStatuses>, size_t(Route::Count)> m_requests{};
    std::array<std::atomic<Histogram*>, size_t(Route::Count)> m_durations{};
};

} // namespace gleaner::coordinator::metrics
