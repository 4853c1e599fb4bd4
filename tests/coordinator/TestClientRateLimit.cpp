// ClientRateLimit, the per-client token bucket in front of enrollment: bursts, refill, separate clients, a clock
// that steps back, and the bound on how many clients it tracks. A ManualClock stands in for time.
#include "api/ClientRateLimit.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestClientRateLimit : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void aBurstThenTheRate();
    void clientsHaveTheirOwnBuckets();
    void aClockThatStepsBackRefillsNothing();
    void trackedClientsAreBounded();
};

namespace {

int allowedOf(ClientRateLimit& limit, const QString& client, int tries)
{
    int allowed = 0;
    for (int i = 0; i < tries; ++i)
        allowed += limit.take(client).allowed ? 1 : 0;
    return allowed;
}

} // namespace

void TestClientRateLimit::aBurstThenTheRate()
{
    ManualClock clock;
    ClientRateLimit limit({10, 10}, clock);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.1"), 25), 10);
    const ClientRateLimit::Decision refused = limit.take(QStringLiteral("192.0.2.1"));
    QVERIFY(!refused.allowed);
    QVERIFY(!refused.tooManyClients);
    QCOMPARE(refused.retryAfterSeconds, qint64(6)); // 10 a minute: one every 6 s
    clock.advance(5'999);
    QVERIFY(!limit.take(QStringLiteral("192.0.2.1")).allowed);
    QCOMPARE(limit.take(QStringLiteral("192.0.2.1")).retryAfterSeconds, qint64(1));
    clock.advance(1);
    QVERIFY(limit.take(QStringLiteral("192.0.2.1")).allowed);
    QVERIFY(!limit.take(QStringLiteral("192.0.2.1")).allowed);
    // A minute of quiet refills the whole burst, and no more.
    clock.advance(3'600'000);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.1"), 25), 10);
}

void TestClientRateLimit::clientsHaveTheirOwnBuckets()
{
    ManualClock clock;
    ClientRateLimit limit({10, 3}, clock);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.1"), 10), 3);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.2"), 10), 3);
    QCOMPARE(allowedOf(limit, QStringLiteral("2001:db8::/64"), 10), 3);
}

void TestClientRateLimit::aClockThatStepsBackRefillsNothing()
{
    ManualClock clock;
    ClientRateLimit limit({10, 2}, clock);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.1"), 5), 2);
    clock.advance(-86'400'000);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.1"), 5), 0);
    clock.advance(6'000);
    QCOMPARE(allowedOf(limit, QStringLiteral("192.0.2.1"), 5), 1);
}

void TestClientRateLimit::trackedClientsAreBounded()
{
    ManualClock clock;
    ClientRateLimit limit({60, 1, 2}, clock);
    QVERIFY(limit.take(QStringLiteral("192.0.2.1")).allowed);
    QVERIFY(limit.take(QStringLiteral("192.0.2.2")).allowed);
    const ClientRateLimit::Decision third = limit.take(QStringLiteral("192.0.2.3"));
    QVERIFY(!third.allowed);
    QVERIFY(third.tooManyClients);
    // Once the tracked buckets have refilled, forgetting them changes nothing, and room is made.
    clock.advance(1'000);
    QVERIFY(limit.take(QStringLiteral("192.0.2.3")).allowed);
    // The clients that were forgotten start full again, as they would have been.
    QVERIFY(limit.take(QStringLiteral("192.0.2.1")).allowed);
}

QTEST_GUILESS_MAIN(TestClientRateLimit)
#include "TestClientRateLimit.moc"
