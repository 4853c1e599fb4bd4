#pragma once
// When the agent tries a coordinator request again, and how long it waits first. Exponential backoff with full
// jitter (a random wait between 0 and base × 2^(n-1), capped): when a coordinator comes back after an outage, its
// thousands of agents do not all knock in the same second. A wait the server asked for (retry_after) is a floor.
//
// Which failures are retried: network errors, timeouts, 5xx, 408 and 429. Final: TLS failures (a wrong pinned
// certificate does not fix itself), cancellation, local file errors, and every other 4xx (the request itself is
// wrong, or the lease is gone). Randomness and time are injected so tests are exact and never sleep.

#include "Transport.h"

#include "util/Clock.h"

#include <QtGlobal>

#include <functional>

namespace gleaner::agent {

struct RetryOptions
{
    int maxAttempts = 8;          // tries in all, the first included; 0 = no limit (until maxElapsedMs)
    qint64 baseDelayMs = 1'000;   // the first retry waits up to this
    qint64 maxDelayMs = 300'000;  // no computed wait is longer (5 min)
    qint64 maxElapsedMs = 0;      // give up once this much time passed since the first try; 0 = no limit
    qint64 maxRetryAfterMs = 3'600'000; // a server's retry_after above this is taken as this (a bogus hint)
};

// Waits `ms` milliseconds; returns false when the wait was interrupted (the agent is stopping): the caller then
// gives up at once. Tests pass one that advances a ManualClock.
using Sleeper = std::function<bool(qint64 ms)>;

// A uniform random number in [0, 1).
using RandomSource = std::function<double()>;

class RetryPolicy
{
public:
    explicit RetryPolicy(RetryOptions options = {}, RandomSource random = {});

    const RetryOptions& options() const { return m_options; }

    static bool isRetryableStatus(int status);
    // A transport failure, or an answer with a retryable status.
    static bool isRetryable(const TransportResponse& response);

    // The wait before retry number `retry` (1 = the first retry, after the first failed try). `retryAfterMs`:
    // the server's hint, < 0 when it gave none.
    qint64 delayMs(int retry, qint64 retryAfterMs = -1) const;

    // Whether another try may follow `attemptsMade` tries that started at `startedMs`, given the wait before it.
    bool mayRetry(int attemptsMade, qint64 startedMs, qint64 nowMs, qint64 waitMs) const;

    // The Retry-After header in seconds (the HTTP-date form is not used by the coordinator), in ms; -1 if absent.
    static qint64 retryAfterHeaderMs(const TransportResponse& response);

    // The real sleeper: blocks the calling thread.
    static Sleeper threadSleeper();

private:
    RetryOptions m_options;
    RandomSource m_random;
};

} // namespace gleaner::agent
