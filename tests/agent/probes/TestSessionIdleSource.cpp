// The system agent's view of a shared workstation: session reports (who may speak for which session, how long a
// report lasts) and the most active of every session, reported or known to logind only.
#include "idle/SessionIdleSource.h"
#include "idle/SessionReports.h"

#include <QTest>

using namespace gleaner::agent;

class TestSessionIdleSource : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void reportsAreCheckedAndExpire();
    void theMostActiveSessionWins();
    void logindSessionsWithoutAReport();
    void nobodyLoggedIn();
};

namespace {
SessionPeer peer(qint64 connection, qint64 uid)
{
    return SessionPeer{connection, uid, 100 + connection};
}
} // namespace

void TestSessionIdleSource::reportsAreCheckedAndExpire()
{
    // logind says session 3 is uid 1000's and session 4 uid 1001's; it knows no other.
    SessionReports reports([](const QString& session) {
        if (session == u"3")
            return SessionReports::Owner{true, 1000};
        if (session == u"4")
            return SessionReports::Owner{true, 1001};
        return SessionReports::Owner{true, -2};
    });
    QVERIFY(reports.record(peer(1, 1000), QStringLiteral("3"), 500, 10'000).ok());
    // Another user's session, a session logind does not know, a bad id or value: refused.
    const gleaner::Status foreign = reports.record(peer(2, 1000), QStringLiteral("4"), 0, 10'000);
    QVERIFY(!foreign.ok());
    QVERIFY2(foreign.error().contains(QStringLiteral("not yours")), qPrintable(foreign.error()));
    QVERIFY(!reports.record(peer(2, 1000), QStringLiteral("99"), 0, 10'000).ok());
    QVERIFY(!reports.record(peer(2, 1001), QStringLiteral("../4"), 0, 10'000).ok());
    QVERIFY(!reports.record(peer(2, 1001), QStringLiteral("4"), -1, 10'000).ok());
    QVERIFY(!reports.record(peer(2, 1001), QStringLiteral("4"), SessionReports::kMaxIdleMs + 1, 10'000).ok());
    // One connection speaks for one session.
    QVERIFY(!reports.record(peer(1, 1000), QStringLiteral("5"), 0, 10'000).ok());
    QVERIFY(reports.record(peer(2, 1001), QStringLiteral("4"), 0, 11'000).ok());
    QCOMPARE(reports.live(11'000).size(), 2);
    // A report lasts kStaleMs; a closed connection's goes at once.
    QCOMPARE(reports.live(10'000 + SessionReports::kStaleMs + 1).size(), 1);
    reports.forget(2);
    QCOMPARE(reports.live(11'000).size(), 1);
    QCOMPARE(reports.live(11'000).constFirst().session, QStringLiteral("3"));

    // Where logind cannot be asked, a report is taken on trust.
    SessionReports untrusted([](const QString&) { return SessionReports::Owner{}; });
    QVERIFY(untrusted.record(peer(1, 1000), QStringLiteral("7"), 0, 0).ok());
}

void TestSessionIdleSource::theMostActiveSessionWins()
{
    qint64 lastSeen = 0;
    const QList<SessionReports::Report> reports{{QStringLiteral("3"), 1000, 600'000, 50'000, {}},
                                                {QStringLiteral("4"), 1001, 2'000, 59'000, {}}};
    // Session 4 reported 2 s a second ago: 3 s, precise.
    const IdleReading reading = SessionIdleSource::combine(reports, std::nullopt, 60'000, lastSeen);
    QVERIFY(reading.available);
    QVERIFY(reading.precise);
    QCOMPARE(reading.idleMs, qint64(3'000));
    QCOMPARE(lastSeen, qint64(57'000));
}

void TestSessionIdleSource::logindSessionsWithoutAReport()
{
    qint64 lastSeen = 0;
    const qint64 now = 1'000'000;
    const QList<SessionReports::Report> reports{{QStringLiteral("3"), 1000, 600'000, now, {}}};
    // Session 3 reports (its logind entry is ignored); an ssh session idle for 40 s; a greeter (ignored).
    QList<LoginSession> sessions{
        {QStringLiteral("3"), 1000, QStringLiteral("wayland"), QStringLiteral("user"), false, 0},
        {QStringLiteral("5"), 1002, QStringLiteral("tty"), QStringLiteral("user"), false, (now - 40'000) * 1000},
        {QStringLiteral("c1"), 110, QStringLiteral("x11"), QStringLiteral("greeter"), false, 0}};
    IdleReading reading = SessionIdleSource::combine(reports, sessions, now, lastSeen);
    QCOMPARE(reading.idleMs, qint64(40'000));
    QVERIFY(reading.precise);
    // A graphical session without a helper and without the desktop's idle hint: someone may be there.
    sessions << LoginSession{QStringLiteral("6"), 1003, QStringLiteral("x11"), QStringLiteral("user"), false, 0};
    reading = SessionIdleSource::combine(reports, sessions, now, lastSeen);
    QCOMPARE(reading.idleMs, qint64(0));
    QVERIFY(!reading.precise);
    // With the hint set 10 minutes ago: a lower bound of 10 minutes; the ssh session is more active.
    sessions.last().idleHint = true;
    sessions.last().idleSinceMonotonicUs = (now - 600'000) * 1000;
    reading = SessionIdleSource::combine(reports, sessions, now, lastSeen);
    QCOMPARE(reading.idleMs, qint64(40'000));
}

void TestSessionIdleSource::nobodyLoggedIn()
{
    qint64 lastSeen = 20'000; // the last session was seen then
    IdleReading reading = SessionIdleSource::combine({}, QList<LoginSession>{}, 80'000, lastSeen);
    QVERIFY(reading.available && reading.precise);
    QCOMPARE(reading.idleMs, qint64(60'000));

    // Through the source, with a clock: the reports it was given count.
    auto reports = std::make_shared<SessionReports>();
    qint64 now = 1'000'000;
    SessionIdleSource source(reports, [] { return std::optional<QList<LoginSession>>(QList<LoginSession>{}); },
                             [&now] { return now; });
    QVERIFY(reports->record(peer(1, 1000), QStringLiteral("2"), 1'500, now).ok());
    now += 500;
    QCOMPARE(source.readIdle().idleMs, qint64(2'000));
    QCOMPARE(source.name(), QStringLiteral("sessions"));
}

QTEST_GUILESS_MAIN(TestSessionIdleSource)
#include "TestSessionIdleSource.moc"
