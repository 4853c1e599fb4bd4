#pragma once
// What the end-to-end tests and the agent benchmarks read about processes from outside, the way an operator
// would with ps and /proc: a free loopback port, whether a process still runs, the gleaner-worker processes
// that work in an agent's task folders, and a process's memory and CPU time.

#include <QList>
#include <QString>

#include <optional>
#include <utility>

namespace gleaner::e2e {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), so a server can be
// started on it and restarted on it later; 0 when no socket could be bound.
quint16 freeLoopbackPort();

// True while `pid` exists and is not a zombie (a killed agent's worker is reparented, and a container's init
// may be slow to reap it).
bool processAlive(qint64 pid);

// The running gleaner-worker processes whose `--task` folder lies under `tasksDir` (an agent's <data>/tasks):
// the workers of that one agent, also after the agent itself was killed.
QList<qint64> workerPidsUnder(const QString& tasksDir);
// The same workers with the task folder each works in.
QList<std::pair<qint64, QString>> workersUnder(const QString& tasksDir);

struct ProcessSample
{
    qint64 rssKb = 0;    // VmRSS
    qint64 hwmKb = 0;    // VmHWM, the peak resident set
    qint64 cpuTicks = 0; // utime + stime, in clock ticks
};

// Reads /proc/PID/status and /proc/PID/stat; nothing when the process is gone.
std::optional<ProcessSample> sampleProcess(qint64 pid);
qint64 clockTicksPerSecond();

} // namespace gleaner::e2e
