#include "Notifier.h"

#include "GuiLogging.h"

#include <QDBusConnection>
#include <QDBusMessage>
#include <QDBusPendingCallWatcher>
#include <QDBusPendingReply>
#include <QVariantMap>

namespace gleaner::gui {

Notifier::~Notifier() = default;

void DesktopNotifier::notify(const QString& summary, const QString& body, Urgency urgency)
{
    QDBusConnection bus = QDBusConnection::sessionBus();
    if (!bus.isConnected()) {
        const QString why = QStringLiteral("no D-Bus session bus (%1)").arg(bus.lastError().message());
        QMetaObject::invokeMethod(
            this, [this, summary, body, why] { Q_EMIT failed(summary, body, why); }, Qt::QueuedConnection);
        return;
    }
    QDBusMessage call = QDBusMessage::createMethodCall(
        QStringLiteral("org.freedesktop.Notifications"), QStringLiteral("/org/freedesktop/Notifications"),
        QStringLiteral("org.freedesktop.Notifications"), QStringLiteral("Notify"));
    const QVariantMap hints{{QStringLiteral("urgency"), QVariant::fromValue(uchar(urgency))},
                            {QStringLiteral("desktop-entry"), QStringLiteral("gleaner")}};
    call << QStringLiteral("Gleaner") << m_lastId << QStringLiteral("gleaner") << summary << body
         << QStringList() << hints << int(-1);
    auto* watcher = new QDBusPendingCallWatcher(bus.asyncCall(call, 5000), this);
    connect(watcher, &QDBusPendingCallWatcher::finished, this, [this, watcher, summary, body] {
        watcher->deleteLater();
        QDBusPendingReply<uint> reply = *watcher;
        if (reply.isError()) {
            const QString why =
                QStringLiteral("the notification service refused it: %1").arg(reply.error().message());
            qCWarning(lcGui) << "desktop notification failed:" << why;
            Q_EMIT failed(summary, body, why);
            return;
        }
        m_lastId = reply.value();
    });
}

} // namespace gleaner::gui
