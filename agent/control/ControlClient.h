#pragma once
// The asynchronous client of the local agent's control socket, for the tray app: it connects, reconnects with
// backoff whenever the agent goes away (a restart, an upgrade), re-subscribes to events on every connection
// when asked to, and reports replies and events as signals, so a GUI never blocks on the agent.
//
//     ControlClient client(dataDir);
//     client.setSubscribed(true);
//     connect(&client, &ControlClient::connected, [&] { client.send(u"status"_s); });
//     connect(&client, &ControlClient::eventReceived, ...);
//     client.start();
//
// For a one-shot blocking call (the command line) use call() or ControlConnection.

#include "Result.h"
#include "control/ControlProtocol.h"

#include <QJsonObject>
#include <QObject>
#include <QSet>
#include <QString>
#include <QTimer>

class QLocalSocket;

namespace gleaner::agent {

class ControlClient : public QObject
{
    Q_OBJECT
public:
    explicit ControlClient(const QString& dataDir, QObject* parent = nullptr);
    ~ControlClient() override;

    // Connects now and again after every disconnection or failed attempt, waiting `minMs`, then twice as long
    // each time up to `maxMs` (back to `minMs` once connected).
    void start();
    // Disconnects and stops reconnecting.
    void stop();
    void setReconnectDelays(int minMs, int maxMs);
    // When on, the client subscribes on every connection, so events keep coming across agent restarts.
    void setSubscribed(bool subscribed);

    // Connected and greeted by the agent.
    bool isConnected() const { return m_greeted; }
    // The agent's hello of the current connection: {"event":"hello","protocol","agent_version","pid"}.
    QJsonObject hello() const { return m_hello; }
    QString dataDir() const { return m_dataDir; }
    // Connect to this socket instead of the data folder's control socket: the system agent's session socket,
    // which the tray app of a desk user on a shared machine watches (read-only).
    void setSocketPath(const QString& path) { m_socketPath = path; }

    // Sends a request; its reply comes as replyReceived(id, ...) with the returned id. When not connected, or
    // when the connection drops before the reply, replyReceived says so (ok false), never synchronously.
    qint64 send(const QString& cmd, const QJsonObject& args = {});

    // Blocking one-shot: connects, sends `cmd`, returns the reply's result or a message for a person.
    static Result<QJsonObject> call(const QString& dataDir, const QString& cmd, const QJsonObject& args = {},
                                    int timeoutMs = 5000);

Q_SIGNALS:
    void connected();
    void disconnected();
    void eventReceived(const QJsonObject& event);
    void replyReceived(qint64 id, bool ok, const QJsonObject& result, const QString& error);

private:
    void tryConnect();
    void scheduleReconnect();
    void onSocketConnected();
    void onSocketDisconnected();
    void onReadyRead();
    void handleMessage(const QJsonObject& message);
    void sendSubscription();
    void failLater(qint64 id, const QString& error);

    QString m_dataDir;
    QString m_socketPath; // empty: controlSocketPath(m_dataDir)
    QLocalSocket* m_socket;
    ControlLineBuffer m_buffer;
    QTimer m_reconnectTimer;
    int m_minDelayMs = 250;
    int m_maxDelayMs = 10000;
    int m_delayMs = 250;
    bool m_running = false;
    bool m_subscribed = false;
    bool m_socketUp = false;
    bool m_greeted = false;
    QJsonObject m_hello;
    qint64 m_nextId = 1;
    QSet<qint64> m_pending;
    QSet<qint64> m_internal; // the client's own subscribe requests: their replies are not signalled
};

} // namespace gleaner::agent
