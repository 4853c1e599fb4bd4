// ControlConnection (the command line's blocking client) and ControlClient (the tray app's asynchronous one)
// against a real ControlServer.
#include "AgentPaths.h"
#include "ControlTestSupport.h"
#include "TestSupport.h"
#include "control/ControlClient.h"
#include "control/ControlConnection.h"
#include "control/ControlServer.h"

#include <QElapsedTimer>
#include <QFile>
#include <QLocalServer>
#include <QSignalSpy>
#include <QTest>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

namespace {

QString notRunningMessage(const QString& dir)
{
    return QStringLiteral(
               "no gleaner-agent is running for %1; start it with `gleaner-agent run --data-dir %1`")
        .arg(dir);
}

QJsonObject stateEvent(const QString& state)
{
    return controlEvent(QStringLiteral("state"), {{QStringLiteral("state"), state}});
}

} // namespace

class TestControlClient : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    // Blocking
    void callReturnsTheResult();
    void callReturnsTheAgentsErrorAsWorded();
    void eventsAreSkippedWhileWaitingAndKeptForLater();
    void notRunningSaysHowToStartIt();
    void aStaleSocketCountsAsNotRunning();
    void anAgentThatDoesNotAnswerTimesOut();
    // Asynchronous
    void asyncRepliesAndEvents();
    void sendingWhileDisconnectedFailsLater();
    void pendingRequestsFailWhenTheAgentGoesAway();
    void reconnectsAndResubscribesAfterTheAgentRestarts();
};

void TestControlClient::callReturnsTheResult()
{
    const auto dir = scratchDir();
    ThreadedServer server;
    QVERIFY(server.listen(dir->path()).ok());
    auto status = ControlClient::call(dir->path(), QStringLiteral("status"));
    QVERIFY2(status.ok(), qPrintable(status.error()));
    QCOMPARE(status->value(u"state").toString(), QStringLiteral("training"));

    auto connection = ControlConnection::open(dir->path());
    QVERIFY2(connection.ok(), qPrintable(connection.error()));
    QCOMPARE((*connection)->hello().value(u"protocol").toInt(), kControlProtocolVersion);
    auto paused = (*connection)->call(QStringLiteral("pause"));
    QVERIFY(paused.ok());
    QCOMPARE(paused->value(u"state").toString(), QStringLiteral("paused"));
    // Several requests on one connection.
    QCOMPARE((*connection)->call(QStringLiteral("status"))->value(u"state").toString(),
             QStringLiteral("paused"));
}

void TestControlClient::callReturnsTheAgentsErrorAsWorded()
{
    const auto dir = scratchDir();
    ThreadedServer server;
    QVERIFY(server.listen(dir->path()).ok());
    auto failed = ControlClient::call(dir->path(), QStringLiteral("fail"));
    QVERIFY(!failed.ok());
    QCOMPARE(failed.error(), fakeFailure());
    auto unknown = ControlClient::call(dir->path(), QStringLiteral("frobnicate"));
    QVERIFY(!unknown.ok());
    QVERIFY2(
        unknown.error().startsWith(QStringLiteral("unknown command \"frobnicate\"; known commands: status")),
        qPrintable(unknown.error()));
}

void TestControlClient::eventsAreSkippedWhileWaitingAndKeptForLater()
{
    const auto dir = scratchDir();
    ThreadedServer server;
    QVERIFY(server.listen(dir->path()).ok());
    server.run([](ControlServer& s, FakeHandler& handler) {
        handler.onAnnounce = [&s] {
            s.publish(stateEvent(QStringLiteral("paused")));
            s.publish(stateEvent(QStringLiteral("training")));
        };
    });
    auto connection = ControlConnection::open(dir->path());
    QVERIFY(connection.ok());
    QVERIFY((*connection)->call(QStringLiteral("subscribe")).ok());
    auto reply = (*connection)->call(QStringLiteral("announce"));
    QVERIFY2(reply.ok(), qPrintable(reply.error()));
    QCOMPARE(reply->value(u"announced").toBool(), true);
    QCOMPARE((*connection)->nextEvent(1000).value(), stateEvent(QStringLiteral("paused")));
    QCOMPARE((*connection)->nextEvent(1000).value(), stateEvent(QStringLiteral("training")));
    // Events published later arrive too.
    server.run([](ControlServer& s, FakeHandler&) { s.publish(stateEvent(QStringLiteral("finishing"))); });
    QCOMPARE((*connection)->nextEvent(5000).value(), stateEvent(QStringLiteral("finishing")));
}

void TestControlClient::notRunningSaysHowToStartIt()
{
    const auto dir = scratchDir();
    auto status = ControlClient::call(dir->path(), QStringLiteral("status"));
    QVERIFY(!status.ok());
    QCOMPARE(status.error(), notRunningMessage(dir->path()));
}

void TestControlClient::aStaleSocketCountsAsNotRunning()
{
    const auto dir = scratchDir();
    // A crash leaves the file behind: a socket bound at the path that nobody listens on.
    const QString path = controlSocketPath(dir->path());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    qstrncpy(address.sun_path, QFile::encodeName(path).constData(), sizeof address.sun_path);
    QCOMPARE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ::close(fd);
    QVERIFY(QFile::exists(path));
    auto status = ControlClient::call(dir->path(), QStringLiteral("status"));
    QVERIFY(!status.ok());
    QCOMPARE(status.error(), notRunningMessage(dir->path()));
}

