#pragma once
// One thread that runs posted tasks in order. The coordinator keeps all of its state (the database connection,
// the scheduler, the job table) on one SerialExecutor, so none of it needs locks: HTTP threads post work to it
// and answer their client from the task. The agent runs its coordinator calls (one kept-alive connection) and
// its disk work (hashing, task folders) on two, so its event loop never blocks.

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace gleaner {

class SerialExecutor
{
public:
    SerialExecutor() : m_thread([this] { run(); }) {}
    ~SerialExecutor() { stop(); }
    SerialExecutor(const SerialExecutor&) = delete;
    SerialExecutor& operator=(const SerialExecutor&) = delete;

    // Queues `task`; false (and the task dropped) once stop() has begun.
    bool post(std::function<void()> task)
    {
        {
            std::lock_guard lock(m_mutex);
            if (m_stopping)
                return false;
            m_tasks.push_back(std::move(task));
        }
        m_wake.notify_one();
        return true;
    }

    // Runs `task` on the executor and waits for its result. From the executor's own thread, or after stop()
    // (when no other task can run any more), it runs `task` directly.
    template <typename F>
    auto call(F task) -> decltype(task())
    {
        using R = decltype(task());
        if (std::this_thread::get_id() == m_thread.get_id())
            return task();
        std::packaged_task<R()> packaged(std::move(task));
        auto future = packaged.get_future();
        if (!post([&packaged] { packaged(); })) {
            std::unique_lock lock(m_mutex); // a stop() in progress: let the queue finish first
            m_done.wait(lock, [this] { return m_finished; });
            lock.unlock();
            packaged();
        }
        return future.get();
    }

    bool isCurrentThread() const { return std::this_thread::get_id() == m_thread.get_id(); }

    // Runs what is queued, then ends the thread. Tasks posted afterwards are dropped.
    void stop()
    {
        {
            std::lock_guard lock(m_mutex);
            if (m_stopping)
                return;
            m_stopping = true;
        }
        m_wake.notify_one();
        if (m_thread.joinable())
            m_thread.join();
    }

private:
    void run()
    {
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [this] { return m_stopping || !m_tasks.empty(); });
                if (m_tasks.empty()) {
                    m_finished = true;
                    m_done.notify_all();
                    return;
                }
                task = std::move(m_tasks.front());
                m_tasks.pop_front();
            }
            task();
        }
    }

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::condition_variable m_done;
    bool m_finished = false;
    std::deque<std::function<void()>> m_tasks;
    bool m_stopping = false;
    std::thread m_thread; // last: starts after the members it uses exist
};

} // namespace gleaner
