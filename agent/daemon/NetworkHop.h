#pragma once
// The daemon's one network thread: coordinator calls and hashing run there in order (one kept-alive
// connection), and each result comes back to the event loop as a queued call, so the loop never blocks.
// Shared by the owners that talk to the coordinator. A queued call may never run (the daemon stopped first):
// what must not be lost is kept by the work itself, not by its answer.

#include "util/SerialExecutor.h"

#include <QMetaObject>
#include <QObject>

#include <functional>
#include <utility>

namespace gleaner::agent {

class NetworkHop
{
public:
    // `loop`: the object whose thread gets the answers; they are dropped once it is gone.
    explicit NetworkHop(QObject* loop) : m_loop(loop) {}

    // Runs `work` on the network thread and `then` with its result back on the loop.
    template <typename Work, typename Then> void run(Work work, Then then)
    {
        QObject* loop = m_loop;
        m_executor.post([loop, work = std::move(work), then = std::move(then)]() mutable {
            auto result = work();
            QMetaObject::invokeMethod(
                loop,
                [then = std::move(then), result = std::move(result)]() mutable { then(std::move(result)); },
                Qt::QueuedConnection);
        });
    }
    // Runs `task` on the network thread, after what was posted before it; nothing comes back.
    void post(std::function<void()> task) { m_executor.post(std::move(task)); }
    // Runs what is queued (the stop signal cuts waits and transfers short), then ends the thread; before
    // whatever the tasks use goes away.
    void stop() { m_executor.stop(); }

private:
    QObject* m_loop;
    SerialExecutor m_executor;
};

} // namespace gleaner::agent
