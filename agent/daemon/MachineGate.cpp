#include "daemon/MachineGate.h"

#include "cache/FileCache.h"
#include "daemon/EventFeed.h"
#include "daemon/SubtaskTable.h"

#include <QDateTime>
#include <QFileInfo>
#include <QJsonArray>

#include <algorithm>

#include <unistd.h>

namespace gleaner::agent {

MachineGate::MachineGate(std::unique_ptr<DesktopPolicy> desktop, MachineLimits limits, Settings settings,
                         SubtaskTable& subtasks, FileCache& cache, EventFeed& feed, const Clock& clock,
                         Hooks hooks)
    : m_desktop(std::move(desktop)), m_limits(limits), m_settings(std::move(settings)), m_subtasks(subtasks),
      m_cache(cache), m_feed(feed), m_clock(clock), m_hooks(std::move(hooks))
{
    QObject::connect(m_desktop.get(), &DesktopPolicy::decisionChanged, m_desktop.get(),
                     [this](const Decision& decision) { applyDecision(decision); });
    QObject::connect(m_desktop.get(), &DesktopPolicy::preferencesChanged, m_desktop.get(),
                     [this] { applyPreferences(); });
    m_snoozeTimer.setSingleShot(true);
    QObject::connect(&m_snoozeTimer, &QTimer::timeout, &m_snoozeTimer, [this] { endSnooze(); });
}

void MachineGate::start()
{
    m_desktop->start(); // the first decision, before any worker starts
    watchPolicyFile();
}

bool MachineGate::allowUnconfinedModels() const
{
    return m_desktop->preferences().allowUnconfinedModels();
}

QJsonObject MachineGate::statusObject() const
{
    QJsonObject policy = m_desktop->statusObject();
    policy.insert(QStringLiteral("threads"), m_limits.threads);
    policy.insert(QStringLiteral("snoozed_until_ms"),
                  snoozed() ? QJsonValue(m_snoozeUntilMs) : QJsonValue(QJsonValue::Null));
    return policy;
}

bool MachineGate::computeAllowed() const
{
    if (m_paused || snoozed())
        return false;
    return m_settings.dedicated || m_desktop->decision().mode == Decision::Mode::Compute;
}

QString MachineGate::workerDevice() const
{
    // The GPU preference decides for new subtasks: "never" keeps them on the CPU whatever --device says;
    // otherwise --device (auto: a GPU when libtorch can use one) stands, and "idle" holds GPU workers while
    // the user is active (syncWorkers).
    if (m_settings.dedicated || m_settings.device == u"cpu")
        return m_settings.device;
    return m_desktop->preferences().gpu() == Preferences::Gpu::Never ? QStringLiteral("cpu")
                                                                     : m_settings.device;
}

qint64 MachineGate::kernelMemoryCap() const
{
    // The worker's kernel cap holds for its whole life, so it is the largest cap the owner's preferences
    // allow at any moment; the lower cap while the user is active is the agent's to check. Where the owner
    // set none, the worker is still capped at 90% of the machine's memory: a runaway or hostile model then
    // meets the kernel's refusal and fails its subtask, rather than pushing the desktop into swap or the OOM
    // killer.
    const auto orMachine = [](qint64 cap) {
        if (cap > 0)
            return cap;
        const long pages = ::sysconf(_SC_PHYS_PAGES);
        const long pageSize = ::sysconf(_SC_PAGESIZE);
        return pages > 0 && pageSize > 0 ? qint64(pages) * pageSize / 10 * 9 : qint64(0);
    };
    if (m_settings.dedicated)
        return orMachine(m_limits.memoryCapBytes);
    const Preferences& p = m_desktop->preferences();
    if (p.onlyWhenIdle())
        return orMachine(p.memoryIdleBytes());
    const qint64 idle = p.memoryIdleBytes();
    const qint64 active = p.memoryActiveBytes();
    return orMachine(idle == 0 || active == 0 ? 0 : std::max(idle, active));
}

int MachineGate::taskSlots() const
{
    if (m_settings.dedicated)
        return m_settings.maxTasks;
    return std::clamp(m_desktop->decision().threads, 1, m_settings.maxTasks);
}

void MachineGate::syncWorkers()
{
    const bool allowed = computeAllowed();
    const bool gpuHeld = !m_settings.dedicated && m_desktop->preferences().gpu() == Preferences::Gpu::Idle &&
                         !m_desktop->decision().gpuAllowed;
    QList<LeaseId> toStart;
    for (const auto& active : std::as_const(m_subtasks)) {
        WorkerProcess* worker = active->worker;
        if (!worker) {
            if (allowed && active->startWhenAllowed)
                toStart << active->record.leaseId;
            continue;
        }
        // A subtask on the GPU stays there (its checkpoint is tied to the device): with "GPU only when
        // idle" it waits while the user is active, even when the CPU ones may go on. "auto" may be on a GPU.
        const bool onGpu = worker->launch().device != u"cpu";
        const bool wantPaused = !allowed || (onGpu && gpuHeld);
        // The memory cap follows the owner's preference only while the worker computes: lowering it under a
        // paused worker would kill work that costs nothing while it waits.
        if (!wantPaused)
            worker->setMemoryCap(m_limits.memoryCapBytes);
        if (wantPaused == active->pauseSent)
            continue;
        active->pauseSent = wantPaused;
        worker->send(wantPaused ? "pause" : "resume");
    }
    for (const LeaseId& leaseId : std::as_const(toStart))
        if (m_subtasks.contains(leaseId))
            m_hooks.startWorker(leaseId);
}

void MachineGate::applyDecision(const Decision& decision)
{
    if (m_settings.dedicated)
        return;
    // The cores the owner lets Gleaner use are shared among the subtasks held at once. A running worker keeps
    // its thread count (its checkpoint is tied to it); the next subtask gets the new one.
    m_limits.threads = std::max(1, decision.threads / taskSlots());
    if (decision.cpuShare != m_limits.cpuShare) {
        m_limits.cpuShare = decision.cpuShare;
        const QByteArray command = "share " + QByteArray::number(decision.cpuShare, 'g', 4);
        for (const auto& active : std::as_const(m_subtasks))
            if (active->worker)
                active->worker->send(command);
    }
    m_limits.memoryCapBytes = decision.memoryCapBytes;
    syncWorkers();
    const bool allowed = computeAllowed();
    if (allowed && !m_computeWasAllowed)
        m_hooks.leaseNow(); // the machine became ours to use: ask for work now
    else if (!allowed)
        m_hooks.holdLeasing(); // no new work while the owner's machine is not ours to use
    m_computeWasAllowed = allowed;
    m_hooks.stateChanged();
}

QString MachineGate::policyFile() const
{
    return m_desktop->store().policyFile();
}

void MachineGate::watchPolicyFile()
{
    const QString file = m_desktop->store().policyFile();
    if (file.isEmpty())
        return;
    m_policySettle.setSingleShot(true);
    m_policySettle.setInterval(500);
    QObject::connect(&m_policySettle, &QTimer::timeout, &m_policySettle, [this] {
        const QString path = m_desktop->store().policyFile();
        if (QFileInfo::exists(path) && !m_policyWatcher.files().contains(path))
            m_policyWatcher.addPath(path); // a save that replaced the file dropped the old watch
        reloadPolicy(QStringLiteral("the file changed"));
    });
    const auto changed = [this](const QString&) { m_policySettle.start(); };
    QObject::connect(&m_policyWatcher, &QFileSystemWatcher::fileChanged, &m_policyWatcher, changed);
    QObject::connect(&m_policyWatcher, &QFileSystemWatcher::directoryChanged, &m_policyWatcher, changed);
    const QString folder = QFileInfo(file).absolutePath();
    if (QFileInfo::exists(folder))
        m_policyWatcher.addPath(folder);
    if (QFileInfo::exists(file))
        m_policyWatcher.addPath(file);
}

void MachineGate::reloadPolicy(const QString& why)
{
    const QString file = m_desktop->store().policyFile();
    if (file.isEmpty())
        return;
    auto changed = m_desktop->reloadPolicy();
    if (!changed) {
        m_feed.log(
            QStringLiteral("error"),
            QStringLiteral("policy file re-read (%1) and refused; the last good policy stays in force: %2")
                .arg(why, changed.error()));
        return;
    }
    if (*changed)
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("policy file %1 re-read (%2): in force now; locked: %3")
                       .arg(file, why,
                            m_desktop->store().locked().isEmpty()
                                ? QStringLiteral("nothing")
                                : m_desktop->store().locked().join(QStringLiteral(", "))));
    else if (why.startsWith(u"SIGHUP"))
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("policy file %1 re-read (%2): nothing changed").arg(file, why));
}

