#pragma once
// The tray app's one connection to its agent: a ControlClient for the data folder, subscribed to events, that
// asks for `status` (and `preferences`) on every connection and keeps them current from the events the agent
// pushes; it never polls. While no agent answers, the status is synthesised as state "offline" with a reason
// a person can act on, and an enrolled folder's agent is started once (detached: it outlives the tray app).
// The actions (pause, resume, snooze, finish) report a refusal through actionFailed().

#include "AgentStatus.h"

#include <QHash>
#include <QJsonObject>
#include <QList>
#include <QObject>
#include <QString>
#include <QTimer>

#include <memory>

namespace gleaner::agent {
class ControlClient;
}

namespace gleaner::gui {

class AgentLauncher;

class AgentLink : public QObject
{
    Q_OBJECT
public:
    static constexpr int kMaxLogLines = 200;

    // `launcher` may be null (never start an agent); it must outlive the link.
    AgentLink(const QString& dataDir, AgentLauncher* launcher, QObject* parent = nullptr);
    ~AgentLink() override;

    // Connects (and keeps reconnecting). When no agent answers within startGraceMs and the folder is
    // enrolled, starts one.
    void start();
    // Watches the machine's system agent at its session socket instead, read-only: nothing is started, and the
    // actions are not offered (the system agent refuses them, naming the organisation's policy file). Before
    // start().
    void watchSystemAgent(const QString& sessionSocket);
    // Watching the system agent (watchSystemAgent()).
    bool isReadOnly() const { return !m_systemSocket.isEmpty(); }
    // Starts an agent now (after enrollment, or when the user asks), then reconnects at once.
    void startAgent();
    void setStartGraceMs(int ms) { m_startGraceMs = ms; }
    // How long a started agent may take to answer before its log's last line is shown as the reason.
    void setStartTimeoutMs(int ms) { m_startTimeoutMs = ms; }
    // An agent was started and has not answered yet.
    bool isStarting() const { return m_startTimeout.isActive(); }

    agent::ControlClient& client() { return *m_client; }
    QString dataDir() const { return m_dataDir; }
    QString systemSocket() const { return m_systemSocket; }
    bool isConnected() const;
    bool isEnrolled() const;

    // The latest status object (docs/control-protocol.md); {"state":"offline", "reason":...} when no agent
    // answers.
    const QJsonObject& status() const { return m_status; }
    QString state() const;
    QString reason() const;
    QString reasonCode() const;
    // The preferences object, with the latest values and locked keys from `preferences` events.
    const QJsonObject& preferences() const { return m_preferences; }
    // The agent's hello on this connection (agent_version, pid).
    QJsonObject hello() const;
    // The latest kMaxLogLines of the agent's `log` events, and this program's own notes, oldest first.
    const QList<LogLine>& log() const { return m_log; }
    // How many lines were ever appended (log() keeps the last kMaxLogLines), so a view appends only new ones.
    qint64 logTotal() const { return m_logTotal; }

    void pause();
    void resume();
    void snooze(int seconds);
    void finish();
    // Asks for `status` again.
    void refresh();

Q_SIGNALS:
    // The status, preferences or log changed.
    void changed();
    void connectedChanged(bool connected);
    // An action or request the agent refused, or that could not reach it, in words for the user.
    void actionFailed(const QString& message);

private:
    void onConnected();
    void onDisconnected();
    void onEvent(const QJsonObject& event);
    void onReply(qint64 id, bool ok, const QJsonObject& result, const QString& error);
    void sendAction(const QString& cmd, const QJsonObject& args, const QString& what);
    void setOffline(const QString& reason, const QString& code);
    void onStartGraceOver();
    void onStartTimeout();
    // `agentTimeMs`: when the agent logged it (0: a line of this program's own, now).
    void appendLog(const QString& level, const QString& message, qint64 agentTimeMs = 0);

    QString m_systemSocket;
    QString m_dataDir;
    qint64 m_lastAgentLogMs = 0; // the newest agent log line shown
    AgentLauncher* m_launcher;
    std::unique_ptr<agent::ControlClient> m_client;
    QJsonObject m_status;
    QJsonObject m_preferences;
    QList<LogLine> m_log;
    qint64 m_logTotal = 0;
    qint64 m_statusRequest = -1;
    qint64 m_preferencesRequest = -1;
    QHash<qint64, QString> m_actions; // request id -> what the user asked for ("pause the agent")
    QTimer m_startGrace;
    QTimer m_startTimeout;
    QTimer m_exitWatch; // while a started agent has not answered: has it ended already?
    int m_startGraceMs = 1500;
    int m_startTimeoutMs = 20000;
    bool m_launched = false;
};

} // namespace gleaner::gui
