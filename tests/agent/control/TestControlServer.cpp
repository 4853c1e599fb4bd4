// ControlServer: what a client of the agent's control socket sees (docs/control-protocol.md).
#include "AgentPaths.h"
#include "ControlTestSupport.h"
#include "TestSupport.h"
#include "control/ControlServer.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QStandardPaths>
#include <QTest>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

namespace {

QString errorOf(const QJsonObject& reply)
{
    return reply.value(QStringLiteral("error")).toString();
}

// A Unix socket bound at `path` by a process that then died: the file stays, nobody listens.
bool makeStaleSocket(const QString& path)
{
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const QByteArray encoded = QFile::encodeName(path);
    qstrncpy(address.sun_path, encoded.constData(), sizeof address.sun_path);
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return bound;
}

// A connected client that never reads: a raw descriptor has no Qt notifier that would drain it.
int rawClient(const QString& path)
{
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    qstrncpy(address.sun_path, QFile::encodeName(path).constData(), sizeof address.sun_path);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

} // namespace

class TestControlServer : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();

    void helloComesFirst();
    void requestAndReply();
    void errorReply();
    void unknownCommandListsTheKnownOnes();
    void malformedLinesAreAnsweredAndTheConnectionLives_data();
    void malformedLinesAreAnsweredAndTheConnectionLives();
    void aLineOfExactlyOneMiBIsServed();
    void anOverlongLineClosesTheConnection();
    void subscribersGetEveryPublishedEvent();
    void unsubscribedClientsGetNoEvents();
    void eventsPublishedByAHandlerComeBeforeItsReply();
    void aClientThatDoesNotReadIsDisconnected();
    void socketIsOwnerOnly();
    void staleSocketIsReplaced();
    void secondServerIsRefusedNamingThePid();
    void aFileInTheWayIsNotDeleted();
    void closeDisconnectsClientsAndRemovesTheSocket();
    void socketPathIsInTheDataDir();
    void aDeepDataDirFallsBackToTheRuntimeFolder();

private:
    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<FakeHandler> m_handler;
    std::unique_ptr<ControlServer> m_server;
    QString dataDir() const { return m_dir->path(); }
};

void TestControlServer::init()
{
    m_dir = scratchDir();
    m_handler = std::make_unique<FakeHandler>();
    m_server = std::make_unique<ControlServer>(*m_handler);
    m_server->setAgentVersion(QStringLiteral("9.8.7"));
    const Status listening = m_server->listen(dataDir());
    QVERIFY2(listening.ok(), qPrintable(listening.error()));
}

void TestControlServer::cleanup()
{
    m_server.reset();
    m_handler.reset();
    m_dir.reset();
}

void TestControlServer::helloComesFirst()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    const QJsonObject hello = client.messages().first();
    QCOMPARE(hello.value(u"protocol").toInt(), 1);
    QCOMPARE(hello.value(u"agent_version").toString(), QStringLiteral("9.8.7"));
    QCOMPARE(hello.value(u"pid").toInteger(), QCoreApplication::applicationPid());
    QVERIFY(!hello.contains(u"id"));
    QTRY_COMPARE(m_server->clientCount(), 1);
}

void TestControlServer::requestAndReply()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    QJsonObject reply = client.call(7, QStringLiteral("status"));
    QCOMPARE(reply.value(u"id").toInt(), 7);
    QCOMPARE(reply.value(u"ok").toBool(), true);
    QCOMPARE(reply.value(u"result").toObject(), m_handler->status);

    reply = client.call(8, QStringLiteral("pause"));
    QCOMPARE(reply.value(u"result").toObject().value(u"state").toString(), QStringLiteral("paused"));
    const QJsonObject args{{QStringLiteral("n"), 3}, {QStringLiteral("s"), QStringLiteral("caf\u00e9")}};
    reply = client.call(9, QStringLiteral("echo"), args);
    QCOMPARE(reply.value(u"result").toObject(), args);
    QCOMPARE(m_handler->calls,
             (QStringList{QStringLiteral("status"), QStringLiteral("pause"), QStringLiteral("echo")}));
}

void TestControlServer::errorReply()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    const QJsonObject reply = client.call(3, QStringLiteral("fail"));
    QCOMPARE(reply.value(u"id").toInt(), 3);
    QCOMPARE(reply.value(u"ok").toBool(), false);
    QCOMPARE(errorOf(reply), fakeFailure());
    QVERIFY(!reply.contains(u"result"));
}

