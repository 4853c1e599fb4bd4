#include "daemon/AgentDaemon.h"
#include "daemon/DaemonLogging.h"
#include "daemon/NetworkHop.h"
#include "daemon/ProjectLink.h"
#include "daemon/TaskFiles.h"

#include "cache/FileCache.h"
#include "config/Enroller.h"
#include "daemon/Departure.h"
#include "daemon/LeaseDesk.h"
#include "daemon/MachineGate.h"
#include "daemon/StopSignal.h"
#include "daemon/SubtaskSteps.h"
#include "daemon/WorkerRuns.h"
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

AgentDaemon::~AgentDaemon()
{
    m_stop->stop();
    m_network->stop(); // before the client, the cache and the store it uses go away
    m_steps->recordFetchedBytes(); // what a fetch cut short by the stop had already fetched
    for (const auto& active : std::as_const(m_active))
        delete active->worker;
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
    m_feed.log(
        QStringLiteral("info"),
        QStringLiteral("agent \"%1\" (%2) working for %3; up to %4 subtask(s) at once, %5 "
                       "thread(s) each%6")
            .arg(m_project->config().name, m_project->config().agentId, m_project->config().coordinatorUrl)
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
    m_steps->resumeUnfinished();
    m_status->update();
    m_leasing->schedule(0);
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
