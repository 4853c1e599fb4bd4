#include "ControlTestSupport.h"

#include "control/ControlServer.h"

#include <QJsonArray>
#include <QTest>

namespace gleaner::test {

QStringList FakeHandler::commands() const
{
    return {QStringLiteral("status"), QStringLiteral("pause"), QStringLiteral("fail"), QStringLiteral("echo"),
            QStringLiteral("announce")};
}

QString fakeFailure()
{
    return QStringLiteral("cannot do that now: the agent is shutting down");
}

Result<QJsonObject> FakeHandler::handle(const QString& cmd, const QJsonObject& args)
{
    calls << cmd;
    if (cmd == u"status")
        return status;
    if (cmd == u"pause") {
        status.insert(QStringLiteral("state"), QStringLiteral("paused"));
        return QJsonObject{{QStringLiteral("state"), QStringLiteral("paused")}};
    }
    if (cmd == u"fail")
        return fail(fakeFailure());
    if (cmd == u"echo")
        return args;
    if (cmd == u"announce") {
        if (onAnnounce)
            onAnnounce();
        return QJsonObject{{QStringLiteral("announced"), true}};
    }
    return fail(QStringLiteral("FakeHandler was given \"%1\", which it did not list").arg(cmd));
}

LineClient::LineClient(QObject* parent) : QObject(parent)
{
    connect(&m_socket, &QLocalSocket::readyRead, this, [this] {
        m_buffer.append(m_socket.readAll());
        while (const auto line = m_buffer.takeLine()) {
            auto message = agent::parseControlLine(*line);
            if (!message) {
                qWarning("LineClient: %s", qPrintable(message.error()));
                continue;
            }
            m_messages.append(*message);
        }
    });
}

bool LineClient::connectTo(const QString& socketPath)
{
    m_socket.connectToServer(socketPath);
    (void)QTest::qWaitFor(
        [this] { return !m_messages.isEmpty() || m_socket.state() == QLocalSocket::UnconnectedState; }, 5000);
    return !m_messages.isEmpty() && m_messages.first().value(QStringLiteral("event")).toString() == u"hello";
}

void LineClient::request(qint64 id, const QString& cmd, const QJsonObject& args)
{
    sendRaw(agent::encodeControlMessage(agent::controlRequest(id, cmd, args)));
}

std::optional<QJsonObject> LineClient::reply(qint64 id) const
{
    for (const QJsonObject& message : m_messages)
        if (!agent::isControlEvent(message) && message.value(QStringLiteral("id")).toInteger(-1) == id)
            return message;
    return std::nullopt;
}

QJsonObject LineClient::call(qint64 id, const QString& cmd, const QJsonObject& args)
{
    request(id, cmd, args);
    (void)QTest::qWaitFor([this, id] { return reply(id).has_value(); }, 5000);
    return reply(id).value_or(QJsonObject{});
}

QList<QJsonObject> LineClient::events() const
{
    QList<QJsonObject> events;
    for (const QJsonObject& message : m_messages)
        if (agent::isControlEvent(message) && message.value(QStringLiteral("event")).toString() != u"hello")
            events.append(message);
    return events;
}

ThreadedServer::ThreadedServer() : m_context(new QObject)
{
    m_context->moveToThread(&m_thread);
    m_thread.start();
}

ThreadedServer::~ThreadedServer()
{
    run([this](agent::ControlServer&, FakeHandler&) { m_server.reset(); });
    QMetaObject::invokeMethod(
        m_context, [this] { delete m_context; }, Qt::BlockingQueuedConnection);
    m_thread.quit();
    m_thread.wait();
}

Status ThreadedServer::listen(const QString& dataDir)
{
    Status status;
    QMetaObject::invokeMethod(
        m_context,
        [&] {
            m_handler = std::make_unique<FakeHandler>();
            m_server = std::make_unique<agent::ControlServer>(*m_handler);
            status = m_server->listen(dataDir);
        },
        Qt::BlockingQueuedConnection);
    return status;
}

void ThreadedServer::run(const std::function<void(agent::ControlServer&, FakeHandler&)>& f)
{
    QMetaObject::invokeMethod(
        m_context,
        [&] {
            if (m_server)
                f(*m_server, *m_handler);
        },
        Qt::BlockingQueuedConnection);
}

} // namespace gleaner::test
