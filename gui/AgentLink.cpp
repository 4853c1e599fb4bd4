#include "AgentLink.h"

#include <algorithm>

#include "AgentLauncher.h"
#include "GuiLogging.h"
#include "config/AgentConfig.h"
#include "control/ControlClient.h"

#include <QDir>
#include <QJsonArray>

namespace gleaner::gui {
namespace {

const QString kNotRunning = QStringLiteral("agent_not_running");
const QString kNotEnrolled = QStringLiteral(
    "This computer is not enrolled with a Gleaner coordinator yet: enroll it in the Gleaner window.");

} // namespace

AgentLink::AgentLink(const QString& dataDir, AgentLauncher* launcher, QObject* parent)
    : QObject(parent), m_dataDir(dataDir), m_launcher(launcher),
      m_client(std::make_unique<agent::ControlClient>(dataDir))
{
    // A local socket costs nothing to try: notice a restarted agent within 2 s rather than the default 10.
    m_client->setReconnectDelays(250, 2000);
    m_client->setSubscribed(true);
    connect(m_client.get(), &agent::ControlClient::connected, this, &AgentLink::onConnected);
    connect(m_client.get(), &agent::ControlClient::disconnected, this, &AgentLink::onDisconnected);
    connect(m_client.get(), &agent::ControlClient::eventReceived, this, &AgentLink::onEvent);
    connect(m_client.get(), &agent::ControlClient::replyReceived, this, &AgentLink::onReply);
    m_startGrace.setSingleShot(true);
    connect(&m_startGrace, &QTimer::timeout, this, &AgentLink::onStartGraceOver);
    m_startTimeout.setSingleShot(true);
    connect(&m_startTimeout, &QTimer::timeout, this, &AgentLink::onStartTimeout);
    m_exitWatch.setInterval(250);
    connect(&m_exitWatch, &QTimer::timeout, this, [this] {
        if (m_launcher && m_launcher->hasExited())
            onStartTimeout();
    });

    if (isEnrolled())
        setOffline(QStringLiteral("Connecting to the Gleaner agent…"), QStringLiteral("connecting"));
    else
        setOffline(kNotEnrolled, QStringLiteral("not_enrolled"));
}

AgentLink::~AgentLink() = default;

void AgentLink::start()
{
    m_client->start();
    m_startGrace.start(m_startGraceMs);
}

bool AgentLink::isConnected() const
{
    return m_client->isConnected();
}

bool AgentLink::isEnrolled() const
{
    return isReadOnly() || agent::AgentConfig::isEnrolled(m_dataDir);
}

void AgentLink::watchSystemAgent(const QString& sessionSocket)
{
    m_systemSocket = sessionSocket;
    m_launcher = nullptr;
    m_client->setSocketPath(sessionSocket);
    setOffline(QStringLiteral("Connecting to this computer's Gleaner service…"), QStringLiteral("connecting"));
}

QString AgentLink::state() const
{
    return m_status.value(u"state").toString();
}

QString AgentLink::reason() const
{
    return m_status.value(u"reason").toString();
}

QString AgentLink::reasonCode() const
{
    return m_status.value(u"reason_code").toString();
}

QJsonObject AgentLink::hello() const
{
    return m_client->hello();
}

void AgentLink::pause()
{
    sendAction(QStringLiteral("pause"), {}, QStringLiteral("pause the agent"));
}

void AgentLink::resume()
{
    sendAction(QStringLiteral("resume"), {}, QStringLiteral("resume the agent"));
}

void AgentLink::snooze(int seconds)
{
    sendAction(QStringLiteral("snooze"), {{QStringLiteral("seconds"), seconds}},
               QStringLiteral("snooze the agent"));
}

void AgentLink::finish()
{
    sendAction(QStringLiteral("finish"), {}, QStringLiteral("finish and stop the agent"));
}

void AgentLink::refresh()
{
    if (isConnected())
        m_statusRequest = m_client->send(QStringLiteral("status"));
}

void AgentLink::sendAction(const QString& cmd, const QJsonObject& args, const QString& what)
{
    if (!isConnected()) {
        const QString message = QStringLiteral("Could not %1: %2").arg(what, reason());
        appendLog(QStringLiteral("error"), message);
        Q_EMIT actionFailed(message);
        return;
    }
    m_actions.insert(m_client->send(cmd, args), what);
}

void AgentLink::startAgent()
{
    if (isConnected())
        return; // one agent per folder: it is there already
    if (!m_launcher) {
        setOffline(
            QStringLiteral("The Gleaner agent is not running; start it with `gleaner-agent run --data-dir "
                           "%1`.")
                .arg(m_dataDir),
            kNotRunning);
        return;
    }
    m_launched = true;
    m_startGrace.stop();
    const Status started = m_launcher->start(m_dataDir);
    if (!started) {
        const QString message =
            QStringLiteral("The Gleaner agent could not be started: %1.").arg(started.error());
        appendLog(QStringLiteral("error"), message);
        setOffline(message, QStringLiteral("agent_start_failed"));
        Q_EMIT actionFailed(message);
        return;
    }
    appendLog(QStringLiteral("info"), QStringLiteral("Started the Gleaner agent for %1.").arg(m_dataDir));
    setOffline(QStringLiteral("The Gleaner agent is not running; starting it…"),
               QStringLiteral("agent_starting"));
    // Reconnect from the shortest delay rather than wherever the backoff had got to.
    m_client->stop();
    m_client->start();
    m_startTimeout.start(m_startTimeoutMs);
    m_exitWatch.start();
}

void AgentLink::onStartGraceOver()
{
    if (isConnected() || m_launched)
        return;
    if (isReadOnly()) {
        setOffline(QStringLiteral("This computer's Gleaner service is not running; waiting for it…"), kNotRunning);
        return;
    }
    if (!isEnrolled()) {
        setOffline(kNotEnrolled, QStringLiteral("not_enrolled"));
        return;
    }
    startAgent();
}

void AgentLink::onStartTimeout()
{
    m_startTimeout.stop();
    m_exitWatch.stop();
    if (isConnected())
        return;
    const bool exited = m_launcher && m_launcher->hasExited();
    const QString last = ProcessAgentLauncher::lastLogLine(m_dataDir);
    const QString log = QDir::toNativeSeparators(ProcessAgentLauncher::logPath(m_dataDir));
    const QString message =
        last.isEmpty()
            ? (exited ? QStringLiteral(
                            "The Gleaner agent stopped as soon as it started and wrote nothing to %1; run "
                            "`gleaner-agent run --data-dir %2` in a terminal to see why.")
                            .arg(log, m_dataDir)
                      : QStringLiteral(
                            "The Gleaner agent did not answer within %1 s and wrote nothing to %2; run "
                            "`gleaner-agent run --data-dir %3` in a terminal to see why.")
                            .arg(m_startTimeoutMs / 1000)
                            .arg(log, m_dataDir))
            : QStringLiteral("The Gleaner agent did not start: %1 (see %2)").arg(last, log);
    appendLog(QStringLiteral("error"), message);
    setOffline(message, QStringLiteral("agent_start_failed"));
}

void AgentLink::onConnected()
{
    m_startGrace.stop();
    m_startTimeout.stop();
    m_exitWatch.stop();
    // Subscribed before asking (ControlClient subscribes first), so nothing falls between status and events.
    m_statusRequest = m_client->send(QStringLiteral("status"));
    m_preferencesRequest = m_client->send(QStringLiteral("preferences"));
    const QJsonObject hello = m_client->hello();
    appendLog(QStringLiteral("info"), QStringLiteral("Connected to the Gleaner agent %1 (pid %2).")
                                          .arg(hello.value(u"agent_version").toString())
                                          .arg(hello.value(u"pid").toInteger()));
    Q_EMIT connectedChanged(true);
}

void AgentLink::onDisconnected()
{
    m_actions.clear();
    const bool finished = state() == u"stopped" || state() == u"finishing";
    if (finished) {
        appendLog(QStringLiteral("info"), QStringLiteral("The Gleaner agent finished and stopped."));
        setOffline(
            QStringLiteral("The Gleaner agent finished its work and stopped; choose Start the agent to run "
                           "it again."),
            QStringLiteral("agent_finished"));
    } else if (isReadOnly()) {
        appendLog(QStringLiteral("warning"), QStringLiteral("Lost the connection to this computer's Gleaner service."));
        setOffline(QStringLiteral("This computer's Gleaner service is not running; waiting for it…"), kNotRunning);
    } else {
        appendLog(QStringLiteral("warning"), QStringLiteral("Lost the connection to the Gleaner agent."));
        setOffline(QStringLiteral("The Gleaner agent is not running; waiting for it to come back…"),
                   kNotRunning);
    }
    Q_EMIT connectedChanged(false);
}

void AgentLink::setOffline(const QString& reason, const QString& code)
{
    QJsonObject status{{QStringLiteral("state"), QStringLiteral("offline")},
                       {QStringLiteral("reason"), reason},
                       {QStringLiteral("reason_code"), code}};
    // What the agent last said about its work stays readable (the contribution, the coordinator).
    for (const QString& key : {QStringLiteral("totals"), QStringLiteral("coordinator"),
                               QStringLiteral("name"), QStringLiteral("agent_id")})
        if (m_status.contains(key))
            status.insert(key, m_status.value(key));
    m_status = status;
    Q_EMIT changed();
}

void AgentLink::onEvent(const QJsonObject& event)
{
    const QString name = event.value(u"event").toString();
    if (name == u"log") {
        appendLog(event.value(u"level").toString(QStringLiteral("info")), event.value(u"message").toString(),
                  event.value(u"time_ms").toInteger());
        Q_EMIT changed();
        return;
    }
    if (name == u"preferences") {
        for (const QString& key : {QStringLiteral("values"), QStringLiteral("locked")})
            if (event.contains(key))
                m_preferences.insert(key, event.value(key));
        Q_EMIT changed();
        return;
    }
    bool needsRefresh = false;
    const bool changedSomething = applyEvent(m_status, event, &needsRefresh);
    if (needsRefresh)
        refresh();
    if (changedSomething)
        Q_EMIT changed();
}

void AgentLink::onReply(qint64 id, bool ok, const QJsonObject& result, const QString& error)
{
    if (id == m_statusRequest) {
        m_statusRequest = -1;
        if (ok) {
            m_status = result;
            // The agent sends its recent log with the status: the lines from before this program connected
            // (or while it was away) join the log in time order; those already seen as events are skipped.
            bool merged = false;
            for (const QJsonValue& value : result.value(u"log").toArray()) {
                const QJsonObject line = value.toObject();
                const qint64 timeMs = line.value(u"time_ms").toInteger();
                if (timeMs <= m_lastAgentLogMs)
                    continue;
                appendLog(line.value(u"level").toString(QStringLiteral("info")),
                          line.value(u"message").toString(), timeMs);
                merged = true;
            }
            if (merged)
                std::stable_sort(m_log.begin(), m_log.end(),
                                 [](const LogLine& a, const LogLine& b) { return a.time < b.time; });
            Q_EMIT changed();
        } else if (isConnected()) {
            appendLog(QStringLiteral("error"),
                      QStringLiteral("The agent did not give its status: %1").arg(error));
            Q_EMIT changed();
        }
        return;
    }
    if (id == m_preferencesRequest) {
        m_preferencesRequest = -1;
        if (ok) {
            m_preferences = result;
        } else if (isConnected()) {
            appendLog(QStringLiteral("warning"),
                      QStringLiteral("The agent did not give its preferences: %1").arg(error));
        }
        Q_EMIT changed();
        return;
    }
    const auto action = m_actions.constFind(id);
    if (action == m_actions.constEnd())
        return;
    const QString what = action.value();
    m_actions.erase(action);
    if (!ok) {
        const QString message = QStringLiteral("Could not %1: %2").arg(what, error);
        appendLog(QStringLiteral("error"), message);
        Q_EMIT changed();
        Q_EMIT actionFailed(message);
        return;
    }
    // The state event has already come; the status brings what no event carries (the snooze's end).
    refresh();
}

void AgentLink::appendLog(const QString& level, const QString& message, qint64 agentTimeMs)
{
    if (agentTimeMs > 0)
        m_lastAgentLogMs = std::max(m_lastAgentLogMs, agentTimeMs);
    if (level == u"info")
        qCDebug(lcGui) << "agent log:" << message;
    else
        qCInfo(lcGui) << "agent log:" << level << message;
    m_log.append(
        LogLine{agentTimeMs > 0 ? QDateTime::fromMSecsSinceEpoch(agentTimeMs) : QDateTime::currentDateTime(),
                level, message});
    ++m_logTotal;
    while (m_log.size() > kMaxLogLines)
        m_log.removeFirst();
}

} // namespace gleaner::gui
