#include "DBusEndpoint.h"

#include "IdleLogging.h"

#include <utility>

namespace gleaner::agent {

DBusEndpoint::DBusEndpoint(QDBusConnection::BusType bus, QString service, QString path, QString interface,
                           bool restAfterFailure)
    : m_bus(bus), m_service(std::move(service)), m_path(std::move(path)), m_interface(std::move(interface)),
      m_restAfterFailure(restAfterFailure)
{
}

QDBusConnection DBusEndpoint::connection() const
{
    // Qt connects to a bus once, on first use, from DBUS_SESSION_BUS_ADDRESS / DBUS_SYSTEM_BUS_ADDRESS (or
    // their defaults), and keeps the connection for the life of the process.
    return m_bus == QDBusConnection::SystemBus ? QDBusConnection::systemBus() : QDBusConnection::sessionBus();
}

std::optional<QDBusMessage> DBusEndpoint::call(const QString& method, const QVariantList& args)
{
    return callObject(m_path, m_interface, method, args);
}

std::optional<QDBusMessage> DBusEndpoint::callObject(const QString& path, const QString& interface,
                                                     const QString& method, const QVariantList& args)
{
    if (resting())
        return std::nullopt;
    const QDBusConnection bus = connection();
    QString error;
    if (!bus.isConnected()) {
        error =
            QStringLiteral("no %1 bus (%2)")
                .arg(m_bus == QDBusConnection::SystemBus ? u"system" : u"session", bus.lastError().message());
    } else {
        QDBusMessage message = QDBusMessage::createMethodCall(m_service, path, interface, method);
        message.setArguments(args);
        message.setAutoStartService(false);
        QDBusMessage reply = bus.call(message, QDBus::Block, kTimeoutMs);
        if (reply.type() == QDBusMessage::ReplyMessage) {
            if (m_failed)
                qCInfo(lcIdle).noquote() << m_service << "answers again";
            m_failed = false;
            m_lastError.clear();
            return reply;
        }
        error = reply.errorName() + u": " + reply.errorMessage();
        // An object that went away between a listing and a call (an inhibitor released meanwhile) says
        // nothing about the service: no rest for that.
        if (reply.errorName() == u"org.freedesktop.DBus.Error.UnknownObject" && path != m_path) {
            qCDebug(lcIdle).noquote() << m_service << path << method << "failed:" << error;
            return std::nullopt;
        }
    }
    if (!m_restAfterFailure) {
        qCDebug(lcIdle).noquote() << QStringLiteral("%1 %2.%3: %4").arg(m_service, interface, method, error);
        return std::nullopt;
    }
    // Logged once per change, not on every retry: a desktop without the service is normal, not a fault.
    if (!m_failed || error != m_lastError)
        qCDebug(lcIdle).noquote() << QStringLiteral("%1 %2.%3 failed, not asked again for %4 s: %5")
                                         .arg(m_service, interface, method)
                                         .arg(kRestMs / 1000)
                                         .arg(error);
    m_failed = true;
    m_lastError = error;
    m_rest.setRemainingTime(kRestMs);
    return std::nullopt;
}

} // namespace gleaner::agent
