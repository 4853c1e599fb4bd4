#pragma once
// The tray icon: a picture per state (training, waiting, paused, error, offline), the reason as tooltip, and
// the menu of AgentActions. Whether a system tray exists is given to it (tests simulate both); without one
// there is no icon, and important changes (Notices) go out as desktop notifications through the Notifier, or,
// when that fails too, to noticeUndelivered() for the main window to show. With a tray, errors and the end of
// the work also pop up from the icon.

#include "AgentStatus.h"
#include "Notices.h"

#include <QObject>

#include <memory>

class QMenu;
class QSystemTrayIcon;

namespace gleaner::gui {

class AgentActions;
class AgentLink;
class Notifier;

class TrayController : public QObject
{
    Q_OBJECT
public:
    // `notifier` may be null (no notifications at all: every notice goes to noticeUndelivered).
    TrayController(AgentLink& link, AgentActions& actions, bool trayAvailable, Notifier* notifier,
                   QObject* parent = nullptr);
    ~TrayController() override;

    bool hasTray() const { return m_tray != nullptr; }
    // Null without a tray.
    QSystemTrayIcon* trayIcon() const { return m_tray; }
    QMenu* menu() const { return m_menu.get(); }
    TrayState iconState() const { return m_iconState; }
    QString toolTip() const { return m_toolTip; }

    // Tells the user of `message` (an action the agent refused): from the icon, else as a notification.
    void tell(const QString& summary, const QString& message);

Q_SIGNALS:
    // The icon was clicked.
    void openWindowRequested();
    // A notice that neither the tray nor a notification could show.
    void noticeUndelivered(const QString& text);

private:
    void update();
    void deliver(const Notice& notice);

    AgentLink& m_link;
    std::unique_ptr<QMenu> m_menu;
    QSystemTrayIcon* m_tray = nullptr;
    Notifier* m_notifier;
    NoticeTracker m_notices;
    TrayState m_iconState = TrayState::Offline;
    QString m_toolTip;
    bool m_first = true;
};

} // namespace gleaner::gui
