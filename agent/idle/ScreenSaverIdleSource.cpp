#include "ScreenSaverIdleSource.h"

#include "IdleLogging.h"

#include <QDBusArgument>
#include <QDBusObjectPath>

namespace gleaner::agent {

namespace {

constexpr uint kGnomeInhibitIdle = 8;        // GsmInhibitorFlag GSM_INHIBITOR_FLAG_IDLE
constexpr uint kKdeChangeScreenSettings = 4; // PowerDevil PolicyAgent::ChangeScreenSettings
constexpr int kMaxInhibitorsNamed = 4;       // each costs three calls; the status shows a few names at most

QString describe(const QString& who, const QString& why)
{
    if (who.isEmpty())
        return why;
    return why.isEmpty() ? who : QStringLiteral("%1 (%2)").arg(who, why);
}

} // namespace

ScreenSaverIdleSource::ScreenSaverIdleSource()
    : m_screenSaver(QDBusConnection::SessionBus, QStringLiteral("org.freedesktop.ScreenSaver"),
                    QStringLiteral("/org/freedesktop/ScreenSaver"),
                    QStringLiteral("org.freedesktop.ScreenSaver")),
      m_bus(QDBusConnection::SessionBus, QStringLiteral("org.freedesktop.DBus"),
            QStringLiteral("/org/freedesktop/DBus"), QStringLiteral("org.freedesktop.DBus"), false),
      m_gnomeSession(QDBusConnection::SessionBus, QStringLiteral("org.gnome.SessionManager"),
                     QStringLiteral("/org/gnome/SessionManager"), QStringLiteral("org.gnome.SessionManager")),
      m_kdePolicyAgent(QDBusConnection::SessionBus,
                       QStringLiteral("org.kde.Solid.PowerManagement.PolicyAgent"),
                       QStringLiteral("/org/kde/Solid/PowerManagement/PolicyAgent"),
                       QStringLiteral("org.kde.Solid.PowerManagement.PolicyAgent")),
      m_fdoPowerManagement(QDBusConnection::SessionBus, QStringLiteral("org.freedesktop.PowerManagement"),
                           QStringLiteral("/org/freedesktop/PowerManagement/Inhibit"),
                           QStringLiteral("org.freedesktop.PowerManagement.Inhibit"))
{
}

IdleReading ScreenSaverIdleSource::readIdle()
{
    const std::optional<QDBusMessage> reply = m_screenSaver.call(QStringLiteral("GetSessionIdleTime"));
    if (!reply || reply->arguments().isEmpty())
        return {};
    bool ok = false;
    const qint64 value = reply->arguments().constFirst().toLongLong(&ok);
    if (!ok || value < 0)
        return {};
    if (reply->service() != m_owner) {
        // A new owner (first call, or the screen saver restarted): which implementation, hence which unit?
        m_owner = reply->service();
        const std::optional<QDBusMessage> owner =
            m_bus.call(QStringLiteral("GetNameOwner"), {QStringLiteral("org.kde.screensaver")});
        m_ownerIsKde =
            owner && !owner->arguments().isEmpty() && owner->arguments().constFirst().toString() == m_owner;
        qCInfo(lcIdle).noquote() << "org.freedesktop.ScreenSaver is"
                                 << (m_ownerIsKde
                                         ? "KDE's: idle time in milliseconds"
                                         : "not KDE's: idle time in seconds since the session went idle");
    }
    IdleReading reading;
    reading.available = true;
    reading.precise = m_ownerIsKde;
    reading.idleMs = m_ownerIsKde ? value : value * 1000;
    return reading;
}

std::optional<InhibitorReading> ScreenSaverIdleSource::gnomeInhibitors()
{
    const std::optional<QDBusMessage> inhibited =
        m_gnomeSession.call(QStringLiteral("IsInhibited"), {QVariant::fromValue(kGnomeInhibitIdle)});
    if (!inhibited || inhibited->arguments().isEmpty())
        return std::nullopt;
    InhibitorReading reading;
    reading.inhibited = inhibited->arguments().constFirst().toBool();
    if (!reading.inhibited)
        return reading;
    const std::optional<QDBusMessage> list = m_gnomeSession.call(QStringLiteral("GetInhibitors"));
    if (!list || list->arguments().isEmpty())
        return reading;
    const QList<QDBusObjectPath> paths = qdbus_cast<QList<QDBusObjectPath>>(list->arguments().constFirst());
    const QString inhibitorInterface = QStringLiteral("org.gnome.SessionManager.Inhibitor");
    int named = 0;
    for (const QDBusObjectPath& path : paths) {
        if (named >= kMaxInhibitorsNamed)
            break;
        const auto ask = [&](const char* method) {
            return m_gnomeSession.callObject(path.path(), inhibitorInterface, QLatin1String(method));
        };
        const std::optional<QDBusMessage> flags = ask("GetFlags");
        if (!flags || flags->arguments().isEmpty() ||
            !(flags->arguments().constFirst().toUInt() & kGnomeInhibitIdle))
            continue;
        const std::optional<QDBusMessage> app = ask("GetAppId");
        const std::optional<QDBusMessage> why = ask("GetReason");
        const QString by = describe(
            app && !app->arguments().isEmpty() ? app->arguments().constFirst().toString() : QString(),
            why && !why->arguments().isEmpty() ? why->arguments().constFirst().toString() : QString());
        if (!by.isEmpty() && !reading.by.contains(by)) {
            reading.by.append(by);
            ++named;
        }
    }
    return reading;
}

std::optional<InhibitorReading> ScreenSaverIdleSource::kdeInhibitors()
{
    const std::optional<QDBusMessage> has = m_kdePolicyAgent.call(
        QStringLiteral("HasInhibition"), {QVariant::fromValue(kKdeChangeScreenSettings)});
    if (!has || has->arguments().isEmpty())
        return std::nullopt;
    InhibitorReading reading;
    reading.inhibited = has->arguments().constFirst().toBool();
    if (!reading.inhibited)
        return reading;
    // ListInhibitions does not say which policy each one blocks, so a suspend inhibitor's name may appear
    // next to the screen one's; the yes/no above is exact.
    const std::optional<QDBusMessage> list = m_kdePolicyAgent.call(QStringLiteral("ListInhibitions"));
    if (!list || list->arguments().isEmpty())
        return reading;
    const QDBusArgument entries = list->arguments().constFirst().value<QDBusArgument>();
    if (entries.currentType() != QDBusArgument::ArrayType)
        return reading;
    entries.beginArray();
    while (!entries.atEnd()) {
        QString app, why;
        entries.beginStructure();
        entries >> app >> why;
        entries.endStructure();
        const QString by = describe(app, why);
        if (!by.isEmpty() && !reading.by.contains(by) && reading.by.size() < kMaxInhibitorsNamed)
            reading.by.append(by);
    }
    entries.endArray();
    return reading;
}

std::optional<InhibitorReading> ScreenSaverIdleSource::readInhibitors()
{
    if (std::optional<InhibitorReading> gnome = gnomeInhibitors())
        return gnome;
    if (std::optional<InhibitorReading> kde = kdeInhibitors())
        return kde;
    const std::optional<QDBusMessage> has = m_fdoPowerManagement.call(QStringLiteral("HasInhibit"));
    if (!has || has->arguments().isEmpty())
        return std::nullopt;
    InhibitorReading reading;
    reading.inhibited = has->arguments().constFirst().toBool();
    return reading;
}

} // namespace gleaner::agent
