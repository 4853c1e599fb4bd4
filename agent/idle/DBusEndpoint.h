#pragma once
// One desktop service on D-Bus, called from the daemon's event-loop thread without ever stalling it for long:
// each call is synchronous but bounded by 200 ms, and a service that failed (timed out, is not there, refused
// the method) is left alone for 30 s, during which calls fail at once without touching the bus. A desktop
// that does not have the service (KDE has no Mutter) so costs one failed call per 30 s, and a hung one 200 ms
// per 30 s.
//
// Calls never start a service through D-Bus activation: asking for the idle time must not launch a screen
// saver the desktop does not run.

#include <QDBusConnection>
#include <QDBusMessage>
#include <QDeadlineTimer>
#include <QString>
#include <QVariantList>

#include <optional>

namespace gleaner::agent {

class DBusEndpoint
{
public:
    static constexpr int kTimeoutMs = 200;
    static constexpr qint64 kRestMs = 30'000;

    // restAfterFailure false: an error is an answer too (the bus daemon's NameHasNoOwner), not a reason to
    // wait.
    DBusEndpoint(QDBusConnection::BusType bus, QString service, QString path, QString interface,
                 bool restAfterFailure = true);

    // The reply (its arguments, and in service() the unique name of the process that answered), or nothing
    // when the call failed or the endpoint is resting after a failure.
    std::optional<QDBusMessage> call(const QString& method, const QVariantList& args = {});
    // The same service, another object or interface (GNOME's session manager has one object per inhibitor).
    std::optional<QDBusMessage> callObject(const QString& path, const QString& interface,
                                           const QString& method, const QVariantList& args = {});

    bool resting() const { return m_failed && !m_rest.hasExpired(); }
    QString lastError() const { return m_lastError; }
    const QString& service() const { return m_service; }

private:
    QDBusConnection connection() const;

    QDBusConnection::BusType m_bus;
    QString m_service;
    QString m_path;
    QString m_interface;
    bool m_restAfterFailure;
    bool m_failed = false;
    QDeadlineTimer m_rest;
    QString m_lastError;
};

} // namespace gleaner::agent
