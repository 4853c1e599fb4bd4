// The daemon's side of the desktop policy (docs/desktop.md): what a Decision does to the workers, the leasing
// and the resource limits; the owner's snooze; the preferences on the control socket.

#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "net/CoordinatorClient.h"

#include <QDateTime>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>

#include <algorithm>

#include <unistd.h>

namespace gleaner::agent {

bool AgentDaemon::computeAllowed() const
{
    if (m_paused || snoozed())
        return false;
    return m_options.dedicated || m_desktop->decision().mode == Decision::Mode::Compute;
}

QString AgentDaemon::workerDevice() const
{
    // The GPU preference decides for new subtasks: "never" keeps them on the CPU whatever --device says;
    // otherwise --device (auto: a GPU when libtorch can use one) stands, and "idle" holds GPU workers while
    // the user is active (syncWorkers).
    if (m_options.dedicated || m_options.device == u"cpu")
        return m_options.device;
    return m_desktop->preferences().gpu() == Preferences::Gpu::Never ? QStringLiteral("cpu")
                                                                     : m_options.device;
}

qint64 AgentDaemon::kernelMemoryCap() const
{
    // The worker's kernel cap holds for its whole life, so it is the largest cap the owner's preferences allow
    // at any moment; the lower cap while the user is active is the agent's to check. Where the owner set none,
    // the worker is still capped at 90% of the machine's memory: a runaway or hostile model then meets the
    // kernel's refusal and fails its subtask, rather than pushing the desktop into swap or the OOM killer.
    const auto orMachine = [](qint64 cap) {
        if (cap > 0)
            return cap;
        const long pages = ::sysconf(_SC_PHYS_PAGES);
        const long pageSize = ::sysconf(_SC_PAGESIZE);
        return pages > 0 && pageSize > 0 ? qint64(pages) * pageSize / 10 * 9 : qint64(0);
    };
    if (m_options.dedicated)
        return orMachine(m_options.memoryCapBytes);
    const Preferences& p = m_desktop->preferences();
    if (p.onlyWhenIdle())
        return orMachine(p.memoryIdleBytes());
    const qint64 idle = p.memoryIdleBytes();
    const qint64 active = p.memoryActiveBytes();
    return orMachine(idle == 0 || active == 0 ? 0 : std::max(idle, active));
}

int AgentDaemon::taskSlots() const
{
    if (m_options.dedicated)
        return m_options.maxTasks;
    return std::clamp(m_desktop->decision().threads, 1, m_options.maxTasks);
}

std::pair<int, QString> AgentDaemon::launchSettings(const Active& active)
{
    const QString path = active.record.taskDir + QStringLiteral("/launch.json");
    QFile file(path);
    if (file.open(QIODevice::ReadOnly)) {
        const QJsonObject kept = QJsonDocument::fromJson(file.readAll()).object();
        const int threads = kept.value(QStringLiteral("threads")).toInt();
        const QString device = kept.value(QStringLiteral("device")).toString();
        if (threads > 0 && !device.isEmpty())
            return {threads, device};
    }
    const std::pair<int, QString> settings{m_options.threads, workerDevice()};
    QSaveFile out(path);
    if (!out.open(QIODevice::WriteOnly) ||
        out.write(QJsonDocument(QJsonObject{{QStringLiteral("threads"), settings.first},
                                            {QStringLiteral("device"), settings.second}})
                      .toJson(QJsonDocument::Compact)) < 0 ||
        !out.commit())
        m_feed.log(
            QStringLiteral("warning"),
            QStringLiteral("cannot write %1: a restart of this subtask may use other settings").arg(path));
    return settings;
}

void AgentDaemon::syncWorkers()
{
    const bool allowed = computeAllowed();
    const bool gpuHeld = !m_options.dedicated && m_desktop->preferences().gpu() == Preferences::Gpu::Idle &&
                         !m_desktop->decision().gpuAllowed;
    QList<LeaseId> toStart;
    for (const auto& active : std::as_const(m_active)) {
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
            worker->setMemoryCap(m_options.memoryCapBytes);
        if (wantPaused == active->pauseSent)
            continue;
        active->pauseSent = wantPaused;
        worker->send(wantPaused ? "pause" : "resume");
    }
    for (const LeaseId& leaseId : std::as_const(toStart))
        if (m_active.contains(leaseId))
            startWorker(leaseId);
}

void AgentDaemon::applyDecision(const Decision& decision)
{
    if (m_options.dedicated)
        return;
    // The cores the owner lets Gleaner use are shared among the subtasks held at once. A running worker keeps
    // its thread count (its checkpoint is tied to it); the next subtask gets the new one.
    m_options.threads = std::max(1, decision.threads / taskSlots());
    if (decision.cpuShare != m_options.cpuShare) {
        m_options.cpuShare = decision.cpuShare;
        const QByteArray command = "share " + QByteArray::number(decision.cpuShare, 'g', 4);
        for (const auto& active : std::as_const(m_active))
            if (active->worker)
                active->worker->send(command);
    }
    m_options.memoryCapBytes = decision.memoryCapBytes;
    syncWorkers();
    const bool allowed = computeAllowed();
    if (allowed && !m_computeWasAllowed)
        m_leasing->schedule(0); // the machine became ours to use: ask for work now
    else if (!allowed)
        m_leasing->hold(); // no new work while the owner's machine is not ours to use
    m_computeWasAllowed = allowed;
    updateState();
}

QString AgentDaemon::policyFile() const
{
    return m_desktop->store().policyFile();
}

void AgentDaemon::watchPolicyFile()
{
    const QString file = m_desktop->store().policyFile();
    if (file.isEmpty())
        return;
    m_policySettle.setSingleShot(true);
    m_policySettle.setInterval(500);
    connect(&m_policySettle, &QTimer::timeout, this, [this] {
        const QString path = m_desktop->store().policyFile();
        if (QFileInfo::exists(path) && !m_policyWatcher.files().contains(path))
            m_policyWatcher.addPath(path); // a save that replaced the file dropped the old watch
        reloadPolicy(QStringLiteral("the file changed"));
    });
    const auto changed = [this](const QString&) { m_policySettle.start(); };
    connect(&m_policyWatcher, &QFileSystemWatcher::fileChanged, this, changed);
    connect(&m_policyWatcher, &QFileSystemWatcher::directoryChanged, this, changed);
    const QString folder = QFileInfo(file).absolutePath();
    if (QFileInfo::exists(folder))
        m_policyWatcher.addPath(folder);
    if (QFileInfo::exists(file))
        m_policyWatcher.addPath(file);
}

void AgentDaemon::reloadPolicy(const QString& why)
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

void AgentDaemon::applyPreferences()
{
    const Preferences& p = m_desktop->preferences();
    m_feed.publish(
        QJsonObject{{QStringLiteral("event"), QStringLiteral("preferences")},
                    {QStringLiteral("values"), p.toJson()},
                    {QStringLiteral("locked"), QJsonArray::fromStringList(m_desktop->store().locked())}});
    if (m_options.dedicated)
        return; // a dedicated agent's resources come from its command line
    m_options.checkpointIntervalSeconds = p.checkpointSeconds(); // from the next worker on
    if (p.cacheBytes() != m_options.cacheCapBytes) {
        m_options.cacheCapBytes = p.cacheBytes();
        const auto report = m_cache->setCap(m_options.cacheCapBytes);
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("cache cap now %1 MB: %2 cached file(s) removed%3")
                       .arg(m_options.cacheCapBytes >> 20)
                       .arg(report.evicted.size())
                       .arg(report.overCap() ? QStringLiteral("; the files of the subtasks in hand "
                                                              "exceed it until they finish")
                                             : QString()));
    }
    if (p.uploadBytesPerSecond() != m_options.uploadBytesPerSecond ||
        p.downloadBytesPerSecond() != m_options.downloadBytesPerSecond) {
        m_options.uploadBytesPerSecond = p.uploadBytesPerSecond();
        m_options.downloadBytesPerSecond = p.downloadBytesPerSecond();
        const qint64 up = m_options.uploadBytesPerSecond, down = m_options.downloadBytesPerSecond;
        // The client belongs to the network thread: the new caps take effect from its next transfer.
        m_network->post([this, up, down] { m_client->setRateLimits(up, down); });
    }
}

