#include "control/ControlClient.h"

#include "AgentPaths.h"
#include "control/ControlConnection.h"
#include "control/ControlLogging.h"

#include <QLocalSocket>

namespace gleaner::agent {

ControlClient::ControlClient(const QString& dataDir, QObject* parent)
    : QObject(parent), m_dataDir(dataDir), m_socket(new QLocalSocket(this))
{
    m_reconnectTimer.setSingleShot(true);
    connect(&m_reconnectTimer, &QTimer::timeout, this, &ControlClient::tryConnect);
    connect(m_socket, &QLocalSocket::connected, this, &ControlClient::onSocketConnected);
    connect(m_socket, &QLocalSocket::disconnected, this, &ControlClient::onSocketDisconnected);
    connect(m_socket, &QLocalSocket::readyRead, this, &ControlClient::onReadyRead);
    connect(m_socket, &QLocalSocket::errorOccurred, this, [this](QLocalSocket::LocalSocketError error) {
        // A failed attempt; a drop of an established connection is handled by disconnected().
        if (!m_socketUp) {
            qCDebug(lcControl) << "cannot reach the agent for" << m_dataDir << ":" << m_socket->errorString();
            scheduleReconnect();
        }
    });
}

ControlClient::~ControlClient()
{
    m_running = false;
    m_socket->disconnect(this);
    m_socket->abort();
}

void ControlClient::start()
{
    if (m_running)
        return;
    m_running = true;
    m_delayMs = m_minDelayMs;
    tryConnect();
}

void ControlClient::stop()
{
    m_running = false;
    m_reconnectTimer.stop();
    m_socket->abort(); // disconnected() fails what is pending
}

void ControlClient::setReconnectDelays(int minMs, int maxMs)
{
    m_minDelayMs = qMax(1, minMs);
    m_maxDelayMs = qMax(m_minDelayMs, maxMs);
    m_delayMs = m_minDelayMs;
}

void ControlClient::setSubscribed(bool subscribed)
{
    if (m_subscribed == subscribed)
        return;
    m_subscribed = subscribed;
    if (m_socketUp)
        sendSubscription();
}

qint64 ControlClient::send(const QString& cmd, const QJsonObject& args)
{
    const qint64 id = m_nextId++;
    if (!m_socketUp) {
        failLater(id, QStringLiteral("not connected to the gleaner-agent for %1").arg(m_dataDir));
        return id;
    }
    m_pending.insert(id);
    m_socket->write(encodeControlMessage(controlRequest(id, cmd, args)));
    return id;
}

Result<QJsonObject> ControlClient::call(const QString& dataDir, const QString& cmd, const QJsonObject& args,
                                        int timeoutMs)
{
    auto connection = ControlConnection::open(dataDir, timeoutMs);
    if (!connection)
        return Error{connection.error()};
    return (*connection)->call(cmd, args, timeoutMs);
}

void ControlClient::tryConnect()
{
    if (!m_running || m_socket->state() != QLocalSocket::UnconnectedState)
        return;
    // Errors of the attempt may be signalled inside connectToServer(); they only start the timer.
    m_socket->connectToServer(m_socketPath.isEmpty() ? controlSocketPath(m_dataDir) : m_socketPath);
}

void ControlClient::scheduleReconnect()
{
    if (!m_running || m_reconnectTimer.isActive())
        return;
    m_reconnectTimer.start(m_delayMs);
    m_delayMs = qMin(m_delayMs * 2, m_maxDelayMs);
}

void ControlClient::onSocketConnected()
{
    m_socketUp = true;
    m_buffer = ControlLineBuffer();
    if (m_subscribed)
        sendSubscription();
}

void ControlClient::onSocketDisconnected()
{
    const bool wasGreeted = m_greeted;
    m_socketUp = false;
    m_greeted = false;
    m_hello = {};
    m_internal.clear();
    const QSet<qint64> pending = std::exchange(m_pending, {});
    for (qint64 id : pending)
        Q_EMIT replyReceived(
            id, false, {},
            QStringLiteral("the gleaner-agent for %1 closed the connection before answering").arg(m_dataDir));
    if (wasGreeted)
        Q_EMIT disconnected();
    scheduleReconnect();
}

void ControlClient::onReadyRead()
{
    m_buffer.append(m_socket->readAll());
    while (m_socketUp) {
        const auto line = m_buffer.takeLine();
        if (!line)
            break;
        auto message = parseControlLine(*line);
        if (!message) {
            qCWarning(lcControl) << "ignoring a line from the agent:" << message.error();
            continue;
        }
        handleMessage(*message);
    }
    if (m_socketUp && m_buffer.overflowed()) {
        qCWarning(lcControl) << "the agent for" << m_dataDir << "sent a line longer than 1 MiB; reconnecting";
        m_socket->abort();
    }
}

void ControlClient::handleMessage(const QJsonObject& message)
{
    if (isControlEvent(message)) {
        if (message.value(QStringLiteral("event")).toString() != u"hello") {
            Q_EMIT eventReceived(message);
            return;
        }
        const int protocol = message.value(QStringLiteral("protocol")).toInt();
        if (protocol != kControlProtocolVersion) {
            qCWarning(lcControl) << "the agent for" << m_dataDir << "speaks control protocol" << protocol
                                 << "; this program speaks" << kControlProtocolVersion;
            m_socket->abort();
            return;
        }
        m_hello = message;
        m_greeted = true;
        m_delayMs = m_minDelayMs;
        Q_EMIT connected();
        return;
    }
    auto reply = parseControlReply(message);
    if (!reply) {
        qCWarning(lcControl) << "ignoring a message from the agent:" << reply.error();
        return;
    }
    if (!reply->id) {
        // The agent could not read one of our requests; nothing here writes such a line.
        qCWarning(lcControl) << "the agent refused a request:" << reply->error;
        return;
    }
    if (m_internal.remove(*reply->id)) {
        if (!reply->ok)
            qCWarning(lcControl) << "subscribing to the agent's events failed:" << reply->error;
        return;
    }
    if (m_pending.remove(*reply->id))
        Q_EMIT replyReceived(*reply->id, reply->ok, reply->result, reply->error);
}

void ControlClient::sendSubscription()
{
    const qint64 id = m_nextId++;
    m_internal.insert(id);
    m_socket->write(encodeControlMessage(
        controlRequest(id, m_subscribed ? QStringLiteral("subscribe") : QStringLiteral("unsubscribe"))));
}

void ControlClient::failLater(qint64 id, const QString& error)
{
    QMetaObject::invokeMethod(
        this, [this, id, error] { Q_EMIT replyReceived(id, false, {}, error); }, Qt::QueuedConnection);
}

} // namespace gleaner::agent
