#pragma once
// A token bucket per client (RequestHead::remoteKey: an IPv4 address or an IPv6 /64) for requests that cost the
// coordinator more than they cost the client, such as enrollment (a database row and a signed token each).
// Decided on the HTTP thread from the request head, so a flood is answered 429 without reaching the state
// thread. Time comes from the injected Clock, so tests move a ManualClock instead of sleeping.

#include "util/Clock.h"

#include <QHash>
#include <QString>

#include <mutex>

namespace gleaner::coordinator {

class ClientRateLimit
{
public:
    struct Policy
    {
        int perMinute = 10; // the refill rate
        int burst = 10;     // the bucket's size: what a client may send at once after a quiet spell
        // Clients tracked at once. Beyond it (a flood from many addresses), buckets that refilled are forgotten;
        // when none did, new clients are refused until some do, so memory stays bounded.
        int maxClients = 100'000;
    };

    struct Decision
    {
        bool allowed = true;
        qint64 retryAfterSeconds = 0; // when refused: the wait until one request would be allowed
        bool tooManyClients = false;  // refused because maxClients are tracked, not for this client's rate
    };

    ClientRateLimit(Policy policy, const Clock& clock);

    const Policy& policy() const { return m_policy; }

    // Thread-safe. Takes one request from `client`'s bucket if it holds one.
    Decision take(const QString& client);

private:
    // Tokens are counted in units of 1/60000 of a request, so a bucket refills by perMinute units per
    // millisecond and all arithmetic stays in integers.
    static constexpr qint64 kUnitsPerRequest = 60'000;
    struct Bucket
    {
        qint64 units = 0;
        qint64 updatedMs = 0;
    };
    qint64 capacity() const { return qint64(m_policy.burst) * kUnitsPerRequest; }
    qint64 refilled(const Bucket& bucket, qint64 nowMs) const;
    void forgetRefilled(qint64 nowMs);

    const Policy m_policy;
    const Clock& m_clock;
    std::mutex m_mutex;
    QHash<QString, Bucket> m_buckets;
    qint64 m_lastSweepMs = 0;
};

} // namespace gleaner::coordinator
