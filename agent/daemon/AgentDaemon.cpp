#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "config/Enroller.h"
#include "daemon/Departure.h"
#include "daemon/LeaseDesk.h"
#include "daemon/MachineGate.h"
#include "daemon/StopSignal.h"
#include "idle/SystemIdleProbe.h"
#include "net/CoordinatorClient.h"
#include "net/CurlTransport.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>
#include <QSet>
#include <QThread>

namespace gleaner::agent {

Q_LOGGING_CATEGORY(lcDaemon, "gleaner.agent")

using namespace daemon_detail;

Result<std::unique_ptr<AgentDaemon>> AgentDaemon::create(DaemonOptions options)
{
    options.dataDir = QDir(options.dataDir).absolutePath();
    const QString dir = options.dataDir;
    if (!AgentConfig::isEnrolled(dir))
        return fail(
            QStringLiteral(
                "%1 holds no enrolled agent; run `gleaner-agent enroll URL --token TOKEN --data-dir %1` "
                "first, or give the organisation's policy file an \"enrollment\" (docs/fleet.md)")
                .arg(dir));
    auto config = AgentConfig::load(dir);
    if (!config)
        return fail(config.error());
    auto keys = PinnedKeys::load(dir);
    if (!keys)
        return fail(keys.error());
    if (options.maxTasks < 1)
        return fail(QStringLiteral("the number of subtasks at once must be at least 1"));
    if (options.workerProgram.isEmpty()) {
        // Beside gleaner-agent in a build tree; in libexec where the packages install it, off the PATH.
        const QString besideUs = QCoreApplication::applicationDirPath() + QStringLiteral("/gleaner-worker");
        const QString installed = QDir::cleanPath(QCoreApplication::applicationDirPath() +
                                                  QStringLiteral("/../libexec/gleaner/gleaner-worker"));
        options.workerProgram = QFileInfo(besideUs).isExecutable() ? besideUs : installed;
        if (!QFileInfo(options.workerProgram).isExecutable())
            return fail(QStringLiteral("neither %1 nor %2 is an executable gleaner-worker; reinstall Gleaner or "
                                       "pass --worker PATH")
                            .arg(besideUs, installed));
    }
    if (!QFileInfo(options.workerProgram).isExecutable())
        return fail(
            QStringLiteral("%1 is not an executable gleaner-worker; reinstall Gleaner or pass --worker PATH")
                .arg(options.workerProgram));
    if (options.threads <= 0)
        options.threads = std::max(1, QThread::idealThreadCount() / options.maxTasks);

    // Two daemons on one folder would run each subtask twice and delete each other's task folders.
    auto lock = DirectoryLock::acquire(dir, QStringLiteral("gleaner-agent"));
    if (!lock)
        return fail(lock.error());
    // The owner's preferences and the organisation's policy: a broken policy file stops the agent here, so an
    // organisation's limits are never silently ignored.
    const QString policyFile =
        options.policyFile.isEmpty() ? PreferenceStore::defaultPolicyFile() : options.policyFile;
    auto preferences = PreferenceStore::open(dir + QStringLiteral("/preferences.json"), policyFile);
    if (!preferences && options.dedicated) {
        // The preferences do not govern a dedicated agent: a policy file meant for desktops does not stop it.
        qCWarning(lcDaemon).noquote()
            << preferences.error() << "(ignored: a --dedicated agent computes whatever the policy says)";
        preferences = PreferenceStore::open(dir + QStringLiteral("/preferences.json"), QString());
    }
    if (!preferences)
        return fail(preferences.error());
    for (const QString& warning : preferences->warnings())
        qCWarning(lcDaemon).noquote() << warning;
    if (!options.dedicated) {
        const Preferences& p = preferences->current();
        options.cpuShare = p.cpuSharePercent() / 100.0;
        options.checkpointIntervalSeconds = p.checkpointSeconds();
        options.cacheCapBytes = p.cacheBytes();
        options.uploadBytesPerSecond = p.uploadBytesPerSecond();
        options.downloadBytesPerSecond = p.downloadBytesPerSecond();
    }
    auto store = SubtaskStore::open(dir + QStringLiteral("/subtasks.db"));
    if (!store)
        return fail(store.error());
    static SystemClock cacheClock;
    auto cache = FileCache::open(dir + QStringLiteral("/cache"), options.cacheCapBytes, cacheClock);
    if (!cache)
        return fail(cache.error());
    if (!QDir().mkpath(dir + QStringLiteral("/tasks")))
        return fail(QStringLiteral("cannot create %1/tasks").arg(dir));
    if (auto source = SystemIdleProbe::checkPreference(options.idleSource); !source)
        return fail(source.error());
    DesktopProbes probes =
        options.dedicated ? DesktopProbes() : DesktopProbes::system(options.idleSource, options.sessions);
    return std::unique_ptr<AgentDaemon>(new AgentDaemon(std::move(options), *config, std::move(*keys), std::move(*lock),
                                                        std::move(*store), std::move(*cache),
                                                        std::move(*preferences), std::move(probes)));
}

AgentDaemon::AgentDaemon(DaemonOptions options, AgentConfig config, PinnedKeys keys, DirectoryLock lock,
                         std::unique_ptr<SubtaskStore> store, std::unique_ptr<FileCache> cache,
                         PreferenceStore preferences, DesktopProbes probes)
    : m_options(std::move(options)), m_config(std::move(config)), m_keys(std::move(keys)), m_feed(m_clock),
      m_reach(m_config.coordinatorUrl, m_feed), m_lock(std::move(lock)), m_store(std::move(store)),
      m_cache(std::move(cache)), m_stop(std::make_unique<StopSignal>())
{
    connect(&m_feed, &EventFeed::published, this, &AgentDaemon::controlEvent);
    const QString ca = AgentConfig::caPath(m_options.dataDir);
    m_transport = std::make_unique<CurlTransport>(QFileInfo::exists(ca) ? ca : QString());
    RetryOptions retry;
    retry.maxAttempts =
        4; // the daemon tries a step again later itself; the network thread must not hang on one
    retry.maxDelayMs = 15'000;
    StopSignal* stop = m_stop.get();
    m_client = std::make_unique<CoordinatorClient>(*m_transport, m_config.coordinatorUrl, m_clock,
                                                   RetryPolicy(retry),
                                                   [stop](qint64 ms) { return stop->sleep(ms); });
    QFile token(AgentConfig::tokenPath(m_options.dataDir));
    if (token.open(QIODevice::ReadOnly))
        m_client->setAgentToken(token.readAll().trimmed());
    m_client->setRateLimits(m_options.uploadBytesPerSecond, m_options.downloadBytesPerSecond);
    m_files = std::make_unique<TaskFiles>(m_options.dataDir, *m_cache, *m_client, *m_stop);
    m_network = std::make_unique<NetworkHop>(this);
    wireLeasing();
    wireDeparture();
    wireGate(std::move(preferences), std::move(probes));
    wireStatus();
    m_keepAlive.setInterval(int(std::max<qint64>(m_options.progressReportMs / 2, 500)));
    connect(&m_keepAlive, &QTimer::timeout, this, &AgentDaemon::keepLeasesAlive);
}

AgentDaemon::~AgentDaemon()
{
    m_stop->stop();
    m_network->stop(); // before the client, the cache and the store it uses go away
    recordFetchedBytes(); // what a fetch cut short by the stop had already fetched
    for (const auto& active : std::as_const(m_active))
        delete active->worker;
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
    hooks.reached = [this] { coordinatorReached(); };
    hooks.unreachable = [this](const QString& error) { m_reach.unreachable(error); };
    hooks.stateChanged = [this] { m_status->update(); };
    // Held back, the job is not done: a batch agent (--until-empty) does not count it as time without work.
    hooks.answered = [this](bool noWork) { m_departure->answered(noWork); };
    hooks.failSubtask = [this](const LeaseId& leaseId, const QString& stage, const QString& reason) {
        failSubtask(leaseId, stage, reason);
    };
    hooks.taken = [this](const LeaseId& leaseId) {
        if (auto active = m_active.value(leaseId))
            m_status->publish(*active);
        continueSubtask(leaseId);
    };
    m_leasing = std::make_unique<LeaseDesk>(
        m_config, m_keys, *m_client, *m_network, *m_cache, *m_store, m_active, m_feed, m_failures, m_clock,
        LeaseDesk::Settings{m_options.maxBackoffMs, m_options.untilEmpty, m_options.idleExitSeconds},
        std::move(hooks));
}

void AgentDaemon::wireDeparture()
{
    Departure::Hooks hooks;
    hooks.upload = [this](const LeaseId& leaseId) { upload(leaseId); };
    hooks.drop = [this](const LeaseId& leaseId, const QString& reason) { dropSubtask(leaseId, reason); };
    hooks.computeAllowed = [this] { return m_gate->computeAllowed(); };
    hooks.stateChanged = [this] { m_status->update(); };
    hooks.stopped = [this](int exitCode) { Q_EMIT stopped(exitCode); };
    m_departure = std::make_unique<Departure>(
        m_lifecycle, m_active, m_feed, m_clock, *m_files, *m_client, *m_network, *m_stop, *m_leasing,
        Departure::Settings{m_options.handBackOnStop, m_options.graceSeconds, m_options.untilEmpty,
                            m_options.idleExitSeconds, m_options.maxRuntimeSeconds},
        std::move(hooks));
}

void AgentDaemon::wireGate(PreferenceStore preferences, DesktopProbes probes)
{
    MachineGate::Hooks hooks;
    hooks.startWorker = [this](const LeaseId& leaseId) { startWorker(leaseId); };
    hooks.leaseNow = [this] { m_leasing->schedule(0); };
    hooks.holdLeasing = [this] { m_leasing->hold(); };
    hooks.stateChanged = [this] { m_status->update(); };
    hooks.rateLimitsChanged = [this](qint64 up, qint64 down) {
        // The client belongs to the network thread: the new caps take effect from its next transfer.
        m_network->post([this, up, down] { m_client->setRateLimits(up, down); });
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
    m_status = std::make_unique<AgentStatus>(AgentStatus::Sources{
        m_options.dataDir, m_options.dedicated, m_options.maxTasks, m_config, m_keys, m_lifecycle, m_failures,
        m_active, *m_store, m_reach, *m_leasing, *m_gate, *m_departure, m_feed, m_clock});
}

void AgentDaemon::start()
{
    const auto& report = m_cache->startupReport();
    if (report.deletedStrays || report.droppedRows || report.removedPartials)
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("cache checked: %1 altered or odd files deleted, %2 missing files "
                                  "forgotten, %3 stale partial downloads removed")
                       .arg(report.deletedStrays)
                       .arg(report.droppedRows)
                       .arg(report.removedPartials));
    m_feed.log(QStringLiteral("info"),
               QStringLiteral("agent \"%1\" (%2) working for %3; up to %4 subtask(s) at once, %5 "
                              "thread(s) each%6")
                   .arg(m_config.name, m_config.agentId, m_config.coordinatorUrl)
                   .arg(m_options.maxTasks)
                   .arg(m_gate->limits().threads)
                   .arg(m_options.dedicated ? QStringLiteral(", dedicated") : QString()));
    if (!m_options.dedicated) {
        m_feed.log(
            QStringLiteral("info"),
            QStringLiteral("desktop policy on: computing only as the preferences allow (idle source: %1)")
                .arg(m_options.idleSource));
    }
    // The machine as the coordinator should see it (cores, memory, GPU), read once. No NVIDIA driver is how
    // most machines are: said once here and in the status, never as a warning (the probe warned of a driver
    // that is there but fails).
    const MachineHardware hardware = machineHardware();
    m_hardware = hardware.capabilities;
    m_status->setGpu(hardware.gpu);
    if (hardware.gpuDriverMissing)
        m_feed.log(QStringLiteral("info"), hardware.gpu.value(u"note").toString());
    m_gate->start(); // the first decision, before any worker starts
    m_departure->armRuntimeLimit();
    resumeUnfinished();
    m_status->update();
    m_leasing->schedule(0);
    m_keepAlive.start();
}

void AgentDaemon::keepLeasesAlive()
{
    // Progress reports normally ride on the worker's progress events. A worker that sends none (paused, or
    // starved of CPU by the owner's own work, as SCHED_IDLE intends) still holds its lease for as long as the
    // lease was first given for (the job's deadline_seconds) since it last moved: a short pause costs the job
    // nothing, and work stalled for longer goes to another agent (a result from here is still accepted if it
    // comes first).
    const qint64 now = nowMs();
    for (const auto& active : std::as_const(m_active)) {
        if ((!active->worker && !active->startWhenAllowed) || !active->manifest ||
            now - active->lastReportMs < m_options.progressReportMs)
            continue;
        const qint64 holdMs = active->manifest->deadlineMs - active->manifest->issuedMs;
        const qint64 lastMoved = std::max(active->pausedSinceMs, active->lastProgressMs);
        if (now - lastMoved < holdMs)
            reportProgress(active->record.leaseId);
    }
}

void AgentDaemon::resumeUnfinished()
{
    auto unfinished = m_store->unfinished();
    if (!unfinished) {
        m_feed.log(QStringLiteral("error"), unfinished.error());
        return;
    }
    QSet<QString> keep;
    for (const Subtask& subtask : *unfinished) {
        m_active.insert(subtask.leaseId, std::make_shared<ActiveSubtask>(subtask));
        keep.insert(subtask.leaseId.toString());
    }
    for (const QString& owner : m_cache->pinOwners())
        if (!keep.contains(owner))
            (void)m_cache->releaseOwner(owner);
    for (const Subtask& subtask : *unfinished) {
        auto manifest = m_leasing->checkStoredManifest(subtask);
        if (!manifest) {
            failSubtask(subtask.leaseId, QStringLiteral("verify"), manifest.error());
            continue;
        }
        auto& active = *m_active.value(subtask.leaseId);
        active.manifest = *manifest;
        for (const ManifestFile& file : manifest->files)
            (void)m_cache->pin(file.sha256, subtask.leaseId.toString());
        // An upload asks the coordinator anyway; the other steps check the lease is still open first.
        active.needsLeaseCheck = subtask.state != SubtaskState::Uploading;
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("resuming lease %1 (job \"%2\", epoch %3, shard %4) from state %5")
                       .arg(subtask.leaseId.toString(), manifest->jobName)
                       .arg(manifest->epoch)
                       .arg(manifest->shard)
                       .arg(subtaskStateName(subtask.state)));
        continueSubtask(subtask.leaseId);
    }
}

