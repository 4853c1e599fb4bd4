#pragma once
// Desktop notifications for a desktop without a system tray (GNOME without the AppIndicator extension): the
// tray app tells the user of an important change through org.freedesktop.Notifications on the session bus.
// Delivery is asynchronous and never blocks the GUI; a notification that cannot be shown is reported through
// failed(), so the caller shows the text another way: nothing is dropped silently.

#include <QObject>
#include <QString>

namespace gleaner::gui {

class Notifier : public QObject
{
    Q_OBJECT
public:
    enum class Urgency
    {
        Low = 0,
        Normal = 1,
        Critical = 2
    };

    using QObject::QObject;
    ~Notifier() override;

    virtual void notify(const QString& summary, const QString& body, Urgency urgency) = 0;

Q_SIGNALS:
    // The notification `summary` could not be shown; `why` says what went wrong.
    void failed(const QString& summary, const QString& body, const QString& why);
};

// org.freedesktop.Notifications.Notify over the session bus. Each notification replaces the previous one, so
// a burst of changes leaves one bubble, the latest.
class DesktopNotifier : public Notifier
{
    Q_OBJECT
public:
    using Notifier::Notifier;
    void notify(const QString& summary, const QString& body, Urgency urgency) override;

private:
    uint m_lastId = 0;
};

} // namespace gleaner::gui
