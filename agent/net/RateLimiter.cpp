#include "RateLimiter.h"

#include <QThread>

namespace gleaner::agent {

RateLimiter::RateLimiter(qint64 bytesPerSecond) : m_rate(qMax<qint64>(0, bytesPerSecond)) {}

qint64 RateLimiter::stepBytes(qint64 room) const
{
    if (!active())
        return room;
    // A tenth of a second's worth, at least 1 KiB.
    return qBound<qint64>(1, qMax<qint64>(1024, m_rate / 10), room);
}

void RateLimiter::account(qint64 bytes)
{
    if (!active())
        return;
    if (!m_clock.isValid())
        m_clock.start();
    m_moved += bytes;
    const qint64 dueMs = m_moved * 1000 / m_rate;
    const qint64 aheadMs = dueMs - m_clock.elapsed();
    if (aheadMs > 0)
        QThread::msleep(static_cast<unsigned long>(aheadMs));
}

} // namespace gleaner::agent
