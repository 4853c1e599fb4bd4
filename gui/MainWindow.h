#pragma once
// "Open Gleaner": what the agent does and why (its state icon and reason), each subtask it holds with its
// progress, what this machine has contributed, the coordinator connection, and the recent log; with Pause /
// Resume, Snooze 1 h and Preferences at hand. Closing it hides it while the tray icon lives; without a tray,
// closing it ends the tray app (never the agent).

#include <QHash>
#include <QMainWindow>

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QVBoxLayout;

namespace gleaner::gui {

class AgentActions;
class AgentLink;
class SubtaskView;

class MainWindow : public QMainWindow
{
    Q_OBJECT
public:
    MainWindow(AgentLink& link, AgentActions& actions, QWidget* parent = nullptr);

    // true (tray mode): closing hides the window; false: closing closes it (and so ends the app).
    void setHideOnClose(bool hide) { m_hideOnClose = hide; }
    // A message that must not be missed (a refused action, a notification that could not be shown): in a
    // banner under the header until the next one, and in the status bar.
    void showNotice(const QString& text);

    // For tests and screenshots.
    QString stateText() const;
    QString reasonText() const;
    QString noticeText() const;
    QList<SubtaskView*> subtaskViews() const;
    QString contributionText() const;
    QString coordinatorText() const;
    QString logText() const;

Q_SIGNALS:
    void enrollRequested();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void update();
    void updateSubtasks();
    void updateLog();
    QWidget* makeHeader();
    QWidget* makeButtons(AgentActions& actions);

    AgentLink& m_link;
    bool m_hideOnClose = true;
    QLabel* m_icon;
    QLabel* m_state;
    QLabel* m_reason;
    QLabel* m_managed; // shown when the window watches the system agent (AgentLink::isReadOnly)
    QLabel* m_notice;
    QPushButton* m_enroll;
    QWidget* m_subtaskBox;
    QVBoxLayout* m_subtaskLayout;
    QLabel* m_noSubtasks;
    QHash<QString, SubtaskView*> m_subtasks; // by lease_id
    QLabel* m_contribution;
    QLabel* m_coordinator;
    QPlainTextEdit* m_log;
    qint64 m_logShown = 0;
};

} // namespace gleaner::gui