void TestControlServer::unknownCommandListsTheKnownOnes()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    const QJsonObject reply = client.call(4, QStringLiteral("frobnicate"));
    QCOMPARE(reply.value(u"ok").toBool(), false);
    QCOMPARE(errorOf(reply),
             QStringLiteral("unknown command \"frobnicate\"; known commands: status, pause, fail, "
                            "echo, announce, subscribe, unsubscribe"));
    QVERIFY(m_handler->calls.isEmpty());
}

void TestControlServer::malformedLinesAreAnsweredAndTheConnectionLives_data()
{
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<QJsonValue>("id");
    QTest::addColumn<QString>("error");
    const QJsonValue null(QJsonValue::Null);
    QTest::newRow("not JSON") << QByteArray("status please\n") << null << QStringLiteral("is not JSON");
    QTest::newRow("truncated") << QByteArray("{\"id\":1,\"cmd\":\n") << null << QStringLiteral("is not JSON");
    QTest::newRow("an array") << QByteArray("[1,2]\n") << null << QStringLiteral("is not a JSON object");
    QTest::newRow("no id") << QByteArray("{\"cmd\":\"status\"}\n") << null << QStringLiteral("has no \"id\"");
    QTest::newRow("id a string") << QByteArray("{\"id\":\"1\",\"cmd\":\"status\"}\n") << null
                                 << QStringLiteral("\"id\" is not an integer");
    QTest::newRow("id a fraction") << QByteArray("{\"id\":1.5,\"cmd\":\"status\"}\n") << null
                                   << QStringLiteral("\"id\" is not an integer");
    QTest::newRow("no cmd") << QByteArray("{\"id\":5}\n") << QJsonValue(5) << QStringLiteral("no \"cmd\"");
    QTest::newRow("cmd a number") << QByteArray("{\"id\":6,\"cmd\":2}\n") << QJsonValue(6)
                                  << QStringLiteral("no \"cmd\"");
    QTest::newRow("args an array") << QByteArray("{\"id\":7,\"cmd\":\"echo\",\"args\":[]}\n") << QJsonValue(7)
                                   << QStringLiteral("\"args\" must be a JSON object");
}

void TestControlServer::malformedLinesAreAnsweredAndTheConnectionLives()
{
    QFETCH(QByteArray, line);
    QFETCH(QJsonValue, id);
    QFETCH(QString, error);
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    client.sendRaw(line);
    QTRY_COMPARE(client.messages().size(), 2);
    const QJsonObject reply = client.messages().at(1);
    QCOMPARE(reply.value(u"id"), id);
    QCOMPARE(reply.value(u"ok").toBool(), false);
    QVERIFY2(errorOf(reply).contains(error), qPrintable(errorOf(reply)));
    QVERIFY(m_handler->calls.isEmpty());
    // The connection still serves.
    QCOMPARE(client.call(100, QStringLiteral("status")).value(u"ok").toBool(), true);
}

void TestControlServer::aLineOfExactlyOneMiBIsServed()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    QByteArray line = encodeControlMessage(
        controlRequest(1, QStringLiteral("echo"), QJsonObject{{QStringLiteral("pad"), QString()}}));
    line.chop(1); // the newline
    const qsizetype padding = kMaxControlLineBytes - line.size();
    line.insert(line.indexOf("\"\"") + 1, QByteArray(padding, 'x'));
    QCOMPARE(line.size(), kMaxControlLineBytes);
    client.sendRaw(line + '\n');
    QTRY_VERIFY(client.reply(1).has_value());
    QCOMPARE(client.reply(1)->value(u"result").toObject().value(u"pad").toString().size(), padding);
}

void TestControlServer::anOverlongLineClosesTheConnection()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    LineClient bystander;
    QVERIFY(bystander.connectTo(m_server->socketPath()));
    QTRY_COMPARE(m_server->clientCount(), 2);
    // No newline: the agent must not wait for the end of a line that is already too long.
    client.sendRaw(QByteArray(kMaxControlLineBytes + 1, 'x'));
    QTRY_COMPARE(client.socket().state(), QLocalSocket::UnconnectedState);
    QCOMPARE(client.messages().size(), 2);
    const QJsonObject reply = client.messages().at(1);
    QCOMPARE(reply.value(u"id"), QJsonValue(QJsonValue::Null));
    QVERIFY2(errorOf(reply).contains(QStringLiteral("longer than 1048576 bytes")),
             qPrintable(errorOf(reply)));
    QTRY_COMPARE(m_server->clientCount(), 1);
    QCOMPARE(bystander.call(1, QStringLiteral("status")).value(u"ok").toBool(), true);
}

