#pragma once
// Parts the control-socket tests share: a scripted ControlHandler, a raw line client that records every
// message the agent sends, and a ControlServer on its own thread for the blocking client (which would
// otherwise wait on the very event loop that has to answer it).

#include "Result.h"
#include "control/ControlHandler.h"
#include "control/ControlProtocol.h"

#include <QJsonObject>
#include <QList>
#include <QLocalSocket>
#include <QObject>
#include <QStringList>
#include <QThread>

#include <functional>
#include <memory>
#include <optional>

namespace gleaner::agent {
class ControlServer;
}

namespace gleaner::test {

// Commands: status (the `status` object), pause (-> {"state":"paused"}), fail (an error), echo (returns
// args), announce (calls `onAnnounce`, e.g. to publish, before answering).
class FakeHandler : public agent::ControlHandler
{
public:
    QStringList commands() const override;
    Result<QJsonObject> handle(const QString& cmd, const QJsonObject& args) override;

    QJsonObject status{{QStringLiteral("state"), QStringLiteral("training")},
                       {QStringLiteral("reason"), QStringLiteral("the computer is idle")}};
    QStringList calls;
    std::function<void()> onAnnounce;
};

// The error FakeHandler gives for `fail`.
QString fakeFailure();

// A client that speaks the framing by hand, so tests can also send what a correct client never would.
class LineClient : public QObject
{
    Q_OBJECT
public:
    explicit LineClient(QObject* parent = nullptr);

    // Connects and waits (event loop running) for the hello; false when either fails.
    bool connectTo(const QString& socketPath);
    void sendRaw(const QByteArray& bytes) { m_socket.write(bytes); }
    void request(qint64 id, const QString& cmd, const QJsonObject& args = {});
    // The reply with this id once it arrived.
    std::optional<QJsonObject> reply(qint64 id) const;
    // Sends a request and waits for its reply (event loop running); an empty object on timeout.
    QJsonObject call(qint64 id, const QString& cmd, const QJsonObject& args = {});
    QList<QJsonObject> events() const; // without the hello
    QList<QJsonObject> messages() const { return m_messages; }
    bool isConnected() const { return m_socket.state() == QLocalSocket::ConnectedState; }
    QLocalSocket& socket() { return m_socket; }

private:
    QLocalSocket m_socket;
    agent::ControlLineBuffer m_buffer;
    QList<QJsonObject> m_messages;
};

// A ControlServer with a FakeHandler living on a thread of its own.
class ThreadedServer
{
public:
    ThreadedServer();
    ~ThreadedServer();
    Status listen(const QString& dataDir);
    // Runs `f` on the server's thread and waits for it.
    void run(const std::function<void(agent::ControlServer&, FakeHandler&)>& f);

private:
    QThread m_thread;
    QObject* m_context;
    std::unique_ptr<FakeHandler> m_handler;
    std::unique_ptr<agent::ControlServer> m_server;
};

} // namespace gleaner::test