void TestControlClient::anAgentThatDoesNotAnswerTimesOut()
{
    const auto dir = scratchDir();
    // Something listens (the kernel accepts the connection) but never says a word.
    QLocalServer mute;
    QVERIFY(mute.listen(controlSocketPath(dir->path())));
    QElapsedTimer elapsed;
    elapsed.start();
    auto status = ControlClient::call(dir->path(), QStringLiteral("status"), {}, 200);
    QVERIFY(!status.ok());
    QCOMPARE(status.error(),
             QStringLiteral("the gleaner-agent for %1 did not greet within 0.2 s").arg(dir->path()));
    QVERIFY(elapsed.elapsed() < 5000);
}

void TestControlClient::asyncRepliesAndEvents()
{
    const auto dir = scratchDir();
    FakeHandler handler;
    ControlServer server(handler);
    QVERIFY(server.listen(dir->path()).ok());

    ControlClient client(dir->path());
    client.setSubscribed(true);
    QSignalSpy connected(&client, &ControlClient::connected);
    QSignalSpy replies(&client, &ControlClient::replyReceived);
    QSignalSpy events(&client, &ControlClient::eventReceived);
    client.start();
    QTRY_COMPARE(connected.size(), 1);
    QVERIFY(client.isConnected());
    QCOMPARE(client.hello().value(u"pid").toInteger(), QCoreApplication::applicationPid());
    QTRY_COMPARE(server.subscriberCount(), 1);

    const qint64 statusId = client.send(QStringLiteral("status"));
    const qint64 failId = client.send(QStringLiteral("fail"));
    QTRY_COMPARE(replies.size(), 2);
    QCOMPARE(replies.at(0).at(0).toLongLong(), statusId);
    QCOMPARE(replies.at(0).at(1).toBool(), true);
    QCOMPARE(replies.at(0).at(2).toJsonObject(), handler.status);
    QCOMPARE(replies.at(1).at(0).toLongLong(), failId);
    QCOMPARE(replies.at(1).at(1).toBool(), false);
    QCOMPARE(replies.at(1).at(3).toString(), fakeFailure());

    server.publish(stateEvent(QStringLiteral("paused")));
    QTRY_COMPARE(events.size(), 1);
    QCOMPARE(events.at(0).at(0).toJsonObject(), stateEvent(QStringLiteral("paused")));
    // The client's own subscribe request is not reported as a reply.
    QCOMPARE(replies.size(), 2);
}

void TestControlClient::sendingWhileDisconnectedFailsLater()
{
    const auto dir = scratchDir();
    ControlClient client(dir->path());
    QSignalSpy replies(&client, &ControlClient::replyReceived);
    const qint64 id = client.send(QStringLiteral("status"));
    QCOMPARE(replies.size(), 0); // never synchronously: the caller may not have stored the id yet
    QTRY_COMPARE(replies.size(), 1);
    QCOMPARE(replies.at(0).at(0).toLongLong(), id);
    QCOMPARE(replies.at(0).at(1).toBool(), false);
    QVERIFY(replies.at(0).at(3).toString().contains(QStringLiteral("not connected")));
}

void TestControlClient::pendingRequestsFailWhenTheAgentGoesAway()
{
    const auto dir = scratchDir();
    FakeHandler handler;
    auto server = std::make_unique<ControlServer>(handler);
    QVERIFY(server->listen(dir->path()).ok());
    ControlClient client(dir->path());
    QSignalSpy connected(&client, &ControlClient::connected);
    QSignalSpy disconnected(&client, &ControlClient::disconnected);
    QSignalSpy replies(&client, &ControlClient::replyReceived);
    client.start();
    QTRY_COMPARE(connected.size(), 1);
    const qint64 id = client.send(QStringLiteral("status"));
    server.reset(); // before the event loop delivered the request
    QTRY_COMPARE(disconnected.size(), 1);
    QTRY_COMPARE(replies.size(), 1);
    QCOMPARE(replies.at(0).at(0).toLongLong(), id);
    QCOMPARE(replies.at(0).at(1).toBool(), false);
    QVERIFY(replies.at(0).at(3).toString().contains(QStringLiteral("closed the connection")));
    QVERIFY(!client.isConnected());
}

void TestControlClient::reconnectsAndResubscribesAfterTheAgentRestarts()
{
    const auto dir = scratchDir();
    FakeHandler handler;
    auto server = std::make_unique<ControlServer>(handler);
    QVERIFY(server->listen(dir->path()).ok());

    ControlClient client(dir->path());
    client.setReconnectDelays(10, 80);
    client.setSubscribed(true);
    QSignalSpy connected(&client, &ControlClient::connected);
    QSignalSpy disconnected(&client, &ControlClient::disconnected);
    QSignalSpy events(&client, &ControlClient::eventReceived);
    QSignalSpy replies(&client, &ControlClient::replyReceived);
    client.start();
    QTRY_COMPARE(connected.size(), 1);
    QTRY_COMPARE(server->subscriberCount(), 1);

    server.reset(); // the agent stops
    QTRY_COMPARE(disconnected.size(), 1);
    QVERIFY(!client.isConnected());
    // Attempts fail while no agent runs; then it is back.
    server = std::make_unique<ControlServer>(handler);
    QVERIFY(server->listen(dir->path()).ok());
    QTRY_COMPARE(connected.size(), 2);
    QVERIFY(client.isConnected());
    QTRY_COMPARE(server->subscriberCount(), 1);
    server->publish(stateEvent(QStringLiteral("waiting")));
    QTRY_COMPARE(events.size(), 1);
    const qint64 id = client.send(QStringLiteral("status"));
    QTRY_COMPARE(replies.size(), 1);
    QCOMPARE(replies.at(0).at(0).toLongLong(), id);
    QCOMPARE(replies.at(0).at(1).toBool(), true);

    client.stop();
    QTRY_COMPARE(disconnected.size(), 2);
    QTRY_COMPARE(server->clientCount(), 0);
}

QTEST_GUILESS_MAIN(TestControlClient)
#include "TestControlClient.moc"
