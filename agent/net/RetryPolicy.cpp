#include "RetryPolicy.h"

#include <QRandomGenerator>
#include <QThread>

#include <algorithm>

namespace gleaner::agent {

RetryPolicy::RetryPolicy(RetryOptions options, RandomSource random)
    : m_options(options), m_random(std::move(random))
{
    if (!m_random)
        m_random = [] { return QRandomGenerator::global()->generateDouble(); };
}

bool RetryPolicy::isRetryableStatus(int status)
{
    // 408: the server timed the request out; 429: too many requests; 5xx: the coordinator failed (database,
    // disk, its own timeout) and did not record anything.
    return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

bool RetryPolicy::isRetryable(const TransportResponse& response)
{
    using Failure = TransportResponse::Failure;
    switch (response.failure) {
    case Failure::None:
        return isRetryableStatus(response.status);
    case Failure::Connect:
    case Failure::Timeout:
    case Failure::Network:
        return true;
    case Failure::Tls:
    case Failure::Cancelled:
    case Failure::LocalFile:
    case Failure::Protocol:
    case Failure::Oversized:
        return false;
    }
    return false;
}

qint64 RetryPolicy::delayMs(int retry, qint64 retryAfterMs) const
{
    // base × 2^(retry-1), computed without overflow: the shift stops growing once the cap is reached.
    qint64 ceiling = std::max<qint64>(0, m_options.baseDelayMs);
    for (int i = 1; i < retry && ceiling < m_options.maxDelayMs; ++i)
        ceiling *= 2;
    ceiling = std::min(ceiling, m_options.maxDelayMs);
    const double r = std::clamp(m_random(), 0.0, 1.0);
    const qint64 jittered = qint64(r * double(ceiling));
    if (retryAfterMs < 0)
        return jittered;
    return std::max(std::min(retryAfterMs, m_options.maxRetryAfterMs), jittered);
}

bool RetryPolicy::mayRetry(int attemptsMade, qint64 startedMs, qint64 nowMs, qint64 waitMs) const
{
    if (m_options.maxAttempts > 0 && attemptsMade >= m_options.maxAttempts)
        return false;
    if (m_options.maxElapsedMs > 0 && nowMs + waitMs - startedMs > m_options.maxElapsedMs)
        return false;
    return true;
}

qint64 RetryPolicy::retryAfterHeaderMs(const TransportResponse& response)
{
    bool ok = false;
    const qint64 seconds = response.header("Retry-After").trimmed().toLongLong(&ok);
    return ok && seconds >= 0 ? seconds * 1000 : -1;
}

Sleeper RetryPolicy::threadSleeper()
{
    return [](qint64 ms) {
        QThread::msleep(static_cast<unsigned long>(std::max<qint64>(0, ms)));
        return true;
    };
}

} // namespace gleaner::agent
