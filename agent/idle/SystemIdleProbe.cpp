#include "SystemIdleProbe.h"

#include "IdleLogging.h"
#include "LogindIdleSource.h"
#include "MutterIdleSource.h"
#include "ScreenSaverIdleSource.h"
#include "X11IdleSource.h"

#include <utility>

namespace gleaner::agent {

namespace {

const QString kAuto = QStringLiteral("auto");
const QString kNone = QStringLiteral("none");
const QString kSessions = QStringLiteral("sessions");

} // namespace

SystemIdleProbe::SystemIdleProbe(const QString& preference)
    : SystemIdleProbe(preference,
                      preference == kNone ? std::vector<std::unique_ptr<IdleSource>>{} : realSources())
{
}

SystemIdleProbe::SystemIdleProbe(const QString& preference, std::vector<std::unique_ptr<IdleSource>> sources,
                                 MonotonicClock clock)
    : m_preference(preference), m_sources(std::move(sources)), m_clock(std::move(clock))
{
    if (const Status valid = checkPreference(preference); !valid) {
        // The daemon checks --idle-source before it gets here; a bad value from elsewhere must not crash it.
        qCWarning(lcIdle).noquote() << valid.error() << "- using auto";
        m_preference = kAuto;
    }
}

SystemIdleProbe::~SystemIdleProbe() = default;

std::vector<std::unique_ptr<IdleSource>> SystemIdleProbe::realSources()
{
    std::vector<std::unique_ptr<IdleSource>> sources;
    sources.push_back(std::make_unique<LogindIdleSource>());
    sources.push_back(std::make_unique<MutterIdleSource>());
    sources.push_back(std::make_unique<ScreenSaverIdleSource>());
    sources.push_back(std::make_unique<X11IdleSource>());
    return sources;
}

QStringList SystemIdleProbe::sourceNames()
{
    return {QStringLiteral("logind"), QStringLiteral("mutter"), QStringLiteral("screensaver"),
            QStringLiteral("x11")};
}

QStringList SystemIdleProbe::preferenceNames()
{
    return QStringList{kAuto, kNone} + sourceNames() + QStringList{kSessions};
}

Status SystemIdleProbe::checkPreference(const QString& preference)
{
    if (preferenceNames().contains(preference))
        return {};
    return fail(QStringLiteral("unknown idle source \"%1\"; use one of %2")
                    .arg(preference, preferenceNames().join(QStringLiteral(", "))));
}

QString SystemIdleProbe::currentSource() const
{
    return m_current >= 0 ? m_sources[m_current]->name() : QString();
}

void SystemIdleProbe::choose(int index, const IdleReading& reading)
{
    if (index != m_current)
        qCInfo(lcIdle).noquote()
            << QStringLiteral("idle time now from %1%2 (was %3)")
                   .arg(index >= 0 ? m_sources[index]->name() : QStringLiteral("no source"),
                        index >= 0 && !reading.precise ? QStringLiteral(", a lower bound") : QString(),
                        m_current >= 0 ? m_sources[m_current]->name() : QStringLiteral("none"));
    m_current = index;
    m_currentPrecise = index >= 0 && reading.precise;
}

IdleReading SystemIdleProbe::readAuto()
{
    const qint64 now = m_clock();
    const int count = static_cast<int>(m_sources.size());
    // Ranks: every precise answer before every imprecise one, then the order of the list.
    const auto rank = [count](int index, bool precise) { return (precise ? 0 : count) + index; };

    if (m_current >= 0 && rank(m_current, m_currentPrecise) > 0 && now >= m_nextReprobeMs) {
        m_nextReprobeMs = now + kReprobeMs;
        for (int i = 0; i < count; ++i) {
            if (i == m_current || rank(i, true) >= rank(m_current, m_currentPrecise))
                continue;
            const IdleReading reading = m_sources[i]->readIdle();
            if (reading.available && rank(i, reading.precise) < rank(m_current, m_currentPrecise)) {
                choose(i, reading);
                return reading;
            }
        }
    }
    if (m_current >= 0) {
        const IdleReading reading = m_sources[m_current]->readIdle();
        if (reading.available) {
            m_currentPrecise = reading.precise;
            return reading;
        }
        qCInfo(lcIdle).noquote() << m_sources[m_current]->name()
                                 << "stopped answering; looking for another source";
    }
    // Search: the first precise answer wins, else the first imprecise one.
    const int failed = m_current;
    int fallback = -1;
    IdleReading fallbackReading;
    for (int i = 0; i < count; ++i) {
        if (i == failed)
            continue;
        const IdleReading reading = m_sources[i]->readIdle();
        if (!reading.available)
            continue;
        if (reading.precise) {
            choose(i, reading);
            m_nextReprobeMs = now + kReprobeMs;
            return reading;
        }
        if (fallback < 0) {
            fallback = i;
            fallbackReading = reading;
        }
    }
    choose(fallback, fallbackReading);
    m_nextReprobeMs = now + kReprobeMs;
    return fallbackReading;
}

IdleReading SystemIdleProbe::readForced()
{
    for (int i = 0; i < static_cast<int>(m_sources.size()); ++i) {
        if (m_sources[i]->name() != m_preference)
            continue;
        const IdleReading reading = m_sources[i]->readIdle();
        if (reading.available != (m_current == i))
            reading.available ? choose(i, reading) : choose(-1, reading);
        return reading;
    }
    return {};
}

IdleObservation SystemIdleProbe::sample()
{
    IdleObservation observation;
    if (m_preference == kNone)
        return observation;
    const IdleReading reading = m_preference == kAuto ? readAuto() : readForced();
    if (reading.available) {
        observation.known = true;
        observation.source = currentSource();
        observation.idleMs = qMax<qint64>(0, reading.idleMs);
    }
    // Inhibitors change when a video starts or a presentation opens, not within a second; reading them costs
    // a few D-Bus calls, so they are read every kInhibitorsEveryMs while the idle time is read at every
    // sample.
    const qint64 now = m_clock();
    if (m_inhibitorsReadMs >= 0 && now - m_inhibitorsReadMs < kInhibitorsEveryMs &&
        now >= m_inhibitorsReadMs) {
        observation.inhibited = m_inhibited;
        observation.inhibitedBy = m_inhibitedBy;
        return observation;
    }
    m_inhibitorsReadMs = now;
    QStringList by;
    for (const std::unique_ptr<IdleSource>& source : m_sources) {
        const std::optional<InhibitorReading> inhibitors = source->readInhibitors();
        if (!inhibitors || !inhibitors->inhibited)
            continue;
        observation.inhibited = true;
        for (const QString& who : inhibitors->by) {
            if (!by.contains(who))
                by.append(who);
        }
    }
    observation.inhibitedBy = by.join(QStringLiteral(", "));
    m_inhibited = observation.inhibited;
    m_inhibitedBy = observation.inhibitedBy;
    return observation;
}

} // namespace gleaner::agent
