#pragma once
// Time is injected wherever a decision depends on it (lease deadlines, backoff, idle policy), so tests move a
// ManualClock instead of sleeping. Milliseconds since the Unix epoch, wall-clock.

#include <QDateTime>

#include <atomic>

namespace gleaner {

class Clock
{
public:
    virtual ~Clock() = default;
    virtual qint64 nowMs() const = 0;
};

class SystemClock final : public Clock
{
public:
    qint64 nowMs() const override { return QDateTime::currentMSecsSinceEpoch(); }
};

// For tests: time stands still until advanced.
class ManualClock final : public Clock
{
public:
    explicit ManualClock(qint64 startMs = 1'700'000'000'000) : m_now(startMs) {}
    qint64 nowMs() const override { return m_now.load(); }
    void advance(qint64 ms) { m_now += ms; }
    void set(qint64 ms) { m_now = ms; }

private:
    std::atomic<qint64> m_now;
};

} // namespace gleaner
