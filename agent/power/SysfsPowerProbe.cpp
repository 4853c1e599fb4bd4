#include "SysfsPowerProbe.h"

#include <QDir>
#include <QFile>
#include <QLoggingCategory>

#include <cmath>
#include <utility>

namespace gleaner::agent {

namespace {

Q_LOGGING_CATEGORY(lcPower, "gleaner.agent.power")

// A sysfs attribute as text without its newline; empty when the supply does not have it.
QString attribute(const QString& dir, const char* name)
{
    QFile file(dir + QLatin1Char('/') + QLatin1String(name));
    if (!file.open(QIODevice::ReadOnly))
        return {};
    return QString::fromUtf8(file.read(256)).trimmed();
}

qint64 number(const QString& dir, const char* name, qint64 missing = -1)
{
    bool ok = false;
    const qint64 value = attribute(dir, name).toLongLong(&ok);
    return ok ? value : missing;
}

struct BatteryLevel
{
    int percent = -1; // `capacity`
    qint64 now = -1;  // energy_now (µWh) or charge_now (µAh)
    qint64 full = -1; // energy_full or charge_full, same unit as `now`
};

BatteryLevel batteryLevel(const QString& dir)
{
    BatteryLevel level;
    level.percent = static_cast<int>(number(dir, "capacity"));
    level.now = number(dir, "energy_now");
    level.full = number(dir, "energy_full");
    if (level.now < 0 || level.full <= 0) {
        level.now = number(dir, "charge_now");
        level.full = number(dir, "charge_full");
    }
    return level;
}

int combinedPercent(const QList<BatteryLevel>& levels)
{
    if (levels.isEmpty())
        return -1;
    // Energy sums are only comparable when every battery gives them, in the same unit: all energy_* or all
    // charge_*; a mix is rare enough that the mean of the percentages is the safe answer then.
    qint64 now = 0;
    qint64 full = 0;
    bool summable = true;
    for (const BatteryLevel& level : levels) {
        if (level.now < 0 || level.full <= 0) {
            summable = false;
            break;
        }
        now += level.now;
        full += level.full;
    }
    if (summable && full > 0)
        return qBound(
            0, static_cast<int>(std::lround(100.0 * static_cast<double>(now) / static_cast<double>(full))),
            100);
    int sum = 0;
    int count = 0;
    for (const BatteryLevel& level : levels) {
        if (level.percent >= 0) {
            sum += level.percent;
            ++count;
        }
    }
    return count > 0 ? qBound(0, static_cast<int>(std::lround(double(sum) / count)), 100) : -1;
}

} // namespace

SysfsPowerProbe::SysfsPowerProbe(QString root) : m_root(std::move(root)) {}

PowerObservation SysfsPowerProbe::sample()
{
    PowerObservation observation;
    bool batteryDischarging = false;
    bool upsDischarging = false;
    bool externalOnline = false;
    QList<BatteryLevel> batteries;
    QList<BatteryLevel> upses;

    // The entries are symbolic links into /sys/devices: follow them (QDir::Dirs alone lists them as dirs
    // too).
    const QStringList names = QDir(m_root).entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
    for (const QString& name : names) {
        const QString dir = m_root + QLatin1Char('/') + name;
        const QString type = attribute(dir, "type");
        if (type.isEmpty())
            continue;
        if (attribute(dir, "scope").compare(u"Device", Qt::CaseInsensitive) == 0)
            continue; // a peripheral's own battery
        const QString status = attribute(dir, "status");
        const bool discharging = status.compare(u"Discharging", Qt::CaseInsensitive) == 0;
        if (type == u"Battery") {
            if (number(dir, "present", 1) == 0)
                continue;
            observation.known = true;
            batteryDischarging = batteryDischarging || discharging;
            batteries.append(batteryLevel(dir));
        } else if (type == u"UPS") {
            observation.known = true;
            upsDischarging = upsDischarging || discharging;
            upses.append(batteryLevel(dir));
        } else {
            observation.known = true;
            externalOnline = externalOnline || number(dir, "online", 0) > 0;
        }
    }
    observation.onBattery = (batteryDischarging && !externalOnline) || upsDischarging;
    observation.batteryPercent = batteries.isEmpty() ? combinedPercent(upses) : combinedPercent(batteries);
    // Said when it changes, not at every sample.
    if (observation.known != m_last.known || observation.onBattery != m_last.onBattery || !m_logged) {
        qCDebug(lcPower) << "power: known" << observation.known << "on battery" << observation.onBattery
                         << "percent" << observation.batteryPercent;
        m_logged = true;
    }
    m_last = observation;
    return observation;
}

} // namespace gleaner::agent
