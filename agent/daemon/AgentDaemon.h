#pragma once
// The agent daemon (`gleaner-agent run`): leases subtasks from its coordinator, checks and fetches them into
// the cache, trains each in a gleaner-worker child process, reports progress (which extends the lease) and
// uploads the result, persisting every step in the SubtaskStore so that a crash, a kill or a reboot loses
// nothing it can keep.
//
// Threads: everything here lives on the event loop's thread (the store, the cache's bookkeeping, the workers'
// pipes, the control socket), except the coordinator calls and the hashing, which are synchronous and run in
// order on one network thread (one kept-alive connection) and hand their results back as queued calls. So the
// loop never blocks, and `pause` reaches every worker within a mini-batch.
//
// A subtask's path, each arrow persisted before the next step starts:
//   leased --verify signature, pin files--> downloading --every file hashed--> verified --task folder-->
//   training --worker exit 0--> uploading --202--> done
// A check that fails (signature, a manifest's age, a file's size or hash) is final: the subtask is reported
// failed to the coordinator with the reason and nothing of it runs. A task whose lease id is not 32 hex
// digits, or that this agent has had before, is only logged: nothing of it is recorded, reported or fetched,
// and only a checked lease id (LeaseId) names a folder under DATA_DIR/tasks or a URL. A worker that crashes,
// fails or passes its memory cap is started once more from its checkpoint; a second failure gives the subtask
// back. The coordinator being unreachable is never final: the step is tried again later, with backoff.
//
// After a restart each unfinished subtask first asks the coordinator (a progress report) whether its lease is
// still open; open ones resume from where they were (a worker from its checkpoint), the others are dropped.
//
// The daemon itself only builds its parts, wires them (AgentDaemonWiring.cpp) and hands each control request
// to the part it concerns. Per project (one today): ProjectLink (enrolment, pinned keys, client,
// Reachability), LeaseDesk (asking for work, following the signing key, taking tasks on), TaskFiles (a
// subtask's files) and SubtaskSteps (a subtask's steps up to its upload or hand-back). Per machine:
// MachineGate (the owner's pause and snooze, the desktop policy, the workers' limits and slots), WorkerRuns
// (the gleaner-worker children), Departure (how the agent stops and leaves), AgentStatus (the state and the
// status object) and EventFeed (the log and the control events). They share the subtask table (SubtaskTable)
// and the Lifecycle flags by reference.

#include "Result.h"
#include "config/AgentConfig.h"
#include "config/PinnedKeys.h"
#include "control/ControlHandler.h"
#include "daemon/ActiveSubtask.h"
#include "daemon/AgentStatus.h"
#include "daemon/Backoff.h"
#include "daemon/DesktopPolicy.h"
#include "daemon/EventFeed.h"
#include "daemon/Lifecycle.h"
#include "daemon/MachineGate.h"
#include "daemon/SubtaskTable.h"
#include "runner/SubtaskStore.h"
#include "util/Clock.h"
#include "util/DirectoryLock.h"

#include <QJsonObject>
#include <QObject>

#include <memory>

namespace gleaner::agent {

class SessionReports;

class CoordinatorClient;
class CurlTransport;
class Departure;
class FileCache;
class LeaseDesk;
class ProjectLink;
class NetworkHop;
class StopSignal;
class SubtaskSteps;
class WorkerRuns;
class TaskFiles;
struct LeasedTask;

struct DaemonOptions
{
    QString dataDir;
    bool dedicated = false; // compute regardless of user activity; the desktop policy is off
    int maxTasks = 1;       // subtasks at once (the paper's T)
    int threads = 0;        // per worker; 0: the machine's cores divided among maxTasks
    double cpuShare = 1.0;  // (0, 1]
    double checkpointIntervalSeconds = 60;
    qint64 memoryCapBytes = 0; // per worker; 0: none
    qint64 cacheCapBytes = 10LL * 1024 * 1024 * 1024;
    qint64 uploadBytesPerSecond = 0; // 0: no cap
    qint64 downloadBytesPerSecond = 0;
    QString device = QStringLiteral("cpu");
    QString workerProgram;            // empty: gleaner-worker next to this executable
    qint64 progressReportMs = 30'000; // how often a running subtask reports to the coordinator
    qint64 maxBackoffMs = 60'000;     // the longest wait between tries when the coordinator is unreachable
    // The desktop (docs/desktop.md): where the user's idle time comes from ("auto", a source, "none"), and
    // the organisation's policy file (empty: PreferenceStore::defaultPolicyFile()). On a desktop agent the
    // preferences set the resources above (threads, CPU share, memory cap, cache, rates, checkpoints); the
    // values here are then only the starting point that the preferences replace.
    QString idleSource = QStringLiteral("auto");
    QString policyFile;
    // Leaving (SIGTERM, `finish --now`, the end of --max-runtime; docs/clusters.md): within `graceSeconds` each
    // subtask is finished and uploaded, or checkpointed and handed back to the coordinator (protocol 6.8), which
    // gives it to the next agent at once. Without handBackOnStop (--keep-on-stop) a stop keeps the leases, and the
    // subtasks resume here at the next start.
    bool handBackOnStop = true;
    double graceSeconds = 25;
    // Batch mode (--until-empty): stop, exit code 0, once the coordinator had no work for this agent for
    // `idleExitSeconds` and it holds none.
    bool untilEmpty = false;
    double idleExitSeconds = 120;
    double maxRuntimeSeconds = 0; // 0: none; otherwise leave `graceSeconds` before it is up
    QString kind;                 // what the agent declares itself: desktop, dedicated, batch, cloud
    // The system service's session reports (--session-socket): with idleSource "sessions", the idle time is
    // every session's (SessionIdleSource).
    std::shared_ptr<SessionReports> sessions;
};

class AgentDaemon final : public QObject, public ControlHandler
{
    Q_OBJECT
public:
    static Result<std::unique_ptr<AgentDaemon>> create(DaemonOptions options);
    ~AgentDaemon() override;

