#pragma once
// The actions a volunteer has on the agent, shared by the tray menu and the main window so both always say
// the same: a status line (disabled, the reason), Pause / Resume (one action that toggles; Start the agent
// while none runs), Snooze 1 hour, Finish and stop (confirmed first), Open Gleaner, Preferences…, Quit (the
// tray app only; the agent keeps running).

#include <QObject>

#include <functional>

class QAction;

namespace gleaner::gui {

class AgentLink;

class AgentActions : public QObject
{
    Q_OBJECT
public:
    static constexpr int kSnoozeSeconds = 3600;

    explicit AgentActions(AgentLink& link, QObject* parent = nullptr);

    QAction* statusLine() const { return m_status; }
    QAction* pauseResume() const { return m_pauseResume; }
    QAction* snooze() const { return m_snooze; }
    QAction* finish() const { return m_finish; }
    QAction* openWindow() const { return m_open; }
    QAction* preferences() const { return m_preferences; }
    QAction* quit() const { return m_quit; }

    // Asks the user to confirm `question`; a QMessageBox unless replaced (tests answer by themselves).
    using Confirm = std::function<bool(const QString& title, const QString& question)>;
    void setConfirm(Confirm confirm) { m_confirm = std::move(confirm); }

    // What pauseResume() does now.
    enum class Toggle
    {
        Pause,
        Resume,
        StartAgent
    };
    Toggle toggleMode() const { return m_mode; }

Q_SIGNALS:
    void openWindowRequested();
    void preferencesRequested();
    void quitRequested();

private:
    void update();
    void onToggle();
    void onFinish();

    AgentLink& m_link;
    QAction* m_status;
    QAction* m_pauseResume;
    QAction* m_snooze;
    QAction* m_finish;
    QAction* m_open;
    QAction* m_preferences;
    QAction* m_quit;
    Toggle m_mode = Toggle::Pause;
    Confirm m_confirm;
};

} // namespace gleaner::gui
