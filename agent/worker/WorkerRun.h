#pragma once
// What gleaner-worker does, as a library so tests can drive it in-process: train the subtask of a task folder
// (resuming from its checkpoint when there is one), obey pause / resume / checkpoint / stop / cancel between
// mini-batches, hold the CPU-time share by sleeping in proportion after each mini-batch, and report JSON events.
//
// Events (one JSON object per line on the worker's stdout; docs/worker-protocol.md):
//   {"event": "started", "step": S, "of": N, "resumed": bool, "problems": [...]}
//   {"event": "progress", "step", "of", "epoch", "loss", "samples_per_s", "seconds"}
//   {"event": "checkpoint", "step", "path"}
//   {"event": "paused", "step"}            {"event": "resumed", "step"}
//   {"event": "done", "result", "samples", "loss", "train_seconds"}
//   {"event": "stopped", "step", "checkpoint"}   {"event": "cancelled", "step"}
//   {"event": "error", "message"}
// Commands (one word per line on stdin): pause, resume, checkpoint, stop (checkpoint and exit), cancel (exit
// without a checkpoint). End of input counts as stop: the agent is gone, the work is kept for the next one.

#include <QJsonObject>
#include <QString>

#include <condition_variable>
#include <functional>
#include <mutex>

namespace gleaner::agent {

struct WorkerOptions
{
    QString taskDir;
    int threads = 0;                         // 0: libtorch's default
    double cpuShare = 1.0;                   // (0, 1]: fraction of wall time spent computing
    double checkpointIntervalSeconds = 60.0; // 0: only on request
    QString device = QStringLiteral("cpu");
    int progressIntervalMs = 500;
};

enum WorkerExit {
    WorkerDone = 0,
    WorkerFailed = 1,
    WorkerUsage = 2,
    WorkerStopped = 3,   // checkpointed, to be resumed
    WorkerCancelled = 4, // nothing kept
};

// Commands from the agent; thread-safe (the stdin reader calls in while training runs).
class WorkerControl
{
public:
    enum class Command { None, Checkpoint, Stop, Cancel };

    void pause();
    void resume();
    void requestCheckpoint();
    void stop();
    void cancel();
    // Applies a command line ("pause", ...); false for an unknown word.
    bool apply(const QString& line);

    bool paused() const;
    // Blocks while paused (until resume, stop or cancel) and hands out the pending command.
    Command take(const std::function<void(bool paused)>& onPauseChange);

private:
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    bool m_paused = false;
    Command m_pending = Command::None;
};

int runWorker(const WorkerOptions& options, WorkerControl& control,
              const std::function<void(const QJsonObject&)>& emit);

} // namespace gleaner::agent
