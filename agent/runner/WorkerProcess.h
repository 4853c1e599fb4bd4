#pragma once
// One gleaner-worker child process, seen from the agent's event loop: it starts the worker on a task folder,
// passes commands to its stdin (docs/worker-protocol.md), turns its stdout into JSON events, keeps the tail
// of its stderr for the log and for a failure's reason, and watches its resident memory, killing it when it
// passes the owner's cap. How it ended is one WorkerEnd with a reason a person can read.

#include <QByteArray>
#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QStringList>
#include <QTimer>

namespace gleaner::agent {

struct WorkerLaunch
{
    QString program; // the gleaner-worker executable
    QString taskDir;
    int threads = 0; // 0: libtorch's default
    double cpuShare = 1.0;
    double checkpointIntervalSeconds = 60;
    QString device = QStringLiteral("cpu");
    qint64 memoryCapBytes = 0; // 0: no cap; the agent's check of the resident memory, which follows the owner
    // The cap the kernel enforces in the worker (--max-memory-mb, RLIMIT_DATA), fixed for its life: the largest
    // the owner's preferences allow, so the lower cap while the user is active stays the agent's to enforce.
    qint64 kernelMemoryCapBytes = 0; // 0: none
    bool allowUnconfinedModels = false; // the owner's allow_unconfined_models
};

struct WorkerEnd
{
    enum class Kind
    {
        Done,       // exit 0: result.safetensors written
        Failed,     // exit 1, with the error event's message
        Stopped,    // exit 3: checkpointed on request, to be resumed
        Cancelled,  // exit 4
        Crashed,    // killed by a signal, or an exit code the protocol does not define
        OverMemory, // killed by the agent for its memory cap, or an allocation past the kernel's cap failed
        NotStarted, // the program could not be started
    };
    Kind kind = Kind::Crashed;
    int exitCode = -1;
    QString reason; // empty for Done, Stopped and Cancelled
};

class WorkerProcess final : public QObject
{
    Q_OBJECT
public:
    explicit WorkerProcess(WorkerLaunch launch, QObject* parent = nullptr);
    ~WorkerProcess() override;

    void start();
    // "pause", "resume", "checkpoint", "stop", "cancel"; ignored once the worker has ended.
    void send(const QByteArray& command);
    // Ends the worker at once (SIGKILL): its last checkpoint stays for the next start.
    void kill();
    bool running() const { return m_process.state() != QProcess::NotRunning; }
    qint64 pid() const { return m_process.processId(); }
    // The owner's memory cap changed (the desktop policy: a lower cap while the user is active); 0: none.
    void setMemoryCap(qint64 bytes);
    const WorkerLaunch& launch() const { return m_launch; }
    // Resident memory at the last check, bytes; 0 before the first.
    qint64 residentBytes() const { return m_rss; }

    static QStringList arguments(const WorkerLaunch& launch);
    // "the worker exceeded its memory cap of N MB ...": the reason given when the kernel's cap stopped it.
    static QString kernelCapReason(qint64 capBytes);
    // Resident set size of process `pid` from /proc/<pid>/statm; -1 when it cannot be read.
    static qint64 residentBytesOf(qint64 pid);

Q_SIGNALS:
    void event(const QJsonObject& event);
    void ended(const gleaner::agent::WorkerEnd& end);

private:
    void readEvents();
    void readErrors();
    void checkMemory();
    void onFinished(int exitCode, QProcess::ExitStatus status);
    void onError(QProcess::ProcessError error);

    WorkerLaunch m_launch;
    QProcess m_process;
    QTimer m_memoryTimer;
    QByteArray m_stdoutBuffer;
    QByteArray m_stderrBuffer;
    QStringList m_stderrTail;
    QString m_errorEvent;
    QString m_overMemory;
    bool m_memoryCapHit = false; // the worker said an allocation failed under the kernel's cap
    qint64 m_rss = 0;
    bool m_ended = false;
};

} // namespace gleaner::agent
