#pragma once
// The machine's say over the work (docs/desktop.md): whether workers may compute now (the owner's pause and
// snooze, the desktop policy's Decision), what they may use (threads, CPU share, memory cap, device, the
// cache and the transfer rates, from the preferences), how many subtasks are held at once, and the
// preferences and the organisation's policy file on the control socket. It pauses and resumes the workers
// through one function, syncWorkers(), for the owner's pause, the snooze and the policy alike. Per machine,
// whatever the projects; a
// `--dedicated` agent has no desktop and always computes. On the event loop's thread.

#include "Result.h"
#include "daemon/DesktopPolicy.h"
#include "util/Clock.h"
#include "util/LeaseId.h"

#include <QFileSystemWatcher>
#include <QJsonObject>
#include <QString>
#include <QTimer>

#include <functional>
#include <memory>
#include <optional>
#include <tuple>

namespace gleaner::agent {

class EventFeed;
class FileCache;
class SubtaskTable;

// What the workers may use: the command line's values, then (on a desktop agent) the preferences'.
struct MachineLimits
{
    int threads = 1; // per worker, for new subtasks
    double cpuShare = 1.0;
    double checkpointIntervalSeconds = 60;
    qint64 memoryCapBytes = 0; // per worker; 0: none
    qint64 cacheCapBytes = 0;
    qint64 uploadBytesPerSecond = 0; // 0: no cap
    qint64 downloadBytesPerSecond = 0;
};

class MachineGate
{
public:
    struct Settings
    {
        bool dedicated = false;
        int maxTasks = 1;
        QString device; // --device: cpu, cuda, auto
    };
    struct Hooks
    {
        std::function<void(const LeaseId&)> startWorker; // one held back until the machine allowed it
        std::function<void()> leaseNow;                  // the machine became ours to use
        std::function<void()> holdLeasing;               // no new work while it is not
        std::function<void()> stateChanged;
        std::function<void(qint64 up, qint64 down)> rateLimitsChanged;
    };

    MachineGate(std::unique_ptr<DesktopPolicy> desktop, MachineLimits limits, Settings settings,
                SubtaskTable& subtasks, FileCache& cache, EventFeed& feed, const Clock& clock, Hooks hooks);

    // The first decision (before any worker starts), and the policy file watched.
    void start();
    const MachineLimits& limits() const { return m_limits; }

    // Workers may compute: not paused by the owner, not snoozed, and the policy allows it.
    bool computeAllowed() const;
    // Subtasks held at once: --max-tasks, and on a desktop no more than the cores the owner allows.
    int taskSlots() const;
    // The device a new worker gets: --device, or with --device auto the GPU when the preference allows it.
    QString workerDevice() const;
    // The memory cap the kernel enforces in a worker started now (WorkerLaunch::kernelMemoryCapBytes); 0:
    // none.
    qint64 kernelMemoryCap() const;
    bool allowUnconfinedModels() const;
    // Sends pause or resume to each worker whose wanted state differs from what it was last told, and starts
    // those that waited for the machine.
    void syncWorkers();

    // The owner's requests (the agent's state is theirs to update).
    void pause();
    void resume();
    void endOwnerHold(); // `finish`: the owner's pause and snooze end; the policy still holds
    Result<qint64> snooze(const QJsonObject& args); // until when (ms since the epoch)
    // `preferences` and `set_preferences`.
    Result<QJsonObject> preferences(const QString& command, const QJsonObject& args);
    void reloadPolicy(const QString& why);
    QString policyFile() const;

    // For the agent's state and status.
    bool paused() const { return m_paused; }
    bool snoozed() const { return m_snoozeUntilMs > m_clock.nowMs(); }
    qint64 snoozeUntilMs() const { return m_snoozeUntilMs; }
    // The state's reason when the policy holds the workers: {state, reason, reason_code}, or empty.
    std::optional<std::tuple<QString, QString, QString>> policyState() const;
    const QString& decisionReason() const { return m_desktop->decision().reason; }
    QJsonObject statusObject() const;

private:
    void applyDecision(const Decision& decision);
    void applyPreferences();
    void watchPolicyFile();
    void endSnooze();
    void armSnoozeTimer();

    std::unique_ptr<DesktopPolicy> m_desktop;
    MachineLimits m_limits;
    const Settings m_settings;
    SubtaskTable& m_subtasks;
    FileCache& m_cache;
    EventFeed& m_feed;
    const Clock& m_clock;
    const Hooks m_hooks;
    bool m_paused = false;
    qint64 m_snoozeUntilMs = 0;
    QTimer m_snoozeTimer;
    bool m_computeWasAllowed = false;   // at the last decision, to lease again only when that changes
    QFileSystemWatcher m_policyWatcher; // the policy file and its folder (editors replace the file)
    QTimer m_policySettle;              // one reload for the burst of events a save makes
};

} // namespace gleaner::agent