void MachineGate::applyPreferences()
{
    const Preferences& p = m_desktop->preferences();
    m_feed.publish(
        QJsonObject{{QStringLiteral("event"), QStringLiteral("preferences")},
                    {QStringLiteral("values"), p.toJson()},
                    {QStringLiteral("locked"), QJsonArray::fromStringList(m_desktop->store().locked())}});
    if (m_settings.dedicated)
        return; // a dedicated agent's resources come from its command line
    m_limits.checkpointIntervalSeconds = p.checkpointSeconds(); // from the next worker on
    if (p.cacheBytes() != m_limits.cacheCapBytes) {
        m_limits.cacheCapBytes = p.cacheBytes();
        const auto report = m_cache.setCap(m_limits.cacheCapBytes);
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("cache cap now %1 MB: %2 cached file(s) removed%3")
                       .arg(m_limits.cacheCapBytes >> 20)
                       .arg(report.evicted.size())
                       .arg(report.overCap() ? QStringLiteral("; the files of the subtasks in hand "
                                                              "exceed it until they finish")
                                             : QString()));
    }
    if (p.uploadBytesPerSecond() != m_limits.uploadBytesPerSecond ||
        p.downloadBytesPerSecond() != m_limits.downloadBytesPerSecond) {
        m_limits.uploadBytesPerSecond = p.uploadBytesPerSecond();
        m_limits.downloadBytesPerSecond = p.downloadBytesPerSecond();
        const qint64 up = m_limits.uploadBytesPerSecond, down = m_limits.downloadBytesPerSecond;
        m_hooks.rateLimitsChanged(up, down);
    }
}