// ---- outcomes ---------------------------------------------------------------------------------------------

void AgentDaemon::failSubtask(const LeaseId& leaseId, const QString& stage, const QString& reason)
{
    m_feed.log(QStringLiteral("error"),
               QStringLiteral("lease %1 failed: %2").arg(leaseId.toString(), reason));
    const Status s = m_store->transaction([&]() -> Status {
        if (auto st = m_store->setState(leaseId, SubtaskState::Failed, reason); !st)
            return st;
        SubtaskTotals add;
        add.subtasksFailed = 1;
        return m_store->addTotals(add);
    });
    if (!s)
        m_feed.log(QStringLiteral("error"), s.error());
    if (auto active = m_active.value(leaseId)) {
        active->record.state = SubtaskState::Failed;
        active->record.error = reason;
        m_status->publish(*active, reason);
    }
    // Tell the coordinator, so that the workunit goes to another agent now rather than at the lease's
    // deadline. A refused result closed the lease already (stage empty): nothing to report.
    if (!stage.isEmpty() && !m_lifecycle.stopping)
        m_network->run(
            [this, leaseId, stage, reason] { return m_client->reportFailure(leaseId, stage, reason); },
            [this, leaseId](Result<bool> reported) {
                if (!reported)
                    m_feed.log(QStringLiteral("warning"),
                               QStringLiteral("could not report the failure of lease %1 to the "
                                              "coordinator (%2); the lease will expire there")
                                   .arg(leaseId.toString(), reported.error()));
            });
    // A coordinator that keeps handing out work this agent refuses is not asked again at once.
    m_failures.failed(reason);
    release(leaseId, backoffMs(m_failures.count, m_options.maxBackoffMs));
}

