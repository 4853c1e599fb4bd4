// AgentDaemon: building and wiring the parts it is made of. Each part gets references to the parts below it
// and a struct of hooks for what it asks of those beside or above it; the hooks call the parts, never back
// into the daemon's own logic.
#include "daemon/AgentDaemon.h"

#include "cache/FileCache.h"
#include "daemon/Departure.h"
#include "daemon/LeaseDesk.h"
#include "daemon/MachineGate.h"
#include "daemon/NetworkHop.h"
#include "daemon/ProjectLink.h"
#include "daemon/StopSignal.h"
#include "daemon/SubtaskSteps.h"
#include "daemon/TaskFiles.h"
#include "daemon/WorkerRuns.h"
#include "net/CoordinatorClient.h"

namespace gleaner::agent {

AgentDaemon::AgentDaemon(DaemonOptions options, AgentConfig config, PinnedKeys keys, DirectoryLock lock,
                         std::unique_ptr<SubtaskStore> store, std::unique_ptr<FileCache> cache,
                         PreferenceStore preferences, DesktopProbes probes)
    : m_options(std::move(options)), m_feed(m_clock), m_lock(std::move(lock)), m_store(std::move(store)),
      m_cache(std::move(cache)), m_stop(std::make_unique<StopSignal>())
{
    connect(&m_feed, &EventFeed::published, this, &AgentDaemon::controlEvent);
    m_project = std::make_unique<ProjectLink>(std::move(config), std::move(keys), m_options.dataDir, m_clock,
                                              *m_stop, m_feed);
    m_project->client().setRateLimits(m_options.uploadBytesPerSecond, m_options.downloadBytesPerSecond);
    m_files = std::make_unique<TaskFiles>(m_options.dataDir, *m_cache, m_project->client(), *m_stop);
    m_network = std::make_unique<NetworkHop>(this);
    wireLeasing();
    wireDeparture();
    wireGate(std::move(preferences), std::move(probes));
    wireStatus();
    wireSubtasks();
}

void AgentDaemon::wireLeasing()
{
    LeaseDesk::Hooks hooks;
    hooks.closed = [this] {
        return m_lifecycle.stopping || m_lifecycle.finishing || !m_lifecycle.fatal.isEmpty();
    };
    hooks.stopping = [this] { return m_lifecycle.stopping; };
    hooks.freeSlots = [this] {
        return m_gate->computeAllowed() ? m_gate->taskSlots() - int(m_active.size()) : 0;
    };
    hooks.capabilities = [this] {
        // The machine as the coordinator should see it (read at start), and how this agent runs.
        QJsonObject capabilities = m_hardware;
        capabilities.insert(QStringLiteral("threads"), m_gate->limits().threads);
        capabilities.insert(QStringLiteral("device"), m_gate->workerDevice());
        capabilities.insert(QStringLiteral("dedicated"), m_options.dedicated);
        capabilities.insert(QStringLiteral("kind"), !m_options.kind.isEmpty() ? m_options.kind
                                                    : m_options.dedicated     ? QStringLiteral("dedicated")
                                                                              : QStringLiteral("desktop"));
        return capabilities;
    };
    hooks.credentialsRefused = [this](const QString& error) { refuseCredentials(error); };
    hooks.reached = [this] { m_steps->coordinatorReached(); };
    hooks.unreachable = [this](const QString& error) { m_project->reachability().unreachable(error); };
    hooks.stateChanged = [this] { m_status->update(); };
    // Held back, the job is not done: a batch agent (--until-empty) does not count it as time without work.
    hooks.answered = [this](bool noWork) { m_departure->answered(noWork); };
    hooks.failSubtask = [this](const LeaseId& leaseId, const QString& stage, const QString& reason) {
        m_steps->fail(leaseId, stage, reason);
    };
    hooks.taken = [this](const LeaseId& leaseId) {
        if (auto active = m_active.value(leaseId))
            m_status->publish(*active);
        m_steps->continueSubtask(leaseId);
    };
    m_leasing = std::make_unique<LeaseDesk>(
        m_project->config(), m_project->keys(), m_project->client(), *m_network, *m_cache, *m_store, m_active,
        m_feed, m_failures, m_clock,
        LeaseDesk::Settings{m_options.maxBackoffMs, m_options.untilEmpty, m_options.idleExitSeconds},
        std::move(hooks));
}

void AgentDaemon::wireDeparture()
{
    Departure::Hooks hooks;
    hooks.upload = [this](const LeaseId& leaseId) { m_steps->upload(leaseId); };
    hooks.drop = [this](const LeaseId& leaseId, const QString& reason) { m_steps->drop(leaseId, reason); };
    hooks.computeAllowed = [this] { return m_gate->computeAllowed(); };
    hooks.stateChanged = [this] { m_status->update(); };
    hooks.stopped = [this](int exitCode) { Q_EMIT stopped(exitCode); };
    hooks.handBack = [this](const LeaseId& leaseId, const QString& checkpoint) {
        m_steps->handBack(leaseId, checkpoint);
    };
    hooks.taskFolder = [this](const LeaseId& leaseId) { return m_files->taskFolder(leaseId); };
    hooks.abortFetches = [this] { m_files->abortFetches(); };
    hooks.holdLeasing = [this] { m_leasing->hold(); };
    m_departure = std::make_unique<Departure>(
        m_lifecycle, m_active, m_feed, m_clock, *m_stop,
        Departure::Settings{m_options.handBackOnStop, m_options.graceSeconds, m_options.untilEmpty,
                            m_options.idleExitSeconds, m_options.maxRuntimeSeconds},
        std::move(hooks));
}

void AgentDaemon::wireGate(PreferenceStore preferences, DesktopProbes probes)
{
    MachineGate::Hooks hooks;
    hooks.startWorker = [this](const LeaseId& leaseId) { m_workers->startWorker(leaseId); };
    hooks.leaseNow = [this] { m_leasing->schedule(0); };
    hooks.holdLeasing = [this] { m_leasing->hold(); };
    hooks.stateChanged = [this] { m_status->update(); };
    hooks.rateLimitsChanged = [this](qint64 up, qint64 down) {
        // The client belongs to the network thread: the new caps take effect from its next transfer.
        m_network->post([this, up, down] { m_project->client().setRateLimits(up, down); });
    };
    const MachineLimits limits{m_options.threads,
                               m_options.cpuShare,
                               m_options.checkpointIntervalSeconds,
                               m_options.memoryCapBytes,
                               m_options.cacheCapBytes,
                               m_options.uploadBytesPerSecond,
                               m_options.downloadBytesPerSecond};
    m_gate = std::make_unique<MachineGate>(
        std::make_unique<DesktopPolicy>(std::move(preferences), std::move(probes), m_clock,
                                        m_options.dedicated),
        limits, MachineGate::Settings{m_options.dedicated, m_options.maxTasks, m_options.device}, m_active,
        *m_cache, m_feed, m_clock, std::move(hooks));
}

void AgentDaemon::wireStatus()
{
    m_status = std::make_unique<AgentStatus>(
        AgentStatus::Sources{m_options.dataDir, m_options.dedicated, m_options.maxTasks, m_project->config(),
                             m_project->keys(), m_lifecycle, m_failures, m_active, *m_store,
                             m_project->reachability(), *m_leasing, *m_gate, *m_departure, m_feed, m_clock});
}

void AgentDaemon::wireSubtasks()
{
    SubtaskSteps::Hooks hooks;
    hooks.startWorker = [this](const LeaseId& leaseId) { m_workers->startWorker(leaseId); };
    hooks.credentialsRefused = [this](const QString& error) { refuseCredentials(error); };
    m_steps = std::make_unique<SubtaskSteps>(
        SubtaskSteps::Parts{*this, m_lifecycle, m_active, m_failures, m_feed, m_clock, *m_store, *m_cache,
                            *m_files, m_project->client(), *m_network, *m_stop, *m_leasing,
                            m_project->reachability(), *m_departure, *m_status},
        SubtaskSteps::Settings{m_options.progressReportMs, m_options.maxBackoffMs}, std::move(hooks));
    m_workers = std::make_unique<WorkerRuns>(WorkerRuns::Parts{*this, m_lifecycle, m_active, m_feed, m_clock,
                                                               *m_store, *m_files, *m_leasing, *m_gate,
                                                               *m_departure, *m_status, *m_steps},
                                             m_options.workerProgram, m_options.progressReportMs);
}

} // namespace gleaner::agent