void MachineGate::pause()
{
    if (m_paused)
        return;
    m_paused = true;
    m_hooks.holdLeasing();
    syncWorkers();
    m_feed.log(QStringLiteral("info"), QStringLiteral("paused on request"));
}

void MachineGate::resume()
{
    if (!m_paused && !m_snoozeUntilMs)
        return;
    m_paused = false;
    m_snoozeUntilMs = 0;
    m_snoozeTimer.stop();
    syncWorkers();
    m_feed.log(QStringLiteral("info"), QStringLiteral("resumed on request"));
    m_hooks.leaseNow();
}

void MachineGate::endOwnerHold()
{
    m_paused = false;
    m_snoozeUntilMs = 0;
    m_snoozeTimer.stop();
    syncWorkers();
}

Result<QJsonObject> MachineGate::preferences(const QString& command, const QJsonObject& args)
{
    if (command == u"preferences")
        return m_desktop->store().describe();
    {
        const QJsonValue values = args.value(QStringLiteral("values"));
        if (!values.isObject())
            return fail(QStringLiteral(
                "set_preferences needs {\"values\": {KEY: VALUE, ...}}; `preferences` lists the keys"));
        auto changed = m_desktop->setPreferences(values.toObject());
        if (!changed)
            return fail(changed.error());
        if (*changed)
            m_feed.log(QStringLiteral("info"),
                       QStringLiteral("preferences changed: %1")
                           .arg(QStringList(values.toObject().keys()).join(QStringLiteral(", "))));
        return m_desktop->store().describe();
    }
}

Result<qint64> MachineGate::snooze(const QJsonObject& args)
{
    const QJsonValue secondsValue = args.value(QStringLiteral("seconds"));
    const double seconds = secondsValue.toDouble(-1);
    if (!secondsValue.isDouble() || seconds < 1 || seconds > 86400)
        return fail(QStringLiteral("snooze needs {\"seconds\": N} with N from 1 to 86400 (a day)"));
    m_snoozeUntilMs = m_clock.nowMs() + qint64(seconds * 1000);
    armSnoozeTimer();
    m_hooks.holdLeasing();
    syncWorkers();
    m_feed.log(
        QStringLiteral("info"),
        QStringLiteral("snoozed until %1")
            .arg(QDateTime::fromMSecsSinceEpoch(m_snoozeUntilMs).toString(QStringLiteral("HH:mm:ss"))));
    return m_snoozeUntilMs;
}

void MachineGate::armSnoozeTimer()
{
    // At most a minute at a time: the timer's clock stops while the machine sleeps, the snooze's end (wall
    // time) does not.
    m_snoozeTimer.start(int(std::clamp<qint64>(m_snoozeUntilMs - m_clock.nowMs(), 1, 60'000)));
}

void MachineGate::endSnooze()
{
    if (!m_snoozeUntilMs)
        return;
    if (m_clock.nowMs() < m_snoozeUntilMs)
        return armSnoozeTimer();
    m_snoozeUntilMs = 0;
    m_feed.log(QStringLiteral("info"), QStringLiteral("snooze over"));
    syncWorkers();
    if (computeAllowed())
        m_hooks.leaseNow();
    m_hooks.stateChanged();
}

std::optional<std::tuple<QString, QString, QString>> MachineGate::policyState() const
{
    if (m_settings.dedicated)
        return std::nullopt;
    const Decision& d = m_desktop->decision();
    if (d.mode == Decision::Mode::Compute)
        return std::nullopt;
    return std::make_tuple(d.mode == Decision::Mode::Pause ? QStringLiteral("paused")
                                                           : QStringLiteral("waiting"),
                           d.reason, d.reasonCode);
}

} // namespace gleaner::agent
