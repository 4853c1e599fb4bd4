#include "MutterIdleSource.h"

#include <limits>

namespace gleaner::agent {

MutterIdleSource::MutterIdleSource()
    : m_monitor(QDBusConnection::SessionBus, QStringLiteral("org.gnome.Mutter.IdleMonitor"),
                QStringLiteral("/org/gnome/Mutter/IdleMonitor/Core"),
                QStringLiteral("org.gnome.Mutter.IdleMonitor"))
{
}

IdleReading MutterIdleSource::readIdle()
{
    const std::optional<QDBusMessage> reply = m_monitor.call(QStringLiteral("GetIdletime"));
    if (!reply || reply->arguments().isEmpty())
        return {};
    bool ok = false;
    const qulonglong ms = reply->arguments().constFirst().toULongLong(&ok);
    if (!ok)
        return {};
    IdleReading reading;
    reading.available = true;
    reading.idleMs =
        static_cast<qint64>(qMin<qulonglong>(ms, qulonglong(std::numeric_limits<qint64>::max())));
    return reading;
}

} // namespace gleaner::agent
