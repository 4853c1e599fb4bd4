#pragma once
// Lets the network thread's waits (retry backoff) and transfers end at once when the daemon stops: a Sleeper
// for CoordinatorClient that returns false when stopped, and a flag the transfer progress callbacks read.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace gleaner::agent {

class StopSignal
{
public:
    // Waits `ms` or until stop(); false when stopped.
    bool sleep(qint64 ms)
    {
        std::unique_lock lock(m_mutex);
        return !m_changed.wait_for(lock, std::chrono::milliseconds(ms), [this] { return m_stopped.load(); });
    }
    void stop()
    {
        {
            std::lock_guard lock(m_mutex);
            m_stopped = true;
        }
        m_changed.notify_all();
    }
    bool stopped() const { return m_stopped.load(); }

private:
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::atomic<bool> m_stopped{false};
};

} // namespace gleaner::agent
