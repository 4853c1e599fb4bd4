#include "TrayController.h"

#include "AgentActions.h"
#include "AgentLink.h"
#include "GuiLogging.h"
#include "Notifier.h"
#include "StateIcons.h"

#include <QMenu>
#include <QSystemTrayIcon>

namespace gleaner::gui {

TrayController::TrayController(AgentLink& link, AgentActions& actions, bool trayAvailable, Notifier* notifier,
                               QObject* parent)
    : QObject(parent), m_link(link), m_menu(std::make_unique<QMenu>()), m_notifier(notifier)
{
    m_menu->addAction(actions.statusLine());
    m_menu->addSeparator();
    m_menu->addAction(actions.pauseResume());
    m_menu->addAction(actions.snooze());
    m_menu->addAction(actions.finish());
    m_menu->addSeparator();
    m_menu->addAction(actions.openWindow());
    m_menu->addAction(actions.preferences());
    m_menu->addSeparator();
    m_menu->addAction(actions.quit());

    if (trayAvailable) {
        m_tray = new QSystemTrayIcon(this);
        m_tray->setContextMenu(m_menu.get());
        connect(m_tray, &QSystemTrayIcon::activated, this, [this](QSystemTrayIcon::ActivationReason reason) {
            if (reason == QSystemTrayIcon::Trigger || reason == QSystemTrayIcon::DoubleClick)
                Q_EMIT openWindowRequested();
        });
    }
    if (m_notifier)
        connect(m_notifier, &Notifier::failed, this,
                [this](const QString& summary, const QString& body, const QString& why) {
                    qCInfo(lcGui) << "notification not shown:" << why;
                    Q_EMIT noticeUndelivered(summary + QStringLiteral(": ") + body);
                });
    connect(&m_link, &AgentLink::changed, this, &TrayController::update);
    update();
    if (m_tray)
        m_tray->show();
}

TrayController::~TrayController()
{
    // The icon goes before the menu it points to.
    delete m_tray;
}

void TrayController::update()
{
    const QString state = m_link.state();
    const TrayState iconState = trayStateFor(state);
    QString tip = QStringLiteral("Gleaner: ") + m_link.reason();
    if (m_iconState != iconState || m_first) {
        m_iconState = iconState;
        if (m_tray)
            m_tray->setIcon(stateIcon(iconState));
    }
    if (tip != m_toolTip) {
        m_toolTip = tip;
        if (m_tray)
            m_tray->setToolTip(tip);
    }
    m_first = false;
    if (auto notice = m_notices.update(state, m_link.reasonCode(), m_link.reason()))
        deliver(*notice);
}

void TrayController::deliver(const Notice& notice)
{
    if (m_tray) {
        // The icon itself shows the rest; only what needs the user, or ends the work, pops up.
        if (notice.kind == Notice::Kind::Error || notice.kind == Notice::Kind::Finished)
            m_tray->showMessage(notice.summary, notice.body,
                                notice.kind == Notice::Kind::Error ? QSystemTrayIcon::Warning
                                                                   : QSystemTrayIcon::Information);
        return;
    }
    if (!m_notifier) {
        Q_EMIT noticeUndelivered(notice.summary + QStringLiteral(": ") + notice.body);
        return;
    }
    m_notifier->notify(notice.summary, notice.body,
                       notice.kind == Notice::Kind::Error ? Notifier::Urgency::Critical
                                                          : Notifier::Urgency::Normal);
}

void TrayController::tell(const QString& summary, const QString& message)
{
    if (m_tray) {
        m_tray->showMessage(summary, message, QSystemTrayIcon::Warning);
        return;
    }
    if (m_notifier)
        m_notifier->notify(summary, message, Notifier::Urgency::Normal);
    else
        Q_EMIT noticeUndelivered(summary + QStringLiteral(": ") + message);
}

} // namespace gleaner::gui
