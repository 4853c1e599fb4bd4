#pragma once
// A blocking connection to the local agent's control socket, for the command line: connect with a timeout,
// send a request, wait for its reply, or wait for the next event (`status --follow`). Never use it on an
// event loop that must stay responsive; the tray app uses ControlClient instead.
//
// Every failure is a message for the person at the terminal: "no gleaner-agent is running for DIR; start it
// with `gleaner-agent run --data-dir DIR`", "... did not answer within 5 s", "... closed the connection".

#include "Result.h"
#include "control/ControlProtocol.h"

#include <QDeadlineTimer>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <memory>

class QLocalSocket;

namespace gleaner::agent {

class ControlConnection
{
public:
    static constexpr int kDefaultTimeoutMs = 5000;

    // Connects to the agent of `dataDir` and reads its hello (refusing another protocol version).
    static Result<std::unique_ptr<ControlConnection>> open(const QString& dataDir,
                                                           int timeoutMs = kDefaultTimeoutMs);
    // The same for a socket named by its path: the system agent's session socket (SessionDesk).
    static Result<std::unique_ptr<ControlConnection>> openSocket(const QString& socketPath,
                                                                 int timeoutMs = kDefaultTimeoutMs);
    ~ControlConnection();

    // {"event": "hello", "protocol", "agent_version", "pid"}
    const QJsonObject& hello() const { return m_hello; }

    // Sends one request and waits for its reply; events that arrive meanwhile are kept for nextEvent(). An
    // error reply becomes the result's error, as the agent worded it.
    Result<QJsonObject> call(const QString& cmd, const QJsonObject& args = {},
                             int timeoutMs = kDefaultTimeoutMs);
    // The next event, waiting up to `timeoutMs` (-1: as long as it takes). Fails when the agent closes the
    // connection.
    Result<QJsonObject> nextEvent(int timeoutMs = -1);

private:
    ControlConnection(QString dataDir, std::unique_ptr<QLocalSocket> socket);
    // `owner` names the agent in messages: its data dir, or the socket.
    static Result<std::unique_ptr<ControlConnection>> openAt(const QString& path, const QString& owner, int timeoutMs);
    // The next line as a JSON object; `waitingFor` completes "did not ... within N s".
    Result<QJsonObject> nextMessage(QDeadlineTimer deadline, int timeoutMs, const QString& waitingFor);

    QString m_dataDir;
    std::unique_ptr<QLocalSocket> m_socket;
    ControlLineBuffer m_buffer;
    QJsonObject m_hello;
    QList<QJsonObject> m_events;
    qint64 m_nextId = 1;
};

} // namespace gleaner::agent
