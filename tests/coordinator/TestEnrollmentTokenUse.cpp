// Spending enrollment tokens: each refusal names its reason, and a token's uses cannot be overspent by
// enrollments that arrive at once on several connections (as several coordinators sharing one database, or
// one coordinator's concurrent requests, would spend them).
//
// Run on SQLite (connections to one WAL file) and, as test_enrollmenttokenuse_postgres, on a PostgreSQL server
// the test starts on loopback.

#include "PostgresServer.h"
#include "TestSupport.h"
#include "enrollment/EnrollmentTokenUse.h"
#include "enrollment/Tokens.h"
#include "store/Database.h"

#include <QSqlQuery>
#include <QTest>

#include <atomic>
#include <latch>
#include <mutex>
#include <thread>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

using Outcome = EnrollmentTokenUse::Outcome;
constexpr qint64 kNow = 1'700'000'000'000;

} // namespace

class TestEnrollmentTokenUse : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void refusalsSayWhy_data();
    void refusalsSayWhy();
    void usesAreCountedDown();
    void oneUseIsSpentOnceUnderRacingConnections();

private:
    // A new, empty database; empty (and the test failed) when it cannot be made.
    QString freshDatabase();
    // Inserts a token; its hash.
    static QString addToken(Database& db, const QVariant& usesLeft, const QVariant& expiresMs, bool revoked);

    std::unique_ptr<QTemporaryDir> m_dir;
    test::PostgresServer m_server;
    int m_databases = 0;
};

void TestEnrollmentTokenUse::initTestCase()
{
    m_dir = test::scratchDir();
#ifdef GLEANER_TEST_POSTGRES
    if (const QString missing = test::PostgresServer::missing(); !missing.isEmpty())
        QSKIP(qPrintable(missing));
    const QString why = m_server.start();
    QVERIFY2(why.isEmpty(), qPrintable(why));
#endif
}

QString TestEnrollmentTokenUse::freshDatabase()
{
    const QString name = QStringLiteral("tokens%1").arg(++m_databases);
#ifdef GLEANER_TEST_POSTGRES
    if (const QString why = m_server.createDatabase(name); !why.isEmpty()) {
        QTest::qFail(qPrintable(why), __FILE__, __LINE__);
        return {};
    }
    return m_server.url(name);
#else
    return m_dir->filePath(name + QStringLiteral(".db"));
#endif
}

QString TestEnrollmentTokenUse::addToken(Database& db, const QVariant& usesLeft, const QVariant& expiresMs,
                                         bool revoked)
{
    const QString hash = Tokens::hash(Tokens::generate("gle_"));
    auto inserted = db.exec(QStringLiteral("INSERT INTO enrollment_tokens (hash, created_ms, expires_ms, uses_left, "
                                           "revoked) VALUES (?, ?, ?, ?, ?)"),
                            {hash, kNow - 1000, expiresMs, usesLeft, revoked ? 1 : 0});
    if (!inserted)
        QTest::qFail(qPrintable(inserted.error()), __FILE__, __LINE__);
    return hash;
}

void TestEnrollmentTokenUse::refusalsSayWhy_data()
{
    QTest::addColumn<QVariant>("usesLeft");
    QTest::addColumn<QVariant>("expiresMs");
    QTest::addColumn<bool>("revoked");
    QTest::addColumn<bool>("known");
    QTest::addColumn<int>("outcome");
    QTest::addColumn<QString>("words");
    const QVariant none; // NULL: any number of uses, or no expiry
    QTest::newRow("unlimited, no expiry") << none << none << false << true << int(Outcome::Enrolled) << "";
    QTest::newRow("one use, expires later") << QVariant(1) << QVariant(kNow + 1) << false << true
                                            << int(Outcome::Enrolled) << "";
    QTest::newRow("unknown") << none << none << false << false << int(Outcome::Unknown) << "not known";
    QTest::newRow("revoked") << QVariant(3) << none << true << true << int(Outcome::Revoked) << "revoked";
    QTest::newRow("expired at this very ms") << QVariant(3) << QVariant(kNow) << false << true
                                             << int(Outcome::Expired) << "expired";
    QTest::newRow("no use left") << QVariant(0) << none << false << true << int(Outcome::UsedUp) << "used up";
    // Several reasons at once: revoked is said first, as it is the admin's decision.
    QTest::newRow("revoked and expired") << QVariant(0) << QVariant(kNow - 1) << true << true
                                         << int(Outcome::Revoked) << "revoked";
}

