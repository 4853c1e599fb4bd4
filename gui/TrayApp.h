#pragma once
// The tray app put together: the link to the agent, the shared actions, the tray icon (or, without a system
// tray, the main window and desktop notifications), the main window, the first-run dialog for a folder not
// enrolled yet, and the preferences dialog. main.cpp only parses the command line and starts this; tests
// build it with a simulated tray, a fake notifier and a fake launcher.

#include <QObject>
#include <QPointer>
#include <QString>
#include <QTimer>

#include <functional>
#include <memory>

class QDialog;

namespace gleaner::gui {

class AgentActions;
class AgentLauncher;
class AgentLink;
class FirstRunDialog;
class MainWindow;
class Notifier;
class TrayController;

struct TrayAppOptions
{
    QString dataDir;
    // Non-empty: show the machine's system agent at this session socket, read-only (AgentLink::watchSystemAgent).
    QString systemSocket;
    // Started at login: no window unless there is no tray.
    bool autostart = false;
    // Whether a system tray exists; QSystemTrayIcon::isSystemTrayAvailable() when empty.
    std::function<bool()> trayAvailable;
    // At login the panel may come up after this app: how long --autostart waits for a tray before falling
    // back to the window.
    int trayWaitMs = 0;
    // Null: desktop notifications over D-Bus; null launcher: `gleaner-agent run` next to gleaner or in PATH.
    Notifier* notifier = nullptr;
    AgentLauncher* launcher = nullptr;
    // The gleaner-agent the first-run dialog enrolls with; empty: found like the launcher's.
    QString agentProgram;
    // How long to wait for a running agent to answer before starting one.
    int startGraceMs = 1500;
};

class TrayApp : public QObject
{
    Q_OBJECT
public:
    explicit TrayApp(TrayAppOptions options, QObject* parent = nullptr);
    ~TrayApp() override;

    void start();

    AgentLink& link() { return *m_link; }
    AgentActions& actions() { return *m_actions; }
    MainWindow& window() { return *m_window; }
    // Null until start() decided whether a tray exists.
    TrayController* tray() const { return m_tray.get(); }
    // The first-run dialog while it is open.
    FirstRunDialog* firstRunDialog() const;
    QDialog* preferencesDialog() const;

    void showWindow();
    void showFirstRun();
    void showPreferences();

Q_SIGNALS:
    // Quit was chosen: end the tray app (the agent keeps running).
    void quitRequested();

private:
    void setUpTray(bool available);
    void report(const QString& message);
    QWidget* dialogParent() const;

    TrayAppOptions m_options;
    std::unique_ptr<AgentLauncher> m_ownLauncher;
    std::unique_ptr<Notifier> m_ownNotifier;
    std::unique_ptr<AgentLink> m_link;
    std::unique_ptr<AgentActions> m_actions;
    std::unique_ptr<MainWindow> m_window;
    std::unique_ptr<TrayController> m_tray;
    QPointer<FirstRunDialog> m_firstRun;
    QPointer<QDialog> m_preferences;
    QTimer m_trayWait;
    int m_trayWaited = 0;
};

} // namespace gleaner::gui