void TestControlServer::subscribersGetEveryPublishedEvent()
{
    std::vector<std::unique_ptr<LineClient>> clients;
    for (int i = 0; i < 3; ++i) {
        clients.push_back(std::make_unique<LineClient>());
        QVERIFY(clients.back()->connectTo(m_server->socketPath()));
        const QJsonObject reply = clients.back()->call(1, QStringLiteral("subscribe"));
        QCOMPARE(reply.value(u"result").toObject().value(u"subscribed").toBool(), true);
    }
    QCOMPARE(m_server->subscriberCount(), 3);
    const QJsonObject state = controlEvent(
        QStringLiteral("state"), {{QStringLiteral("state"), QStringLiteral("paused")},
                                  {QStringLiteral("reason"), QStringLiteral("you are using the computer")}});
    const QJsonObject log =
        controlEvent(QStringLiteral("log"), {{QStringLiteral("level"), QStringLiteral("info")},
                                             {QStringLiteral("message"), QStringLiteral("hello")}});
    m_server->publish(state);
    m_server->publish(log);
    for (const auto& client : clients) {
        QTRY_COMPARE(client->events().size(), 2);
        QCOMPARE(client->events().at(0), state);
        QCOMPARE(client->events().at(1), log);
    }
}

void TestControlServer::unsubscribedClientsGetNoEvents()
{
    LineClient subscriber;
    LineClient other;
    LineClient unsubscribed;
    QVERIFY(subscriber.connectTo(m_server->socketPath()));
    QVERIFY(other.connectTo(m_server->socketPath()));
    QVERIFY(unsubscribed.connectTo(m_server->socketPath()));
    subscriber.call(1, QStringLiteral("subscribe"));
    unsubscribed.call(1, QStringLiteral("subscribe"));
    const QJsonObject reply = unsubscribed.call(2, QStringLiteral("unsubscribe"));
    QCOMPARE(reply.value(u"result").toObject().value(u"subscribed").toBool(), false);
    QCOMPARE(m_server->subscriberCount(), 1);

    m_server->publish(controlEvent(QStringLiteral("coordinator"), {{QStringLiteral("reachable"), true}}));
    QTRY_COMPARE(subscriber.events().size(), 1);
    // A request answered after the publish is a barrier: had an event been sent to these two, it would have
    // arrived before the reply.
    other.call(3, QStringLiteral("status"));
    unsubscribed.call(3, QStringLiteral("status"));
    QCOMPARE(other.events().size(), 0);
    QCOMPARE(unsubscribed.events().size(), 0);
}

void TestControlServer::eventsPublishedByAHandlerComeBeforeItsReply()
{
    m_handler->onAnnounce = [this] {
        m_server->publish(
            controlEvent(QStringLiteral("state"), {{QStringLiteral("state"), QStringLiteral("paused")}}));
    };
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    client.call(1, QStringLiteral("subscribe"));
    client.call(2, QStringLiteral("announce"));
    const QList<QJsonObject> messages = client.messages();
    QCOMPARE(messages.size(), 4); // hello, subscribed, the event, the reply
    QCOMPARE(messages.at(2).value(u"event").toString(), QStringLiteral("state"));
    QCOMPARE(messages.at(3).value(u"id").toInt(), 2);
}

void TestControlServer::aClientThatDoesNotReadIsDisconnected()
{
    m_server->setMaxWriteBufferBytes(256 * 1024);
    LineClient reader;
    QVERIFY(reader.connectTo(m_server->socketPath()));
    reader.call(1, QStringLiteral("subscribe"));
    const int stuck = rawClient(m_server->socketPath());
    QVERIFY(stuck >= 0);
    const QByteArray subscribe = encodeControlMessage(controlRequest(1, QStringLiteral("subscribe")));
    QCOMPARE(::write(stuck, subscribe.constData(), size_t(subscribe.size())), ssize_t(subscribe.size()));
    QTRY_COMPARE(m_server->subscriberCount(), 2);

    const QJsonObject big =
        controlEvent(QStringLiteral("log"), {{QStringLiteral("level"), QStringLiteral("info")},
                                             {QStringLiteral("message"), QString(64 * 1024, u'x')}});
    // The kernel's socket buffers take the first few hundred KiB; then the agent's own buffer grows to the
    // cap.
    int published = 0;
    while (m_server->subscriberCount() == 2 && published < 400) {
        m_server->publish(big);
        ++published;
        QCoreApplication::processEvents();
    }
    QCOMPARE(m_server->subscriberCount(), 1);
    QCOMPARE(m_server->clientCount(), 1);
    ::close(stuck);
    // The client that reads kept its connection and got every event.
    QTRY_COMPARE(reader.events().size(), published);
    QVERIFY(reader.isConnected());
}