void AgentDaemon::dropSubtask(const LeaseId& leaseId, const QString& reason)
{
    m_feed.log(QStringLiteral("info"),
               QStringLiteral("lease %1 dropped: %2").arg(leaseId.toString(), reason));
    if (auto s = m_store->setState(leaseId, SubtaskState::Dropped, reason); !s)
        m_feed.log(QStringLiteral("error"), s.error());
    if (auto active = m_active.value(leaseId)) {
        active->record.state = SubtaskState::Dropped;
        m_status->publish(*active, reason);
    }
    release(leaseId);
}

void AgentDaemon::finishSubtask(const LeaseId& leaseId)
{
    m_failures.count = 0;
    if (auto active = m_active.value(leaseId))
        m_status->publish(*active);
    release(leaseId);
}

void AgentDaemon::release(const LeaseId& leaseId, qint64 leaseDelayMs)
{
    auto active = m_active.take(leaseId);
    if (active && active->worker) {
        active->worker->disconnect(this);
        active->worker->kill();
        active->worker->deleteLater();
    }
    (void)m_cache->releaseOwner(leaseId.toString());
    m_files->removeTaskFolder(leaseId);
    m_status->update();
    m_departure->checkFinished();
    m_leasing->schedule(leaseDelayMs);
}

bool AgentDaemon::setState(const LeaseId& leaseId, SubtaskState state, const QString& error)
{
    auto active = m_active.value(leaseId);
    if (auto s = m_store->setState(leaseId, state, error); !s) {
        m_feed.log(QStringLiteral("error"), s.error());
        return false;
    }
    if (active)
        active->record.state = state;
    return true;
}

// ---- the coordinator's reachability and credentials -------------------------------------------------------

void AgentDaemon::coordinatorReached()
{
    if (!m_reach.reached())
        return;
    // Steps that were waiting for it go on now rather than at their backoff's end.
    for (const auto& active : std::as_const(m_active))
        if (!active->busy && !active->worker)
            QTimer::singleShot(0, this, [this, lease = active->record.leaseId] { continueSubtask(lease); });
}

void AgentDaemon::refuseCredentials(const QString& error)
{
    if (m_lifecycle.fatal.isEmpty())
        m_feed.log(QStringLiteral("error"), error);
    m_lifecycle.fatal = error;
    m_leasing->hold();
    for (const auto& active : std::as_const(m_active))
        if (active->worker && active->worker->running())
            active->worker->send("stop"); // keep the work: an operator may restore the agent
    m_status->update();
}

} // namespace gleaner::agent
