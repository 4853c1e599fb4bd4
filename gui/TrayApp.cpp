#include "TrayApp.h"

#include "AgentActions.h"
#include "AgentLauncher.h"
#include "AgentLink.h"
#include "FirstRunDialog.h"
#include "GuiLogging.h"
#include "MainWindow.h"
#include "Notifier.h"
#include "PreferencesDialog.h"
#include "TrayController.h"

#include <QApplication>
#include <QSystemTrayIcon>

namespace gleaner::gui {
namespace {

constexpr int kTrayPollMs = 1000;

} // namespace

TrayApp::TrayApp(TrayAppOptions options, QObject* parent) : QObject(parent), m_options(std::move(options))
{
    if (!m_options.trayAvailable)
        m_options.trayAvailable = [] { return QSystemTrayIcon::isSystemTrayAvailable(); };
    if (!m_options.launcher) {
        m_ownLauncher = std::make_unique<ProcessAgentLauncher>();
        m_options.launcher = m_ownLauncher.get();
    }
    if (!m_options.notifier) {
        m_ownNotifier = std::make_unique<DesktopNotifier>();
        m_options.notifier = m_ownNotifier.get();
    }
    if (m_options.agentProgram.isEmpty())
        if (auto program = ProcessAgentLauncher::findAgentProgram())
            m_options.agentProgram = *program;

    m_link = std::make_unique<AgentLink>(m_options.dataDir, m_options.launcher);
    if (!m_options.systemSocket.isEmpty())
        m_link->watchSystemAgent(m_options.systemSocket);
    m_link->setStartGraceMs(m_options.startGraceMs);
    m_actions = std::make_unique<AgentActions>(*m_link);
    m_window = std::make_unique<MainWindow>(*m_link, *m_actions);

    connect(m_actions.get(), &AgentActions::openWindowRequested, this, &TrayApp::showWindow);
    connect(m_actions.get(), &AgentActions::preferencesRequested, this, &TrayApp::showPreferences);
    connect(m_actions.get(), &AgentActions::quitRequested, this, &TrayApp::quitRequested);
    connect(m_window.get(), &MainWindow::enrollRequested, this, &TrayApp::showFirstRun);
    connect(m_link.get(), &AgentLink::actionFailed, this, &TrayApp::report);

    m_trayWait.setInterval(kTrayPollMs);
    connect(&m_trayWait, &QTimer::timeout, this, [this] {
        m_trayWaited += kTrayPollMs;
        const bool available = m_options.trayAvailable();
        if (available || m_trayWaited >= m_options.trayWaitMs) {
            m_trayWait.stop();
            setUpTray(available);
        }
    });
}

TrayApp::~TrayApp()
{
    delete m_firstRun.data();
    delete m_preferences.data();
    // The tray's menu holds the actions, and the window uses the link: both go first.
    m_tray.reset();
    m_window.reset();
}

FirstRunDialog* TrayApp::firstRunDialog() const
{
    return m_firstRun.data();
}

QDialog* TrayApp::preferencesDialog() const
{
    return m_preferences.data();
}

void TrayApp::start()
{
    m_link->start();
    const bool available = m_options.trayAvailable();
    if (available || !m_options.autostart || m_options.trayWaitMs <= 0) {
        setUpTray(available);
        return;
    }
    qCInfo(lcGui) << "no system tray yet; waiting up to" << m_options.trayWaitMs << "ms for the panel";
    m_trayWait.start();
}

void TrayApp::setUpTray(bool available)
{
    m_tray = std::make_unique<TrayController>(*m_link, *m_actions, available, m_options.notifier);
    connect(m_tray.get(), &TrayController::openWindowRequested, this, &TrayApp::showWindow);
    connect(m_tray.get(), &TrayController::noticeUndelivered, m_window.get(), &MainWindow::showNotice);
    m_window->setHideOnClose(available);
    // Without a tray the window is the app: closing it ends the app (the agent keeps running).
    QApplication::setQuitOnLastWindowClosed(!available);
    if (!available)
        qCInfo(lcGui) << "no system tray: showing the window, and notifications for important changes";
    if (!available || !m_options.autostart)
        showWindow();
    else if (!m_link->isEnrolled())
        showFirstRun();
}

void TrayApp::showWindow()
{
    m_window->show();
    m_window->raise();
    m_window->activateWindow();
    if (!m_link->isEnrolled() && !m_link->isConnected())
        showFirstRun();
}

QWidget* TrayApp::dialogParent() const
{
    return m_window->isVisible() ? m_window.get() : nullptr;
}

void TrayApp::showFirstRun()
{
    if (m_firstRun) {
        m_firstRun->raise();
        m_firstRun->activateWindow();
        return;
    }
    m_firstRun = new FirstRunDialog(m_options.dataDir, m_options.agentProgram, dialogParent());
    m_firstRun->setAttribute(Qt::WA_DeleteOnClose);
    connect(m_firstRun, &FirstRunDialog::enrolled, this, [this](const QString& agentId) {
        qCInfo(lcGui) << "enrolled as" << agentId << "; starting the agent";
        m_link->startAgent();
    });
    m_firstRun->show();
}

void TrayApp::showPreferences()
{
    if (m_preferences) {
        m_preferences->raise();
        m_preferences->activateWindow();
        return;
    }
    auto* dialog = new PreferencesDialog(m_link->client(), dialogParent());
    // "Full" means every core of this machine, which the agent knows better than a guess here.
    if (const int cores = m_link->status().value(u"policy").toObject().value(u"cores").toInt(); cores > 0)
        dialog->setMachineCores(cores);
    m_preferences = dialog;
    m_preferences->setAttribute(Qt::WA_DeleteOnClose);
    m_preferences->show();
}

void TrayApp::report(const QString& message)
{
    m_window->showNotice(message);
    // A refusal must reach the user even with the window closed.
    if (m_tray && !m_window->isVisible())
        m_tray->tell(QStringLiteral("Gleaner"), message);
}

} // namespace gleaner::gui
