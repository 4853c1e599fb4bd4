#include "api/ClientRateLimit.h"

#include <algorithm>

namespace gleaner::coordinator {

ClientRateLimit::ClientRateLimit(Policy policy, const Clock& clock)
    : m_policy{std::max(1, policy.perMinute), std::max(1, policy.burst), std::max(1, policy.maxClients)},
      m_clock(clock)
{
}

qint64 ClientRateLimit::refilled(const Bucket& bucket, qint64 nowMs) const
{
    // A clock that steps back refills nothing, rather than emptying buckets.
    const qint64 elapsed = std::max<qint64>(0, nowMs - bucket.updatedMs);
    const qint64 room = capacity() - bucket.units;
    if (elapsed >= room / m_policy.perMinute + 1)
        return capacity();
    return bucket.units + elapsed * m_policy.perMinute;
}

void ClientRateLimit::forgetRefilled(qint64 nowMs)
{
    // A full bucket is what a client without one gets: forgetting it changes no decision.
    for (auto it = m_buckets.begin(); it != m_buckets.end();) {
        if (refilled(it.value(), nowMs) >= capacity())
            it = m_buckets.erase(it);
        else
            ++it;
    }
    m_lastSweepMs = nowMs;
}

ClientRateLimit::Decision ClientRateLimit::take(const QString& client)
{
    const qint64 now = m_clock.nowMs();
    std::lock_guard lock(m_mutex);
    auto found = m_buckets.find(client);
    if (found == m_buckets.end()) {
        // At most one sweep a second: under a flood from many addresses, each sweep walks every bucket.
        if (m_buckets.size() >= m_policy.maxClients && now - m_lastSweepMs >= 1000)
            forgetRefilled(now);
        if (m_buckets.size() >= m_policy.maxClients)
            return Decision{false, 60, true};
        found = m_buckets.insert(client, Bucket{capacity(), now});
    }
    Bucket& bucket = found.value();
    bucket.units = refilled(bucket, now);
    bucket.updatedMs = now;
    if (bucket.units >= kUnitsPerRequest) {
        bucket.units -= kUnitsPerRequest;
        return Decision{};
    }
    const qint64 missingUnits = kUnitsPerRequest - bucket.units;
    const qint64 waitMs = (missingUnits + m_policy.perMinute - 1) / m_policy.perMinute;
    return Decision{false, std::max<qint64>(1, (waitMs + 999) / 1000), false};
}

} // namespace gleaner::coordinator