void TestControlServer::socketIsOwnerOnly()
{
    const QString path = m_server->socketPath();
    struct stat info
    {
    };
    QCOMPARE(::lstat(QFile::encodeName(path).constData(), &info), 0);
    QVERIFY(S_ISSOCK(info.st_mode));
    QCOMPARE(info.st_uid, ::geteuid());
    QCOMPARE(fileMode(path), mode_t(0600));
}

void TestControlServer::staleSocketIsReplaced()
{
    m_server.reset(); // removes its socket
    const QString path = controlSocketPath(dataDir());
    QVERIFY(!QFile::exists(path));
    QVERIFY(makeStaleSocket(path));
    QVERIFY(QFile::exists(path));

    ControlServer server(*m_handler);
    const Status listening = server.listen(dataDir());
    QVERIFY2(listening.ok(), qPrintable(listening.error()));
    LineClient client;
    QVERIFY(client.connectTo(path));
    QCOMPARE(fileMode(path), mode_t(0600));
}

void TestControlServer::secondServerIsRefusedNamingThePid()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    ControlServer second(*m_handler);
    const Status listening = second.listen(dataDir());
    QVERIFY(!listening.ok());
    QVERIFY2(listening.error().startsWith(QStringLiteral("another gleaner-agent is running for %1 (pid %2)")
                                              .arg(dataDir())
                                              .arg(QCoreApplication::applicationPid())),
             qPrintable(listening.error()));
    QVERIFY(!second.isListening());
    // The first agent still serves, on the same socket file.
    QCOMPARE(client.call(1, QStringLiteral("status")).value(u"ok").toBool(), true);
    LineClient later;
    QVERIFY(later.connectTo(m_server->socketPath()));
}

void TestControlServer::aFileInTheWayIsNotDeleted()
{
    m_server.reset();
    const QString path = controlSocketPath(dataDir());
    QVERIFY(writeFile(path, "precious"));
    ControlServer server(*m_handler);
    const Status listening = server.listen(dataDir());
    QVERIFY(!listening.ok());
    QVERIFY2(listening.error().contains(QStringLiteral("not a socket")), qPrintable(listening.error()));
    QCOMPARE(readFile(path), QByteArray("precious"));
}

void TestControlServer::closeDisconnectsClientsAndRemovesTheSocket()
{
    LineClient client;
    QVERIFY(client.connectTo(m_server->socketPath()));
    const QString path = m_server->socketPath();
    m_server->close();
    QVERIFY(!m_server->isListening());
    QVERIFY(!QFile::exists(path));
    QTRY_COMPARE(client.socket().state(), QLocalSocket::UnconnectedState);
}

void TestControlServer::socketPathIsInTheDataDir()
{
    QCOMPARE(m_server->socketPath(), QDir(dataDir()).filePath(QStringLiteral("control.sock")));
    // The same folder spelled another way gives the same socket.
    QCOMPARE(controlSocketPath(dataDir() + QStringLiteral("/./")), m_server->socketPath());
}

void TestControlServer::aDeepDataDirFallsBackToTheRuntimeFolder()
{
    QString deep = dataDir();
    while (QFile::encodeName(deep).size() < 120)
        deep += QStringLiteral("/a-rather-long-folder-name");
    QVERIFY(QDir().mkpath(deep));
    const QString path = controlSocketPath(deep);
    const QString runtime = QStandardPaths::writableLocation(QStandardPaths::RuntimeLocation);
    QVERIFY(!runtime.isEmpty());
    QCOMPARE(QFileInfo(path).absolutePath(), runtime);
    QVERIFY(QFileInfo(path).fileName().startsWith(QStringLiteral("gleaner-agent-")));
    QVERIFY(QFile::encodeName(path).size() <= 107);
    // Stable, and distinct per data dir.
    QCOMPARE(controlSocketPath(deep), path);
    QVERIFY(controlSocketPath(deep + QStringLiteral("/b")) != path);

    ControlServer server(*m_handler);
    const Status listening = server.listen(deep);
    QVERIFY2(listening.ok(), qPrintable(listening.error()));
    QCOMPARE(server.socketPath(), path);
    QCOMPARE(fileMode(path), mode_t(0600));
    LineClient client;
    QVERIFY(client.connectTo(controlSocketPath(deep)));
    QCOMPARE(client.call(1, QStringLiteral("status")).value(u"ok").toBool(), true);
    server.close();
    QVERIFY(!QFile::exists(path));
}

QTEST_GUILESS_MAIN(TestControlServer)
#include "TestControlServer.moc"
