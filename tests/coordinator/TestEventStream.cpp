// Live events (Server-Sent Events) over real HTTPS: a page logged in with a session gets an event within a
// second of a lease, an accepted update, its folding in, a validation, an agent's change and a job's new
// counts; heartbeats when nothing happens; a client that does not read is dropped without holding the others
// back; and a stopping server ends every stream at once.
#include "DashboardFixture.h"
#include "HttpTestSupport.h"
#include "TestSupport.h"

#include "dashboard/EventStream.h"

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

// The data of the next `type` event, read within timeoutMs; empty when none came.
QJsonObject nextEvent(test::RawTlsClient& client, const QByteArray& type, int timeoutMs = 1000)
{
    QElapsedTimer timer;
    timer.start();
    while (timer.elapsed() < timeoutMs) {
        const QByteArray text = client.readUntil("\n\n", timeoutMs - int(timer.elapsed()));
        if (text.isEmpty())
            return {};
        const qsizetype at = text.lastIndexOf(QByteArray("event: " + type + "\ndata: "));
        if (at < 0)
            continue;
        const qsizetype start = text.indexOf("data: ", at) + 6;
        return QJsonDocument::fromJson(text.mid(start, text.indexOf('\n', start) - start)).object();
    }
    return {};
}

} // namespace

class TestEventStream : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void cleanup() { d.stop(); }
    void eventsArriveWithinASecond();
    void heartbeatWhenQuiet();
    void slowClientIsDroppedOthersKeepUp();
    void hubDropsAnOverflowingQueue();
    void stoppingTheServerEndsStreams();

private:
    // Opens GET /api/v1/admin/events with a fresh session; checks the head and the hello event.
    bool open(test::RawTlsClient& client);

    test::DashboardFixture d;
};

bool TestEventStream::open(test::RawTlsClient& client)
{
    const test::AdminLogin login = d.login();
    const QString error = client.connect(d.server->port(), d.f.dir.certificatePath());
    if (!error.isEmpty()) {
        qWarning() << error;
        return false;
    }
    const QByteArray request =
        "GET /api/v1/admin/events HTTP/1.1\r\nHost: 127.0.0.1:" + QByteArray::number(d.server->port()) +
        "\r\nAccept: text/event-stream\r\nSec-Fetch-Site: same-origin\r\nCookie: " + login.cookie +
        "\r\n\r\n";
    client.send(request);
    const QByteArray head = client.readUntil("\r\n\r\n", 5000);
    if (!head.startsWith("HTTP/1.1 200") || !head.contains("Content-Type: text/event-stream") ||
        !head.contains("Transfer-Encoding: chunked")) {
        qWarning() << "event stream head:" << head;
        return false;
    }
    return !nextEvent(client, "hello", 5000).isEmpty();
}

void TestEventStream::eventsArriveWithinASecond()
{
    QVERIFY(d.start());
    const QByteArray agent = d.enrollAgent();
    QCOMPARE(d.submitTinyJob(2, 3), 1);
    test::RawTlsClient client;
    QVERIFY(open(client));
    QTRY_COMPARE(d.f.core->events().subscribers(), 1);

    qint64 base = 0;
    const QByteArray a = d.leaseOne(agent, &base);
    const QJsonObject lease = nextEvent(client, "lease");
    QCOMPARE(lease.value(QStringLiteral("lease")).toString().toLatin1(), a);
    QCOMPARE(lease.value(QStringLiteral("epoch")).toInt(), 1);

    const QByteArray b = d.leaseOne(agent, &base);
    QVERIFY(!nextEvent(client, "lease").isEmpty());
    QCOMPARE(d.upload(agent, a, base, 0.5f, 0.4).status, 202);
    QElapsedTimer sinceAccepted;
    sinceAccepted.start();
    const QJsonObject update = nextEvent(client, "update");
    QVERIFY2(sinceAccepted.elapsed() < 1000, "the update event came more than a second after the 202");
    QCOMPARE(update.value(QStringLiteral("loss")).toDouble(), 0.4);
    QCOMPARE(update.value(QStringLiteral("job")).toInt(), 1);
    const QJsonObject applied = nextEvent(client, "applied");
    QCOMPARE(applied.value(QStringLiteral("version")).toInt(), 1);
    QCOMPARE(applied.value(QStringLiteral("staleness")).toInt(), 0);

    QCOMPARE(d.upload(agent, b, base).status, 202); // completes epoch 1: it is validated
    const QJsonObject validation = nextEvent(client, "validation", 5000);
    QCOMPARE(validation.value(QStringLiteral("epoch")).toInt(), 1);
    QCOMPARE(validation.value(QStringLiteral("epoch_end")).toBool(), true);
    QVERIFY(validation.contains(QStringLiteral("accuracy")));

    d.enrollAgent(nullptr, QStringLiteral("second"));
    QCOMPARE(nextEvent(client, "agent").value(QStringLiteral("change")).toString(),
             QStringLiteral("enrolled"));

    // A job's summary follows its changes at the next tick.
    QCOMPARE(d.send("POST", "/api/v1/admin/jobs/1/pause", d.f.init.adminToken).status, 200);
    d.f.core->state().call([&] { d.f.core->tick(); });
    QElapsedTimer job;
    job.start();
    QJsonObject summary;
    while (summary.value(QStringLiteral("state")).toString() != u"paused" && job.elapsed() < 2000)
        summary = nextEvent(client, "job");
    QCOMPARE(summary.value(QStringLiteral("state")).toString(), QStringLiteral("paused"));
    QCOMPARE(summary.value(QStringLiteral("subtasks")).toObject().value(QStringLiteral("epoch")).toInt(), 2);
}