    // Resumes what the store holds and starts leasing.
    void start();
    // SIGTERM / SIGINT: each subtask is finished, or checkpointed and handed back to the coordinator, within
    // the grace budget (Departure; DaemonOptions::handBackOnStop). With --keep-on-stop, or what could not be
    // handed back: workers checkpoint and exit, state is persisted, then stopped() is emitted (within about
    // ten seconds: a worker that does not stop in time is killed, its last checkpoint kept) and the next
    // start resumes them.
    void shutdown();
    // SIGHUP, or the policy file changed on disk: the organisation's policy is read again and takes effect at
    // once, subtasks in hand kept. A policy that no longer parses is logged as an error and the last good one
    // stays in force.
    void reloadPolicy(const QString& why);

    // Control requests (docs/control-protocol.md, docs/desktop.md): status, pause, resume, finish, snooze,
    // preferences, set_preferences.
    QStringList commands() const override;
    Result<QJsonObject> handle(const QString& command, const QJsonObject& args) override;
    QJsonObject status() const;
    // The status's "state" alone, without building the whole object.
    const QString& state() const;

    // The organisation's policy file in force (empty: none).
    QString policyFile() const;

Q_SIGNALS:
    // An event for the control socket's subscribers.
    void controlEvent(const QJsonObject& event);
    // The daemon is done (shutdown() or `finish` completed): the process may exit with `exitCode`.
    void stopped(int exitCode);

private:
    AgentDaemon(DaemonOptions options, AgentConfig config, PinnedKeys keys, DirectoryLock lock,
                std::unique_ptr<SubtaskStore> store, std::unique_ptr<FileCache> cache,
                PreferenceStore preferences, DesktopProbes probes);

    void wireLeasing();
    void wireDeparture();
    void wireGate(PreferenceStore preferences, DesktopProbes probes);
    void wireStatus();
    void wireSubtasks();
    // The coordinator refused this agent's credentials: nothing more is asked of it, the workers stop (their
    // work kept for an operator to restore the agent).
    void refuseCredentials(const QString& error);

    DaemonOptions m_options;
    SystemClock m_clock;
    EventFeed m_feed;
    FailureStreak m_failures;
    Lifecycle m_lifecycle;
    DirectoryLock m_lock; // one daemon per data directory
    std::unique_ptr<SubtaskStore> m_store;
    std::unique_ptr<FileCache> m_cache;
    std::unique_ptr<StopSignal> m_stop;
    std::unique_ptr<ProjectLink> m_project; // the one project this agent works for
    std::unique_ptr<TaskFiles> m_files;
    std::unique_ptr<LeaseDesk> m_leasing;
    std::unique_ptr<Departure> m_departure;
    std::unique_ptr<MachineGate> m_gate;
    std::unique_ptr<AgentStatus> m_status;
    std::unique_ptr<SubtaskSteps> m_steps;
    std::unique_ptr<WorkerRuns> m_workers;
    std::unique_ptr<NetworkHop> m_network; // stopped first (in the destructor)

    SubtaskTable m_active;
    QJsonObject m_hardware; // machineHardware()'s capabilities, read once at start
};

} // namespace gleaner::agent