Result<QJsonObject> AgentDaemon::handleDesktop(const QString& command, const QJsonObject& args)
{
    if (command == u"preferences")
        return m_desktop->store().describe();
    if (command == u"set_preferences") {
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
    // snooze
    const QJsonValue secondsValue = args.value(QStringLiteral("seconds"));
    const double seconds = secondsValue.toDouble(-1);
    if (!secondsValue.isDouble() || seconds < 1 || seconds > 86400)
        return fail(QStringLiteral("snooze needs {\"seconds\": N} with N from 1 to 86400 (a day)"));
    m_snoozeUntilMs = nowMs() + qint64(seconds * 1000);
    armSnoozeTimer();
    m_leasing->hold();
    syncWorkers();
    m_feed.log(
        QStringLiteral("info"),
        QStringLiteral("snoozed until %1")
            .arg(QDateTime::fromMSecsSinceEpoch(m_snoozeUntilMs).toString(QStringLiteral("HH:mm:ss"))));
    updateState();
    return QJsonObject{{QStringLiteral("state"), m_state}, {QStringLiteral("until_ms"), m_snoozeUntilMs}};
}

void AgentDaemon::armSnoozeTimer()
{
    // At most a minute at a time: the timer's clock stops while the machine sleeps, the snooze's end (wall
    // time) does not.
    m_snoozeTimer.start(int(std::clamp<qint64>(m_snoozeUntilMs - nowMs(), 1, 60'000)));
}

void AgentDaemon::endSnooze()
{
    if (!m_snoozeUntilMs)
        return;
    if (nowMs() < m_snoozeUntilMs)
        return armSnoozeTimer();
    m_snoozeUntilMs = 0;
    m_feed.log(QStringLiteral("info"), QStringLiteral("snooze over"));
    syncWorkers();
    if (computeAllowed())
        m_leasing->schedule(0);
    updateState();
}

std::optional<std::tuple<QString, QString, QString>> AgentDaemon::policyState() const
{
    if (m_options.dedicated)
        return std::nullopt;
    const Decision& d = m_desktop->decision();
    if (d.mode == Decision::Mode::Compute)
        return std::nullopt;
    return std::make_tuple(d.mode == Decision::Mode::Pause ? QStringLiteral("paused")
                                                           : QStringLiteral("waiting"),
                           d.reason, d.reasonCode);
}

} // namespace gleaner::agent