void TestEventStream::heartbeatWhenQuiet()
{
    QVERIFY(d.start());
    test::RawTlsClient client;
    QVERIFY(open(client));
    QTRY_COMPARE(d.f.core->events().subscribers(), 1);
    for (int i = 0; i < 3; ++i) {
        d.f.clock.advance(16'000);
        d.f.core->state().call([&] { d.f.core->tick(); });
    }
    QVERIFY(!client.readUntil(": keep-alive\n\n", 2000).isEmpty());
}

void TestEventStream::slowClientIsDroppedOthersKeepUp()
{
    QVERIFY(d.start());
    test::RawTlsClient slow;
    test::RawTlsClient fast;
    QVERIFY(open(slow));
    QVERIFY(open(fast));
    QTRY_COMPARE(d.f.core->events().subscribers(), 2);
    // The slow client reads nothing while 30 MB of events are published: more than the socket buffers, the
    // write in progress and its queue's bound (4 MiB) hold. The fast one reads each as it comes.
    const QJsonObject big{{QStringLiteral("padding"), QString(64 * 1024, u'x')}};
    for (int i = 0; i < 480; ++i) {
        d.f.core->events().publish("flood", big);
        QVERIFY(!fast.readUntil("event: flood\n", 5000).isEmpty());
    }
    QTRY_COMPARE(
        d.f.core->metrics().registry().render().contains("gleaner_dashboard_clients_dropped_total 1\n"),
        true);
    d.f.core->events().publish("after", QJsonObject{{QStringLiteral("n"), 1}});
    QVERIFY(!nextEvent(fast, "after", 5000).isEmpty());
    // When the slow client reads at last, its stream says why it ends, and ends.
    QVERIFY(!slow.readUntil(": dropped", 20'000).isEmpty());
    QVERIFY(slow.waitClosed(5000));
    QTRY_COMPARE(d.f.core->events().subscribers(), 1);
}

void TestEventStream::hubDropsAnOverflowingQueue()
{
    dashboard::EventHub hub(dashboard::EventHub::Limits{3, 1 << 20, 2, 15'000});
    int dropped = 0;
    hub.setDropObserver([&] { ++dropped; });
    auto first = hub.subscribe();
    auto second = hub.subscribe();
    QVERIFY(first && second);
    QVERIFY(!hub.subscribe()); // maxClients
    int wakes = 0;
    dashboard::EventStream stream(hub, second, QJsonObject{});
    stream.start([&] { ++wakes; });
    for (int i = 0; i < 3; ++i)
        hub.publish("tick", QJsonObject{{QStringLiteral("i"), i}});
    QCOMPARE(wakes, 3);
    const ResponseStream::Chunk chunk = stream.next();
    QVERIFY(chunk.bytes.startsWith("retry: 2000\n\n"));
    QCOMPARE(chunk.bytes.count("event: tick\n"), 3);
    QVERIFY(!chunk.end);
    // `first` never reads: its fourth event overflows it.
    hub.publish("tick", QJsonObject{{QStringLiteral("i"), 3}});
    QCOMPARE(dropped, 1);
    QVERIFY(first->dropped());
    QVERIFY(first->take().isEmpty()); // its queue's memory is freed at once
    QVERIFY(!second->dropped());
    QCOMPARE(stream.next().bytes.count("event: tick\n"), 1);
    hub.closeAll();
    QVERIFY(stream.next().end);
    stream.finish();
    QCOMPARE(hub.subscribers(), 1);
}

void TestEventStream::stoppingTheServerEndsStreams()
{
    QVERIFY(d.start());
    test::RawTlsClient client;
    QVERIFY(open(client));
    QTRY_COMPARE(d.f.core->events().subscribers(), 1);
    QElapsedTimer timer;
    timer.start();
    d.server->stop(10'000);
    QVERIFY2(timer.elapsed() < 2000, "a live event stream held the server's shutdown");
    QVERIFY(client.waitClosed(2000));
    QCOMPARE(d.f.core->events().subscribers(), 0);
}

QTEST_GUILESS_MAIN(TestEventStream)
#include "TestEventStream.moc"
