#include "control/ControlServer.h"

#include "AgentPaths.h"
#include "control/ControlHandler.h"
#include "control/ControlLogging.h"
#include "control/ControlProtocol.h"

#include <QCoreApplication>
#include <QFile>
#include <QFileInfo>
#include <QLocalServer>
#include <QLocalSocket>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef GLEANER_AGENT_VERSION
#define GLEANER_AGENT_VERSION "unknown"
#endif

namespace gleaner::agent {
namespace {

// How long listen() waits for an agent that may already answer on the socket. A live listener accepts a
// connection at once (the kernel queues it) and a stale socket refuses it at once, so this is only reached
// when the other agent's queue is full.
constexpr int kProbeTimeoutMs = 1000;

// The credentials of the process on the other end of a connected Unix socket; pid 0 and uid -1 when unknown.
ControlPeer peerOf(qintptr fd)
{
    ControlPeer peer;
    peer.pid = 0;
#ifdef SO_PEERCRED
    ucred credentials{};
    socklen_t size = sizeof credentials;
    if (::getsockopt(int(fd), SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0) {
        peer.pid = credentials.pid;
        peer.uid = credentials.uid;
    }
#endif
    return peer;
}

// The pid of the process that listens on the other end of a connected Unix socket, 0 when unknown.
qint64 peerPid(qintptr fd)
{
    return peerOf(fd).pid;
}

} // namespace

struct ControlServer::Client
{
    ControlLineBuffer buffer;
    ControlPeer peer;
    bool subscribed = false;
    bool closing =
        false; // an overlong line was refused: nothing more is read, the reply is flushed, then close
};

ControlServer::ControlServer(ControlHandler& handler, QObject* parent)
    : QObject(parent), m_handler(handler), m_agentVersion(QStringLiteral(GLEANER_AGENT_VERSION))
{
}

ControlServer::~ControlServer()
{
    close();
}

Status ControlServer::listen(const QString& dataDir)
{
    return listenAt(controlSocketPath(dataDir), false, dataDir);
}

Status ControlServer::listenShared(const QString& path)
{
    return listenAt(path, true, path);
}

Status ControlServer::listenAt(const QString& path, bool shared, const QString& owner)
{
    close();
    const QByteArray encoded = QFile::encodeName(path);
    const QString folder = QFileInfo(path).absolutePath();
    if (!QFileInfo(folder).isDir())
        return fail(QStringLiteral("cannot open the control socket %1: the folder %2 does not exist")
                        .arg(path, folder));

    struct stat info
    {
    };
    if (::lstat(encoded.constData(), &info) == 0) {
        if (!S_ISSOCK(info.st_mode))
            return fail(QStringLiteral(
                            "cannot open the control socket %1: a file that is not a socket is in the way; "
                            "remove it if no gleaner-agent uses it")
                            .arg(path));
        QLocalSocket probe;
        probe.connectToServer(path);
        if (probe.waitForConnected(kProbeTimeoutMs)) {
            const qint64 pid = peerPid(probe.socketDescriptor());
            probe.abort();
            return fail(QStringLiteral(
                            "another gleaner-agent is running for %1 (pid %2); stop it first, or give this "
                            "one another --data-dir")
                            .arg(owner, pid > 0 ? QString::number(pid) : QStringLiteral("unknown")));
        }
        if (info.st_uid != ::geteuid())
            return fail(
                QStringLiteral("cannot open the control socket %1: it belongs to another user (uid %2)")
                    .arg(path)
                    .arg(info.st_uid));
        // Nobody answers: the socket of an agent that crashed.
        qCInfo(lcControl) << "removing the stale control socket" << path;
        if (!QLocalServer::removeServer(path))
            return fail(
                QStringLiteral("cannot remove the stale control socket %1; remove it by hand").arg(path));
    }

    auto server = std::make_unique<QLocalServer>();
    // Owner-only from the start; the chmod below makes it exactly 0600 whatever Qt chose.
    server->setSocketOptions(QLocalServer::UserAccessOption);
    if (!server->listen(path))
        return fail(
            QStringLiteral("cannot listen on the control socket %1: %2").arg(path, server->errorString()));
    auto refuse = [&](const QString& why) {
        server->close();
        return fail(QStringLiteral("the control socket %1 %2").arg(path, why));
    };
    // The session socket: every local user may connect, and the handler looks at who did.
    const mode_t mode = shared ? 0666 : 0600;
    if (::chmod(encoded.constData(), mode) != 0)
        return refuse(QStringLiteral("could not be given mode %1 (chmod failed)").arg(mode, 0, 8));
    if (::lstat(encoded.constData(), &info) != 0 || !S_ISSOCK(info.st_mode))
        return refuse(QStringLiteral("vanished or was replaced while it was being set up"));
    if (info.st_uid != ::geteuid() || (info.st_mode & 0777) != mode)
        return refuse(
            QStringLiteral("does not have mode %1 after chmod (mode %2)").arg(mode, 0, 8).arg(info.st_mode & 0777, 0, 8));
    m_shared = shared;

    m_server = std::move(server);
    m_socketPath = path;
    connect(m_server.get(), &QLocalServer::newConnection, this, &ControlServer::onNewConnection);
    qCInfo(lcControl) << "control socket listening at" << path;
    return {};
}

void ControlServer::close()
{
    const auto sockets = m_clients.keys();
    for (QLocalSocket* socket : sockets) {
        socket->disconnect(this);
        socket->abort();
        socket->deleteLater(); // close() may run inside one of this socket's signals (a handler's request)
    }
    m_clients.clear();
    if (m_server) {
        m_server->close(); // removes the socket file
        m_server.reset();
    }
    m_socketPath.clear();
}

bool ControlServer::isListening() const
{
    return m_server && m_server->isListening();
}

int ControlServer::subscriberCount() const
{
    int count = 0;
    for (const auto& client : m_clients)
        count += client->subscribed && !client->closing ? 1 : 0;
    return count;
}

void ControlServer::publish(const QJsonObject& event)
{
    if (!isControlEvent(event)) {
        qCWarning(lcControl) << "not publishing a message without \"event\":" << event;
        return;
    }
    const QByteArray bytes = encodeControlMessage(event);
    const auto sockets = m_clients.keys(); // send() may drop a client
    for (QLocalSocket* socket : sockets) {
        const auto client = m_clients.value(socket);
        if (client && client->subscribed && !client->closing)
            send(socket, bytes);
    }
}

void ControlServer::onNewConnection()
{
    while (m_server && m_server->hasPendingConnections()) {
        QLocalSocket* socket = m_server->nextPendingConnection();
        if (m_shared && m_clients.size() >= kMaxSharedClients) {
            qCWarning(lcControl) << "refusing a session-socket client: already" << m_clients.size();
            socket->abort();
            socket->deleteLater();
            continue;
        }
        socket->setParent(this);
        auto client = std::make_shared<Client>();
        client->peer = peerOf(socket->socketDescriptor());
        if (m_shared) {
            int sameUser = 0;
            for (const auto& other : std::as_const(m_clients))
                sameUser += other->peer.uid == client->peer.uid ? 1 : 0;
            if (sameUser >= kMaxSharedClientsPerUser) {
                qCWarning(lcControl) << "refusing a session-socket client of uid" << client->peer.uid << ": already"
                                     << sameUser;
                socket->abort();
                socket->deleteLater();
                continue;
            }
        }
        client->peer.connection = m_nextConnection++;
        m_clients.insert(socket, client);
        connect(socket, &QLocalSocket::readyRead, this, [this, socket] { onReadyRead(socket); });
        connect(socket, &QLocalSocket::disconnected, this, [this, socket] { dropClient(socket); });
        qCDebug(lcControl) << "control client connected;" << m_clients.size() << "now";
        send(socket, encodeControlMessage(controlHello(m_agentVersion, QCoreApplication::applicationPid())));
    }
}

void ControlServer::onReadyRead(QLocalSocket* socket)
{
    // A local copy keeps the client's state alive when a request ends in the client being dropped.
    const std::shared_ptr<Client> client = m_clients.value(socket);
    if (!client || client->closing) {
        socket->readAll();
        return;
    }
    client->buffer.append(socket->readAll());
    while (m_clients.contains(socket) && !client->closing) {
        const std::optional<QByteArray> line = client->buffer.takeLine();
        if (!line)
            break;
        handleLine(socket, *line);
    }
    if (client->buffer.overflowed() && m_clients.contains(socket) && !client->closing) {
        qCWarning(lcControl) << "closing a control client that sent a line longer than"
                             << kMaxControlLineBytes << "bytes";
        send(socket, encodeControlMessage(controlError(
                         std::nullopt,
                         QStringLiteral("a line longer than %1 bytes (1 MiB) arrived; the connection is "
                                        "closed. Send one JSON object per line, each at most 1 MiB.")
                             .arg(kMaxControlLineBytes))));
        client->closing = true;
        if (m_clients.contains(socket))
            socket->disconnectFromServer(); // flushes the error first
    }
}

void ControlServer::dropClient(QLocalSocket* socket)
{
    const std::shared_ptr<Client> client = m_clients.value(socket);
    if (!m_clients.remove(socket))
        return;
    m_handler.connectionClosed(client->peer);
    socket->disconnect(this);
    socket->deleteLater();
    qCDebug(lcControl) << "control client gone;" << m_clients.size() << "left";
}

void ControlServer::handleLine(QLocalSocket* socket, const QByteArray& line)
{
    const auto parsed = parseControlRequest(line);
    if (const auto* error = std::get_if<ControlRequestError>(&parsed)) {
        send(socket, encodeControlMessage(controlError(error->id, error->message)));
        return;
    }
    const auto& request = std::get<ControlRequest>(parsed);
    qCDebug(lcControl) << "request" << request.id << request.cmd;
    const std::shared_ptr<Client> client = m_clients.value(socket);
    if (request.cmd == u"subscribe" || request.cmd == u"unsubscribe") {
        client->subscribed = request.cmd == u"subscribe";
        send(socket, encodeControlMessage(controlReply(
                         request.id, QJsonObject{{QStringLiteral("subscribed"), client->subscribed}})));
        return;
    }
    if (!m_handler.commands().contains(request.cmd)) {
        send(socket, encodeControlMessage(controlError(
                         request.id, unknownControlCommandMessage(request.cmd, knownCommands()))));
        return;
    }
    // The handler may publish events (sent before this reply) or even close the server.
    const Result<QJsonObject> result = m_handler.handleFrom(request.cmd, request.args, client->peer);
    send(socket, encodeControlMessage(result ? controlReply(request.id, *result)
                                             : controlError(request.id, result.error())));
}

void ControlServer::send(QLocalSocket* socket, const QByteArray& bytes)
{
    if (!m_clients.contains(socket))
        return;
    socket->write(bytes);
    if (socket->bytesToWrite() > m_maxWriteBufferBytes) {
        qCWarning(lcControl) << "disconnecting a control client that left" << socket->bytesToWrite()
                             << "bytes unread";
        socket->abort();
        dropClient(socket);
    }
}

QStringList ControlServer::knownCommands() const
{
    QStringList known = m_handler.commands();
    known << QStringLiteral("subscribe") << QStringLiteral("unsubscribe");
    return known;
}

} // namespace gleaner::agent
