// The daemon's side of the desktop policy (docs/desktop.md): what a Decision does to the workers, the leasing
// and the resource limits; the owner's snooze; the preferences on the control socket.

#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "net/CoordinatorClient.h"

#include <QDateTime>
#include <QJsonArray>

namespace gleaner::agent {

bool AgentDaemon::computeAllowed() const
{
    if (m_paused || snoozed())
        return false;
    return m_options.dedicated || m_desktop->decision().mode == Decision::Mode::Compute;
}

QString AgentDaemon::workerDevice() const
{
    // With --device auto the worker takes a GPU when libtorch can use one; the owner's GPU preference decides
    // whether it may look.
    if (m_options.device != u"auto" || m_options.dedicated || m_desktop->decision().gpuAllowed)
        return m_options.device;
    return QStringLiteral("cpu");
}

void AgentDaemon::syncWorkers()
{
    const bool allowed = computeAllowed();
    const bool gpuAllowed = m_options.dedicated || m_desktop->decision().gpuAllowed;
    for (const auto& active : std::as_const(m_active)) {
        WorkerProcess* worker = active->worker;
        if (!worker)
            continue;
        // A subtask started on the GPU stays there (its checkpoint is tied to the device): with "GPU only
        // when idle" it waits while the user is active, even when the CPU ones may go on.
        const bool onGpu = worker->launch().device.startsWith(u"cuda");
        const bool wantPaused = !allowed || (onGpu && !gpuAllowed);
        if (wantPaused == active->pauseSent)
            continue;
        active->pauseSent = wantPaused;
        worker->send(wantPaused ? "pause" : "resume");
    }
}

void AgentDaemon::applyDecision(const Decision& decision)
{
    if (m_options.dedicated)
        return;
    // The cores the owner lets Gleaner use are shared among the subtasks held at once. A running worker keeps
    // its thread count (its checkpoint is tied to it); the next subtask gets the new one.
    m_options.threads = std::max(1, decision.threads / std::max(1, m_options.maxTasks));
    if (decision.cpuShare != m_options.cpuShare) {
        m_options.cpuShare = decision.cpuShare;
        const QByteArray command = "share " + QByteArray::number(decision.cpuShare, 'g', 4);
        for (const auto& active : std::as_const(m_active))
            if (active->worker)
                active->worker->send(command);
    }
    if (decision.memoryCapBytes != m_options.memoryCapBytes) {
        m_options.memoryCapBytes = decision.memoryCapBytes;
        for (const auto& active : std::as_const(m_active))
            if (active->worker)
                active->worker->setMemoryCap(decision.memoryCapBytes);
    }
    const bool wasLeasing = m_leaseTimer.isActive() || m_leaseInFlight;
    syncWorkers();
    if (computeAllowed()) {
        if (!wasLeasing)
            scheduleLease(0);
    } else {
        m_leaseTimer.stop(); // no new work while the owner's machine is not ours to use
    }
    updateState();
}

void AgentDaemon::applyPreferences()
{
    const Preferences& p = m_desktop->preferences();
    Q_EMIT controlEvent(
        QJsonObject{{QStringLiteral("event"), QStringLiteral("preferences")},
                    {QStringLiteral("values"), p.toJson()},
                    {QStringLiteral("locked"), QJsonArray::fromStringList(m_desktop->store().locked())}});
    if (m_options.dedicated)
        return; // a dedicated agent's resources come from its command line
    m_options.checkpointIntervalSeconds = p.checkpointSeconds(); // from the next worker on
    if (p.cacheBytes() != m_options.cacheCapBytes) {
        m_options.cacheCapBytes = p.cacheBytes();
        const auto report = m_cache->setCap(m_options.cacheCapBytes);
        log(QStringLiteral("info"),
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
            log(QStringLiteral("info"),
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
    m_snoozeTimer.start(int(seconds * 1000));
    m_leaseTimer.stop();
    syncWorkers();
    log(QStringLiteral("info"),
        QStringLiteral("snoozed until %1")
            .arg(QDateTime::fromMSecsSinceEpoch(m_snoozeUntilMs).toString(QStringLiteral("HH:mm:ss"))));
    updateState();
    return QJsonObject{{QStringLiteral("state"), m_state}, {QStringLiteral("until_ms"), m_snoozeUntilMs}};
}

void AgentDaemon::endSnooze()
{
    if (!m_snoozeUntilMs)
        return;
    m_snoozeUntilMs = 0;
    log(QStringLiteral("info"), QStringLiteral("snooze over"));
    syncWorkers();
    if (computeAllowed())
        scheduleLease(0);
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
