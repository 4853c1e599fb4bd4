#pragma once
// What gleaner-worker does, as a library so tests can drive it in-process: train the subtask of a task folder
// (resuming from its checkpoint when there is one), obey pause / resume / checkpoint / stop / cancel between
// mini-batches, hold the CPU-time share by sleeping in proportion after each mini-batch, and report JSON
// events.
//
// Events (one JSON object per line on the worker's stdout; docs/worker-protocol.md), after main.cpp's
// {"event": "sandbox", ...} (WorkerSandbox.h):
//   {"event": "started", "step": S, "of": N, "resumed": bool, "problems": [...]}
//   {"event": "progress", "step", "of", "epoch", "loss", "samples_per_s", "seconds"}
//   {"event": "checkpoint", "step", "path"}
//   {"event": "paused", "step"}            {"event": "resumed", "step"}
//   {"event": "done", "result", "samples", "loss", "train_seconds"}
//   {"event": "stopped", "step", "checkpoint"}   {"event": "cancelled", "step"}
//   {"event": "error", "message", "memory_cap": true when an allocation failed under the kernel's memory cap}
// Commands (one per line on stdin): pause, resume, checkpoint, stop (checkpoint and exit), cancel (exit
// without a checkpoint), share S (a new CPU-time share, 0 < S <= 1, from the next mini-batch on). End of
// input counts as stop: the agent is gone, the work is kept for the next one.

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
    // What the sandbox put in force (WorkerSandbox): the kernel's memory cap (0: none), so that a failed
    // allocation is reported as the cap's doing, and whether system calls are filtered.
    qint64 memoryCapBytes = 0;
    bool syscallFilter = false;
    // A TorchScript model runs a program someone else wrote through libtorch's interpreter; without the filter
    // and without the cap nothing bounds what a bug in it could be made to do, so it is refused unless the
    // owner allowed it.
    bool allowUnconfinedModels = false;
};

// Why a TorchScript model is refused under this sandbox, with the remedy; empty when it may run.
QString unconfinedModelRefusal(const WorkerOptions& options);
// The message of an "error" event, said as the memory cap's doing when the cap is in force and `message` is a
// failed allocation; otherwise `message` itself.
QString explainMemoryFailure(const WorkerOptions& options, const QString& message, bool* capHit = nullptr);

enum WorkerExit
{
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
    enum class Command
    {
        None,
        Checkpoint,
        Stop,
        Cancel
    };

    void pause();
    void resume();
    void requestCheckpoint();
    void stop();
    void cancel();
    // The owner changed the CPU-time share while this subtask runs; out-of-range values are ignored.
    void setCpuShare(double share);
    // Applies a command line ("pause", "share 0.5", ...); false for an unknown or malformed command.
    bool apply(const QString& line);

    bool paused() const;
    // The share set by the last `share` command, or `initial` when none came.
    double cpuShare(double initial) const;
    // The CPU-time share's rest after a mini-batch: waits `seconds`, but returns early when a command
    // arrives, so a pause or a stop is obeyed at once even at a small share.
    void rest(double seconds);
    // Blocks while paused (until resume, stop or cancel) and hands out the pending command.
    Command take(const std::function<void(bool paused)>& onPauseChange);

private:
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    bool m_paused = false;
    Command m_pending = Command::None;
    double m_cpuShare = 0.0;  // 0: no `share` command yet
    quint64 m_generation = 0; // bumped by every command, so rest() knows one arrived
};

int runWorker(const WorkerOptions& options, WorkerControl& control,
              const std::function<void(const QJsonObject&)>& emit);

} // namespace gleaner::agent
