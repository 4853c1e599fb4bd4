#pragma once
// The agent's control socket: a Unix socket (QLocalServer) at controlSocketPath(dataDir), owner-only (0600),
// served on the daemon's event loop without ever blocking it. Every connection first receives the hello
// event; requests go to the ControlHandler, except `subscribe` / `unsubscribe`, which the server handles: a
// subscribed connection receives every event given to publish(). Clients never poll. A client that does not
// read what it is sent (its write buffer passes maxWriteBufferBytes) is disconnected rather than allowed to
// grow the agent's memory. Every call belongs on the thread the server lives in (the daemon's event loop);
// handle() runs there too. docs/control-protocol.md describes the protocol.

#include "Result.h"

#include <QHash>
#include <QJsonObject>
#include <QObject>
#include <QString>

#include <memory>

class QLocalServer;
class QLocalSocket;

namespace gleaner::agent {

class ControlHandler;

class ControlServer : public QObject
{
    Q_OBJECT
public:
    static constexpr qint64 kDefaultMaxWriteBufferBytes = qint64(4) << 20;

    // `handler` must outlive the server.
    explicit ControlServer(ControlHandler& handler, QObject* parent = nullptr);
    ~ControlServer() override;

    // Listens for the agent of `dataDir`. A socket left by a crashed agent is removed; when another agent
    // answers on it, this fails with "another gleaner-agent is running for DIR (pid N)". The socket file is
    // checked to be a socket owned by this user with mode 0600. Called once at start: the probe of an
    // existing socket may wait up to a second, the only wait in this class.
    Status listen(const QString& dataDir);
    // Listens at `path` for every local user (mode 0666; the handler decides per request from the peer's
    // credentials, ControlHandler::handleFrom), at most kMaxSharedClients connections at once: the system
    // agent's session socket (docs/fleet.md). `folder` must exist.
    Status listenShared(const QString& path);
    static constexpr int kMaxSharedClients = 64;
    static constexpr int kMaxSharedClientsPerUser = 8; // one user cannot take every place
    // Disconnects every client and removes the socket file.
    void close();
    bool isListening() const;
    QString socketPath() const { return m_socketPath; }

    // Sends `event` ({"event": NAME, ...}) to every subscribed client.
    void publish(const QJsonObject& event);

    int clientCount() const { return int(m_clients.size()); }
    int subscriberCount() const;

    // The hello's agent_version; the build's version unless set.
    void setAgentVersion(const QString& version) { m_agentVersion = version; }
    void setMaxWriteBufferBytes(qint64 bytes) { m_maxWriteBufferBytes = bytes; }

private:
    struct Client;

    Status listenAt(const QString& path, bool shared, const QString& owner);
    void onNewConnection();
    void onReadyRead(QLocalSocket* socket);
    void dropClient(QLocalSocket* socket);
    void handleLine(QLocalSocket* socket, const QByteArray& line);
    void send(QLocalSocket* socket, const QByteArray& bytes);
    QStringList knownCommands() const;

    ControlHandler& m_handler;
    std::unique_ptr<QLocalServer> m_server;
    QHash<QLocalSocket*, std::shared_ptr<Client>> m_clients;
    QString m_socketPath;
    QString m_agentVersion;
    bool m_shared = false;
    qint64 m_nextConnection = 1;
    qint64 m_maxWriteBufferBytes = kDefaultMaxWriteBufferBytes;
};

} // namespace gleaner::agent