void TestEnrollmentTokenUse::refusalsSayWhy()
{
    QFETCH(QVariant, usesLeft);
    QFETCH(QVariant, expiresMs);
    QFETCH(bool, revoked);
    QFETCH(bool, known);
    QFETCH(int, outcome);
    QFETCH(QString, words);
    const QString location = freshDatabase();
    QVERIFY(!location.isEmpty());
    auto db = Database::open(location);
    QVERIFY2(db, qPrintable(db.error()));
    QString hash = addToken(**db, usesLeft, expiresMs, revoked);
    if (!known)
        hash = Tokens::hash("gle_never-issued");
    auto spent = EnrollmentTokenUse::spend(**db, hash, kNow);
    QVERIFY2(spent, qPrintable(spent.error()));
    QCOMPARE(int(*spent), outcome);
    QVERIFY(EnrollmentTokenUse::refusal(*spent).contains(words));
    QCOMPARE(EnrollmentTokenUse::refusal(*spent).isEmpty(), outcome == int(Outcome::Enrolled));
    // A refused token is left as it was: nothing counted.
    auto row = (*db)->exec(QStringLiteral("SELECT used FROM enrollment_tokens WHERE hash = ?"), {hash});
    QVERIFY(row);
    if (known) {
        QVERIFY(row->next());
        QCOMPARE(row->value(0).toInt(), outcome == int(Outcome::Enrolled) ? 1 : 0);
    }
}

void TestEnrollmentTokenUse::usesAreCountedDown()
{
    const QString location = freshDatabase();
    QVERIFY(!location.isEmpty());
    auto db = Database::open(location);
    QVERIFY2(db, qPrintable(db.error()));
    const QString hash = addToken(**db, 2, QVariant(), false);
    for (Outcome expected : {Outcome::Enrolled, Outcome::Enrolled, Outcome::UsedUp, Outcome::UsedUp}) {
        auto spent = EnrollmentTokenUse::spend(**db, hash, kNow);
        QVERIFY2(spent, qPrintable(spent.error()));
        QCOMPARE(*spent, expected);
    }
    auto row = (*db)->exec(QStringLiteral("SELECT used, uses_left FROM enrollment_tokens WHERE hash = ?"), {hash});
    QVERIFY(row && row->next());
    QCOMPARE(row->value(0).toInt(), 2);
    QCOMPARE(row->value(1).toInt(), 0);
}

void TestEnrollmentTokenUse::oneUseIsSpentOnceUnderRacingConnections()
{
    // Each round, kRacers connections (threads, as separate coordinators are separate processes) spend the
    // same one-use token at the same moment: exactly one may enroll. A read of uses_left followed by an
    // update lets several through within a few rounds on PostgreSQL.
    constexpr int kRacers = 6;
    constexpr int kRounds = 20;
    const QString location = freshDatabase();
    QVERIFY(!location.isEmpty());
    auto setup = Database::open(location);
    QVERIFY2(setup, qPrintable(setup.error()));
    std::vector<QString> hashes;
    for (int round = 0; round < kRounds; ++round)
        hashes.push_back(addToken(**setup, 1, QVariant(kNow + 60'000), false));

    std::vector<std::atomic<int>> enrolled(kRounds);
    std::vector<std::atomic<int>> usedUp(kRounds);
    std::atomic<int> errors{0};
    QString firstError;
    std::mutex errorLock;
    std::vector<std::thread> racers;
    std::vector<std::unique_ptr<std::latch>> gates;
    for (int round = 0; round < kRounds; ++round)
        gates.push_back(std::make_unique<std::latch>(kRacers));
    for (int racer = 0; racer < kRacers; ++racer) {
        // A QSqlDatabase connection belongs to the thread that uses it: each racer opens its own.
        racers.emplace_back([&] {
            auto db = Database::open(location);
            for (int round = 0; round < kRounds; ++round) {
                gates[size_t(round)]->arrive_and_wait();
                if (!db) {
                    ++errors;
                    const std::lock_guard<std::mutex> hold(errorLock);
                    firstError = db.error();
                    continue;
                }
                auto spent = EnrollmentTokenUse::spend(**db, hashes[size_t(round)], kNow);
                if (!spent) {
                    ++errors;
                    const std::lock_guard<std::mutex> hold(errorLock);
                    firstError = spent.error();
                } else if (*spent == Outcome::Enrolled) {
                    ++enrolled[size_t(round)];
                } else if (*spent == Outcome::UsedUp) {
                    ++usedUp[size_t(round)];
                }
            }
        });
    }
    for (std::thread& racer : racers)
        racer.join();
    QVERIFY2(errors == 0, qPrintable(firstError));
    for (int round = 0; round < kRounds; ++round) {
        QCOMPARE(enrolled[size_t(round)].load(), 1);
        QCOMPARE(usedUp[size_t(round)].load(), kRacers - 1);
    }
    auto used = (*setup)->exec(QStringLiteral("SELECT SUM(used), SUM(uses_left) FROM enrollment_tokens"));
    QVERIFY(used && used->next());
    QCOMPARE(used->value(0).toInt(), kRounds);
    QCOMPARE(used->value(1).toInt(), 0);
}

QTEST_GUILESS_MAIN(TestEnrollmentTokenUse)
#include "TestEnrollmentTokenUse.moc"
