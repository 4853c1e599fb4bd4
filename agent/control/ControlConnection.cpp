#include "control/ControlConnection.h"

#include "AgentPaths.h"

#include <QDeadlineTimer>
#include <QLocalSocket>

namespace gleaner::agent {
namespace {

QString seconds(int ms)
{
    return ms % 1000 == 0 ? QStringLiteral("%1 s").arg(ms / 1000)
                          : QStringLiteral("%1 s").arg(ms / 1000.0, 0, 'f', 1);
}

QString notRunning(const QString& dataDir)
{
    return QStringLiteral(
               "no gleaner-agent is running for %1; start it with `gleaner-agent run --data-dir %1`")
        .arg(dataDir);
}

} // namespace

ControlConnection::ControlConnection(QString dataDir, std::unique_ptr<QLocalSocket> socket)
    : m_dataDir(std::move(dataDir)), m_socket(std::move(socket))
{
}

ControlConnection::~ControlConnection() = default;

Result<std::unique_ptr<ControlConnection>> ControlConnection::open(const QString& dataDir, int timeoutMs)
{
    return openAt(controlSocketPath(dataDir), dataDir, timeoutMs);
}

Result<std::unique_ptr<ControlConnection>> ControlConnection::openSocket(const QString& socketPath, int timeoutMs)
{
    return openAt(socketPath, socketPath, timeoutMs);
}

Result<std::unique_ptr<ControlConnection>> ControlConnection::openAt(const QString& path, const QString& dataDir,
                                                                     int timeoutMs)
{
    auto socket = std::make_unique<QLocalSocket>();
    socket->connectToServer(path);
    if (!socket->waitForConnected(timeoutMs)) {
        switch (socket->error()) {
        case QLocalSocket::ServerNotFoundError:
        case QLocalSocket::ConnectionRefusedError: // a socket left by an agent that crashed
            if (path == dataDir) // a session socket, named by its path
                return fail(QStringLiteral("no system agent listens at %1 (is gleaner-agent.service running?)").arg(path));
            return fail(notRunning(dataDir));
        case QLocalSocket::SocketAccessError:
            return fail(QStringLiteral(
                            "cannot connect to the gleaner-agent for %1: permission denied on %2 (the agent "
                            "runs as another user; for the system service, run this as root or as its "
                            "user)")
                            .arg(dataDir, path));
        case QLocalSocket::SocketTimeoutError:
            return fail(QStringLiteral("the gleaner-agent for %1 did not accept a connection within %2")
                            .arg(dataDir, seconds(timeoutMs)));
        default:
            return fail(QStringLiteral("cannot connect to the gleaner-agent for %1 at %2: %3")
                            .arg(dataDir, path, socket->errorString()));
        }
    }
    std::unique_ptr<ControlConnection> connection(new ControlConnection(dataDir, std::move(socket)));
    auto hello = connection->nextMessage(QDeadlineTimer(timeoutMs), timeoutMs, QStringLiteral("greet"));
    if (!hello)
        return Error{hello.error()};
    if (hello->value(QStringLiteral("event")).toString() != u"hello")
        return fail(
            QStringLiteral("the program at %1 did not greet as a gleaner-agent does; is it one?").arg(path));
    const int protocol = hello->value(QStringLiteral("protocol")).toInt();
    if (protocol != kControlProtocolVersion)
        return fail(
            QStringLiteral("the gleaner-agent for %1 (version %2) speaks control protocol %3, this program "
                           "speaks %4; use the gleaner-agent program of the same version")
                .arg(dataDir, hello->value(QStringLiteral("agent_version")).toString())
                .arg(protocol)
                .arg(kControlProtocolVersion));
    connection->m_hello = *hello;
    return connection;
}

Result<QJsonObject> ControlConnection::call(const QString& cmd, const QJsonObject& args, int timeoutMs)
{
    const qint64 id = m_nextId++;
    m_socket->write(encodeControlMessage(controlRequest(id, cmd, args)));
    const QDeadlineTimer deadline(timeoutMs);
    const QString waitingFor = QStringLiteral("answer `%1`").arg(cmd);
    while (true) {
        auto message = nextMessage(deadline, timeoutMs, waitingFor);
        if (!message)
            return Error{message.error()};
        if (isControlEvent(*message)) {
            m_events.append(*message);
            continue;
        }
        auto reply = parseControlReply(*message);
        if (!reply)
            return Error{reply.error()};
        if (reply->id && *reply->id != id)
            continue; // the answer to an earlier request that timed out
        if (!reply->ok)
            return Error{reply->error};
        return reply->result;
    }
}

Result<QJsonObject> ControlConnection::nextEvent(int timeoutMs)
{
    const QDeadlineTimer deadline(timeoutMs);
    while (m_events.isEmpty()) {
        auto message = nextMessage(deadline, timeoutMs, QStringLiteral("send an event"));
        if (!message)
            return Error{message.error()};
        if (isControlEvent(*message))
            return *message;
        // A reply to nothing we wait for (an earlier request that timed out): skip it.
    }
    return m_events.takeFirst();
}

Result<QJsonObject> ControlConnection::nextMessage(QDeadlineTimer deadline, int timeoutMs,
                                                   const QString& waitingFor)
{
    while (true) {
        if (const auto line = m_buffer.takeLine())
            return std::move(parseControlLine(*line))
                .context(QStringLiteral("gleaner-agent for %1").arg(m_dataDir));
        if (m_buffer.overflowed())
            return fail(
                QStringLiteral("the gleaner-agent for %1 sent a line longer than 1 MiB").arg(m_dataDir));
        if (m_socket->bytesAvailable() > 0) {
            m_buffer.append(m_socket->readAll());
            continue;
        }
        if (m_socket->state() != QLocalSocket::ConnectedState)
            return fail(QStringLiteral("the gleaner-agent for %1 closed the connection (it was to %2)")
                            .arg(m_dataDir, waitingFor));
        if (!m_socket->waitForReadyRead(int(deadline.remainingTime())) && m_socket->bytesAvailable() == 0) {
            if (m_socket->state() != QLocalSocket::ConnectedState)
                continue; // reported above
            return fail(QStringLiteral("the gleaner-agent for %1 did not %2 within %3")
                            .arg(m_dataDir, waitingFor, seconds(timeoutMs)));
        }
    }
}

} // namespace gleaner::agent
