#include "LogindIdleSource.h"

#include "IdleLogging.h"

#include <QDBusArgument>
#include <QDBusMetaType>
#include <QVariantMap>

#include <time.h>

namespace gleaner::agent {

namespace {

const QString kService = QStringLiteral("org.freedesktop.login1");

qint64 monotonicUs()
{
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now); // logind's *Monotonic timestamps are CLOCK_MONOTONIC, in µs
    return qint64(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
}

bool isGraphical(const QString& type)
{
    return type == u"x11" || type == u"wayland" || type == u"mir";
}

} // namespace

LogindIdleSource::LogindIdleSource(QString sessionPath)
    : m_session(QDBusConnection::SystemBus, kService, std::move(sessionPath),
                QStringLiteral("org.freedesktop.DBus.Properties")),
      m_manager(QDBusConnection::SystemBus, kService, QStringLiteral("/org/freedesktop/login1"),
                QStringLiteral("org.freedesktop.login1.Manager"))
{
}

IdleReading LogindIdleSource::readIdle()
{
    // One GetAll rather than three Gets: one round trip.
    const std::optional<QDBusMessage> reply =
        m_session.call(QStringLiteral("GetAll"), {QStringLiteral("org.freedesktop.login1.Session")});
    if (!reply || reply->arguments().isEmpty())
        return {};
    const QVariantMap properties = qdbus_cast<QVariantMap>(reply->arguments().constFirst());
    if (!properties.contains(QStringLiteral("IdleHint")))
        return {};
    const QString type = properties.value(QStringLiteral("Type")).toString();
    const bool hint = properties.value(QStringLiteral("IdleHint")).toBool();
    const qint64 sinceUs = properties.value(QStringLiteral("IdleSinceHintMonotonic")).toLongLong();
    const qint64 nowUs = monotonicUs();
    const qint64 sinceMs = sinceUs > 0 && sinceUs <= nowUs ? (nowUs - sinceUs) / 1000 : -1;

    IdleReading reading;
    if (isGraphical(type)) {
        reading.available = true;
        reading.precise = false;
        reading.idleMs = hint && sinceMs >= 0 ? sinceMs : 0;
    } else if (sinceMs >= 0) {
        // A timestamp of 0 means logind found no terminal to look at: it does not know.
        reading.available = true;
        reading.idleMs = sinceMs;
    }
    qCDebug(lcIdle) << "logind: session type" << type << "idle hint" << hint << "idle" << reading.idleMs
                    << "ms" << (reading.precise ? "precise" : "lower bound");
    return reading;
}

std::optional<InhibitorReading> LogindIdleSource::readInhibitors()
{
    const std::optional<QDBusMessage> reply = m_manager.call(QStringLiteral("ListInhibitors"));
    if (!reply || reply->arguments().isEmpty())
        return std::nullopt;
    InhibitorReading reading;
    // a(ssssuu): what, who, why, mode, uid, pid.
    const QDBusArgument list = reply->arguments().constFirst().value<QDBusArgument>();
    if (list.currentType() != QDBusArgument::ArrayType)
        return std::nullopt;
    list.beginArray();
    while (!list.atEnd()) {
        QString what, who, why, mode;
        uint uid = 0, pid = 0;
        list.beginStructure();
        list >> what >> who >> why >> mode >> uid >> pid;
        list.endStructure();
        if (!what.split(u':').contains(u"idle") || !mode.startsWith(u"block"))
            continue;
        reading.inhibited = true;
        const QString by = why.isEmpty() ? who : QStringLiteral("%1 (%2)").arg(who, why);
        if (!by.isEmpty() && !reading.by.contains(by))
            reading.by.append(by);
    }
    list.endArray();
    return reading;
}

} // namespace gleaner::agent
