#include "daemon/DesktopPolicy.h"

#include "gpu/NvmlGpuProbe.h"
#include "idle/LogindIdleSource.h"
#include "idle/SessionIdleSource.h"
#include "idle/SystemIdleProbe.h"
#include "power/SysfsPowerProbe.h"
#include "system/ProcCpuProbe.h"
#include "system/ProcProcessProbe.h"

#include <QJsonArray>
#include <QThread>

namespace gleaner::agent {

DesktopProbes::DesktopProbes() = default;
DesktopProbes::DesktopProbes(DesktopProbes&&) noexcept = default;
DesktopProbes& DesktopProbes::operator=(DesktopProbes&&) noexcept = default;
DesktopProbes::~DesktopProbes() = default;

DesktopProbes DesktopProbes::system(const QString& idleSource, std::shared_ptr<SessionReports> sessions)
{
    DesktopProbes probes;
    if (idleSource == u"sessions") {
        std::vector<std::unique_ptr<IdleSource>> sources;
        sources.push_back(std::make_unique<SessionIdleSource>(std::move(sessions)));
        sources.push_back(std::make_unique<LogindIdleSource>()); // for logind's inhibitors, which are system-wide
        probes.idle = std::make_unique<SystemIdleProbe>(idleSource, std::move(sources));
    } else {
        probes.idle = std::make_unique<SystemIdleProbe>(idleSource);
    }
    probes.power = std::make_unique<SysfsPowerProbe>();
    probes.cpu = std::make_unique<ProcCpuProbe>();
    probes.processes = std::make_unique<ProcProcessProbe>();
    probes.gpu = std::make_unique<NvmlGpuProbe>();
    return probes;
}

DesktopPolicy::DesktopPolicy(PreferenceStore store, DesktopProbes probes, const Clock& clock, bool dedicated,
                             DesktopCadence cadence, QObject* parent)
    : QObject(parent), m_store(std::move(store)), m_probes(std::move(probes)), m_clock(clock),
      m_dedicated(dedicated), m_cadence(cadence)
{
    m_observation.cores = std::max(1, QThread::idealThreadCount());
    if (m_dedicated) {
        m_decision.mode = Decision::Mode::Compute;
        m_decision.reasonCode = QStringLiteral("computing");
        m_decision.reason = QStringLiteral("Computing: a dedicated machine");
        m_decision.userIdle = true;
        m_decision.gpuAllowed = true;
        m_evaluated = true;
    }
    m_timer.setInterval(m_cadence.idleMs);
    connect(&m_timer, &QTimer::timeout, this, &DesktopPolicy::sample);
}

DesktopPolicy::~DesktopPolicy() = default;

void DesktopPolicy::start()
{
    if (m_dedicated)
        return;
    sample();
    m_timer.start();
}

void DesktopPolicy::sample()
{
    if (m_dedicated)
        return;
    const qint64 now = m_clock.nowMs();
    const auto due = [now](qint64& last, int everyMs) {
        if (last >= 0 && now - last < everyMs && now >= last)
            return false;
        last = now;
        return true;
    };
    m_observation.nowMs = now;
    m_observation.localTime = QDateTime::fromMSecsSinceEpoch(now);
    if (m_probes.idle)
        m_observation.idle = m_probes.idle->sample();
    if (m_probes.cpu && due(m_lastCpuMs, m_cadence.cpuMs))
        m_observation.cpu = m_probes.cpu->sample();
    if (m_probes.power && due(m_lastPowerMs, m_cadence.powerMs))
        m_observation.power = m_probes.power->sample();
    if (m_probes.processes && due(m_lastProcessesMs, m_cadence.processesMs)) {
        const QStringList names = m_store.current().pausePrograms();
        m_observation.pauseProgramsRunning =
            names.isEmpty() ? QStringList() : m_probes.processes->running(names);
    }
    // The GPU is only looked at when the owner lets Gleaner use it: NVML costs a driver call.
    if (m_probes.gpu && m_store.current().gpu() != Preferences::Gpu::Never &&
        due(m_lastGpuMs, m_cadence.gpuMs))
        m_observation.gpu = m_probes.gpu->sample();
    evaluate();
}

void DesktopPolicy::evaluate()
{
    if (m_dedicated)
        return;
    const Decision next = m_engine.evaluate(m_store.current(), m_observation);
    if (m_evaluated && next == m_decision)
        return;
    m_decision = next;
    m_evaluated = true;
    Q_EMIT decisionChanged(m_decision);
}

Result<bool> DesktopPolicy::setPreferences(const QJsonObject& values)
{
    return changed(m_store.set(values));
}

Result<bool> DesktopPolicy::reloadPolicy()
{
    return changed(m_store.reloadPolicy());
}

Result<bool> DesktopPolicy::changed(Result<bool> changed)
{
    if (!changed)
        return changed;
    if (*changed) {
        // A new pause list must be looked for at once, not in up to five seconds.
        m_lastProcessesMs = -1;
        Q_EMIT preferencesChanged();
        sample();
    }
    return changed;
}

QJsonObject DesktopPolicy::statusObject() const
{
    const auto orNull = [](bool known, const QJsonValue& value) {
        return known ? value : QJsonValue(QJsonValue::Null);
    };
    // A dedicated agent never samples: every part of its observation stays unknown, so null.
    const Observation& o = m_observation;
    QJsonObject gpu;
    if (o.gpu.known)
        gpu = QJsonObject{{QStringLiteral("count"), o.gpu.count},
                          {QStringLiteral("name"), o.gpu.name},
                          {QStringLiteral("utilisation_percent"), o.gpu.utilisationPercent}};
    return QJsonObject{
        {QStringLiteral("dedicated"), m_dedicated},
        {QStringLiteral("idle_source"), orNull(o.idle.known, o.idle.source)},
        {QStringLiteral("idle_seconds"), orNull(o.idle.known, double(o.idle.idleMs) / 1000.0)},
        {QStringLiteral("inhibited_by"),
         orNull(o.idle.inhibited,
                o.idle.inhibitedBy.isEmpty() ? QStringLiteral("a program") : o.idle.inhibitedBy)},
        {QStringLiteral("on_battery"), orNull(o.power.known, o.power.onBattery)},
        {QStringLiteral("battery_percent"),
         orNull(o.power.known && o.power.batteryPercent >= 0, o.power.batteryPercent)},
        {QStringLiteral("other_cpu_percent"), orNull(o.cpu.known, o.cpu.otherPercent)},
        {QStringLiteral("pause_programs_running"), QJsonArray::fromStringList(o.pauseProgramsRunning)},
        {QStringLiteral("gpu"), orNull(o.gpu.known, gpu)},
        {QStringLiteral("cores"), o.cores},
        {QStringLiteral("mode"), m_decision.mode == Decision::Mode::Compute ? QStringLiteral("compute")
                                 : m_decision.mode == Decision::Mode::Pause ? QStringLiteral("pause")
                                                                            : QStringLiteral("wait")},
    };
}

} // namespace gleaner::agent
