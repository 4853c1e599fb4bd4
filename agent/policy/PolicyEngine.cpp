#include "PolicyEngine.h"

#include "util/DurationText.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace gleaner::agent {

namespace {

constexpr qint64 kCpuCalmMs = 30'000;
constexpr double kCpuCalmFraction = 0.8;

Decision decided(Decision::Mode mode, const char* code, const QString& reason)
{
    Decision decision;
    decision.mode = mode;
    decision.reasonCode = QString::fromLatin1(code);
    decision.reason = reason;
    return decision;
}

// "Mon 18:00" in English whatever the locale: the reason is compared in tests and read in bug reports.
QString dayAndTime(const QDateTime& local)
{
    static const std::array<const char*, 7> days{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
    return QString::fromLatin1(days[size_t(local.date().dayOfWeek() - 1)]) + u' ' +
           local.time().toString(QStringLiteral("HH:mm"));
}

QString programsRunning(const QStringList& programs)
{
    if (programs.size() == 1)
        return QStringLiteral("Paused: %1 is running").arg(programs[0]);
    if (programs.size() == 2)
        return QStringLiteral("Paused: %1 and %2 are running").arg(programs[0], programs[1]);
    // One arg() call, so a program named "%3" cannot take the count's place.
    return QStringLiteral("Paused: %1, %2 and %3 more are running")
        .arg(programs[0], programs[1], QString::number(programs.size() - 2));
}

} // namespace

QString PolicyEngine::formatDuration(qint64 ms)
{
    return durationText(std::max<qint64>(0, ms) / 1000);
}

void PolicyEngine::reset()
{
    m_previous = Decision();
    m_cpuBlocking = false;
    m_cpuCalmSinceMs = -1;
}

bool PolicyEngine::cpuBlocks(const Preferences& prefs, const Observation& now)
{
    const int limit = prefs.otherCpuLimitPercent();
    if (!now.cpu.known || limit >= 100) {
        m_cpuBlocking = false;
        m_cpuCalmSinceMs = -1;
        return false;
    }
    if (now.cpu.otherPercent > limit) {
        m_cpuBlocking = true;
        m_cpuCalmSinceMs = -1;
        return true;
    }
    if (!m_cpuBlocking)
        return false;
    if (now.cpu.otherPercent > kCpuCalmFraction * limit) {
        m_cpuCalmSinceMs = -1; // a dip that is not deep enough does not count towards the calm time
        return true;
    }
    // A clock that stepped back restarts the calm time rather than ending it early or never.
    if (m_cpuCalmSinceMs < 0 || now.nowMs < m_cpuCalmSinceMs)
        m_cpuCalmSinceMs = now.nowMs;
    if (now.nowMs - m_cpuCalmSinceMs >= kCpuCalmMs) {
        m_cpuBlocking = false;
        m_cpuCalmSinceMs = -1;
        return false;
    }
    return true;
}

Decision PolicyEngine::evaluate(const Preferences& prefs, const Observation& now)
{
    using Mode = Decision::Mode;
    const bool onlyWhenIdle = prefs.onlyWhenIdle();
    const qint64 idleMs = std::max<qint64>(0, now.idle.idleMs);
    const qint64 idleNeededMs = qint64(prefs.idleSeconds()) * 1000;
    const bool inhibited = prefs.respectInhibitors() && now.idle.known && now.idle.inhibited;
    // Without a local time the daemon forgot to fill, the machine's zone turns nowMs into one.
    const QDateTime local =
        now.localTime.isValid() ? now.localTime : QDateTime::fromMSecsSinceEpoch(now.nowMs);
    // Updated on every call: see the header.
    const bool cpuBusy = cpuBlocks(prefs, now);

    Decision decision;
    if (!prefs.schedule().allows(local)) {
        const QDateTime next = prefs.schedule().nextStart(local);
        decision = decided(
            Mode::Wait, "schedule",
            next.isValid()
                ? QStringLiteral("Waiting: outside your schedule; next start %1").arg(dayAndTime(next))
                : QStringLiteral("Waiting: outside your schedule"));
    } else if (prefs.pauseOnBattery() && now.power.known && now.power.onBattery) {
        decision = decided(Mode::Pause, "on_battery", QStringLiteral("Paused: on battery"));
    } else if (!now.pauseProgramsRunning.isEmpty()) {
        decision = decided(Mode::Pause, "program_running", programsRunning(now.pauseProgramsRunning));
    } else if (onlyWhenIdle && inhibited) {
        decision = decided(
            Mode::Pause, "inhibited",
            now.idle.inhibitedBy.isEmpty()
                ? QStringLiteral("Paused: a program keeps the screen awake (a video or a presentation)")
                : QStringLiteral("Paused: %1 keeps the screen awake").arg(now.idle.inhibitedBy));
    } else if (onlyWhenIdle && !now.idle.known) {
        decision =
            decided(Mode::Wait, "idle_unknown",
                    QStringLiteral("Waiting: cannot tell whether the computer is in use (no idle source); "
                                   "turn off \"only when idle\" to compute anyway"));
    } else if (onlyWhenIdle && idleMs < idleNeededMs) {
        const bool interrupted =
            m_previous.mode == Mode::Compute || m_previous.reasonCode == QLatin1StringView("user_active");
        decision =
            interrupted
                ? decided(Mode::Pause, "user_active",
                          QStringLiteral("Paused: user active (last input %1 ago); resuming after %2 idle")
                              .arg(formatDuration(idleMs), formatDuration(idleNeededMs)))
                : decided(Mode::Wait, "idle_wait",
                          QStringLiteral("Waiting: you were active %1 ago, starting after %2 idle")
                              .arg(formatDuration(idleMs), formatDuration(idleNeededMs)));
    } else if (cpuBusy) {
        const int limit = prefs.otherCpuLimitPercent();
        const double other = now.cpu.otherPercent;
        // Rounded up above the limit so that "26% (limit 25%)" never reads "25% (limit 25%)".
        QString reason = QStringLiteral("Paused: other programs use %1% of the CPU (limit %2%)")
                             .arg(other > limit ? qint64(std::ceil(other)) : qint64(std::lround(other)))
                             .arg(limit);
        if (other <= limit)
            reason += QStringLiteral("; resuming once below %1% for %2")
                          .arg(QString::number(kCpuCalmFraction * limit), formatDuration(kCpuCalmMs));
        decision = decided(Mode::Pause, "cpu_busy", reason);
    } else {
        decision = decided(
            Mode::Compute, "computing",
            onlyWhenIdle ? QStringLiteral("Computing: you have been idle for %1").arg(formatDuration(idleMs))
                         : QStringLiteral("Computing: \"only when idle\" is off, so Gleaner "
                                          "computes while you work"));
    }

    const int cores = std::max(1, now.cores);
    decision.threads = prefs.maxCores() == 0 ? std::max(1, cores - 1) : std::min(prefs.maxCores(), cores);
    decision.cpuShare = prefs.cpuSharePercent() / 100.0;
    decision.userIdle = now.idle.known && idleMs >= idleNeededMs && !inhibited;
    // The cap while the user is active only applies when Gleaner computes beside them (only_when_idle off):
    // otherwise the workers are paused then, and a lower cap would only kill a paused subtask.
    decision.memoryCapBytes = decision.userIdle || !now.idle.known || prefs.onlyWhenIdle()
                                  ? prefs.memoryIdleBytes()
                                  : prefs.memoryActiveBytes();
    decision.gpuAllowed = prefs.gpu() == Preferences::Gpu::Always ||
                          (prefs.gpu() == Preferences::Gpu::Idle && decision.userIdle);
    m_previous = decision;
    return decision;
}

} // namespace gleaner::agent
