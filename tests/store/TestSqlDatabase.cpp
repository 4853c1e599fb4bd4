#include "store/SqlDatabase.h"

#include "PostgresServer.h"
#include "TestSupport.h"

#include <QFile>
#include <QTest>
#include <QUrl>

#include <limits>
#include <thread>

using namespace gleaner;

// Every case runs on each engine this build of the test names (initTestCase_data): SQLite files in
// test_sqldatabase, a throwaway PostgreSQL server in test_sqldatabase_postgres. Each case gets fresh
// databases.

namespace {

const char* const kV1[] = {"CREATE TABLE t (name TEXT NOT NULL, n INTEGER)"};
// Version 3 as a new database gets it, and the steps that take a version 1 database there.
const char* const kV3[] = {"CREATE TABLE t (name TEXT NOT NULL, n INTEGER, k INTEGER NOT NULL DEFAULT 7)",
                           "CREATE TABLE u (x TEXT)"};
const char* const kTo2[] = {"ALTER TABLE t ADD COLUMN k INTEGER NOT NULL DEFAULT 7"};
const char* const kTo3[] = {"CREATE TABLE u (x TEXT)"};
const char* const kTo3Broken[] = {"CREATE TABLE u (x TEXT)", "ALTER TABLE nowhere ADD COLUMN y TEXT"};
const SqlUpgrade kUpgrades[] = {{1, kTo2}, {2, kTo3}};
const SqlUpgrade kBrokenUpgrades[] = {{1, kTo2}, {2, kTo3Broken}};
const SqlUpgrade kGap[] = {{2, kTo3}};

// Version 10: the shapes Gleaner's schemas use, written as they write them (SQLite's dialect).
const char* const kWide[] = {
    "CREATE TABLE items (id INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, x REAL, data BLOB,"
    " flag INTEGER NOT NULL DEFAULT 0, note TEXT)",
    "CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL)",
    "CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)",
};

class TestDb final : public SqlDatabase
{
public:
    // `where` is a file's path, or a postgresql:// URL (any URL: a wrong scheme is openPostgres's to refuse).
    static Result<std::unique_ptr<TestDb>> open(const QString& where, int version,
                                                std::span<const SqlUpgrade> upgrades = {})
    {
        std::unique_ptr<TestDb> db(new TestDb);
        const std::span<const char* const> statements = version == 10 ? std::span<const char* const>(kWide)
                                                        : version == 3 ? std::span<const char* const>(kV3)
                                                                       : std::span<const char* const>(kV1);
        const SqlSchema schema{QStringLiteral("the test database"), version, statements,
                               QStringLiteral("delete it"), upgrades};
        const Status opened =
            where.contains(u"://") ? db->openPostgres(where, schema) : db->openFile(where, schema);
        if (!opened)
            return fail(opened.error());
        return db;
    }

    int reopened = 0;          // connectionReopened() calls
    Status reopenAnswer = {};  // what they answer

protected:
    Status connectionReopened() override
    {
        ++reopened;
        return reopenAnswer;
    }
};

int schemaVersion(TestDb& db)
{
    auto q = db.exec(QStringLiteral("SELECT value FROM meta WHERE key = 'schema_version'"));
    return q && q->next() ? q->value(0).toInt() : -1;
}

qint64 count(TestDb& db, const QString& table = QStringLiteral("t"))
{
    auto q = db.exec(QStringLiteral("SELECT COUNT(*) FROM %1").arg(table));
    return q && q->next() ? q->value(0).toLongLong() : -1;
}

} // namespace

class TestSqlDatabase : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase_data();
    void init();
    void cleanup();

    void createsAndReopens();
    void otherSchemaVersionIsRefusedWithTheRemedy();
    void failedInnerTransactionRollsBackTheOuter();
    void nullStringBindsAsEmptyText();
    void olderFileIsUpgradedStepByStep();
    void failedUpgradeChangesNothing();
    void errorsNameTheDatabaseAndTheStatement();
    void insertReturningIdAnswersTheNewId();
    void givenIdsAreNeverHandedOutAgain();
    void valuesRoundTripWithTheirTypes();
    void hostileTextAndExactNumbersRoundTrip();
    void onConflictUpserts();
    void failedStatementInsideATransaction();

    void postgresUrlIsChecked_data();
    void postgresUrlIsChecked();
    // PostgreSQL only
    void passwordIsNeverInAMessage();
    void serverWithAPasswordTakesItFromTheFile();
    void opensOverTheUnixSocket();
    void concurrentFirstOpensCreateTheSchemaOnce();
    void lostConnectionIsOpenedAgain();

private:
    bool postgres() const;
    // A database nobody used: a new file's path, or the URL of a new PostgreSQL database. Empty (and the test
    // failed) when it cannot be made.
    QString freshDatabase();

    std::unique_ptr<QTemporaryDir> m_dir;
    test::PostgresServer m_server;
    bool m_serverStarted = false;
    int m_databases = 0;
};

void TestSqlDatabase::initTestCase_data()
{
    QTest::addColumn<bool>("postgres");
#ifdef GLEANER_TEST_POSTGRES
    QTest::newRow("postgres") << true;
#else
    QTest::newRow("sqlite") << false;
#endif
}

bool TestSqlDatabase::postgres() const
{
    QFETCH_GLOBAL(bool, postgres);
    return postgres;
}

void TestSqlDatabase::init()
{
    m_dir = test::scratchDir();
    if (!postgres() || m_serverStarted)
        return;
    if (const QString missing = test::PostgresServer::missing(); !missing.isEmpty())
        QSKIP(qPrintable(missing));
    const QString why = m_server.start();
    QVERIFY2(why.isEmpty(), qPrintable(why));
    m_serverStarted = true;
}

void TestSqlDatabase::cleanup()
{
    m_dir.reset();
}

QString TestSqlDatabase::freshDatabase()
{
    const QString name = QStringLiteral("db%1").arg(++m_databases);
    if (!postgres())
        return m_dir->filePath(name + QStringLiteral(".db"));
    if (const QString why = m_server.createDatabase(name); !why.isEmpty()) {
        QTest::qFail(qPrintable(why), __FILE__, __LINE__);
        return {};
    }
    return m_server.url(name);
}

void TestSqlDatabase::createsAndReopens()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    {
        auto db = TestDb::open(where, 1);
        QVERIFY2(db.ok(), qPrintable(db.error()));
        QCOMPARE(schemaVersion(**db), 1);
        QVERIFY((*db)
                    ->exec(QStringLiteral("INSERT INTO t (name, n) VALUES (?, ?)"), {QStringLiteral("a"), 1})
                    .ok());
    }
    auto again = TestDb::open(where, 1); // finds meta and its version: the table is not made again
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(count(**again), 1);
}

void TestSqlDatabase::otherSchemaVersionIsRefusedWithTheRemedy()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    QVERIFY(TestDb::open(where, 1).ok());
    auto newer = TestDb::open(where, 2);
    QVERIFY(!newer.ok());
    QVERIFY2(newer.error().contains(u"schema version 1, not the 2") && newer.error().contains(u"delete it"),
             qPrintable(newer.error()));
}

void TestSqlDatabase::failedInnerTransactionRollsBackTheOuter()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 1);
    QVERIFY(db.ok());
    const Status outer = (*db)->transaction([&]() -> Status {
        (void)(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('kept?')"));
        (void)(*db)->transaction([]() -> Status { return fail(QStringLiteral("inner step failed")); });
        return {}; // the outer work itself did not notice
    });
    QVERIFY(!outer.ok());
    QCOMPARE(count(**db), 0);
    // An inner transaction that succeeds is committed with the outer one, not before.
    const Status both = (*db)->transaction([&]() -> Status {
        return (*db)->transaction([&]() -> Status {
            auto r = (*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('inner')"));
            return r ? Status() : fail(r.error());
        });
    });
    QVERIFY2(both.ok(), qPrintable(both.error()));
    QCOMPARE(count(**db), 1);
}

void TestSqlDatabase::nullStringBindsAsEmptyText()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 1);
    QVERIFY(db.ok());
    // name is NOT NULL: Qt's "no text" must arrive as '', not as NULL.
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (?)"), {QString()}).ok());
    QVERIFY(!(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (?)"), {QVariant()}).ok());
}

void TestSqlDatabase::olderFileIsUpgradedStepByStep()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    {
        auto v1 = TestDb::open(where, 1);
        QVERIFY(v1.ok());
        QVERIFY((*v1)->exec(QStringLiteral("INSERT INTO t (name, n) VALUES ('kept', 1)")).ok());
    }
    {
        auto v3 = TestDb::open(where, 3, kUpgrades);
        QVERIFY2(v3.ok(), qPrintable(v3.error()));
        QCOMPARE(schemaVersion(**v3), 3);
        auto row = (*v3)->exec(QStringLiteral("SELECT name, n, k FROM t"));
        QVERIFY(row.ok() && row->next());
        QCOMPARE(row->value(0).toString(),
                 QStringLiteral("kept")); // the data survives; new columns get their default
        QCOMPARE(row->value(2).toInt(), 7);
        QVERIFY((*v3)->exec(QStringLiteral("INSERT INTO u (x) VALUES ('new table')")).ok());
    }
    QVERIFY(TestDb::open(where, 3, kUpgrades).ok()); // opens as is from now on

    // No chain of steps from the database's version: refused with the remedy, as without upgrades.
    const QString other = freshDatabase();
    QVERIFY(!other.isEmpty());
    QVERIFY(TestDb::open(other, 1).ok());
    auto gap = TestDb::open(other, 3, kGap);
    QVERIFY(!gap.ok());
    QVERIFY2(gap.error().contains(u"no upgrade from version 1 to 2") && gap.error().contains(u"delete it"),
             qPrintable(gap.error()));
    // A database of a newer version is never "upgraded" downwards.
    auto older = TestDb::open(where, 1, kUpgrades);
    QVERIFY(!older.ok());
    QVERIFY2(older.error().contains(u"schema version 3, not the 1"), qPrintable(older.error()));
}

void TestSqlDatabase::failedUpgradeChangesNothing()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    QVERIFY(TestDb::open(where, 1).ok());
    auto broken = TestDb::open(where, 3, kBrokenUpgrades);
    QVERIFY(!broken.ok());
    QVERIFY2(broken.error().contains(u"from schema version 2 to 3") && broken.error().contains(u"nowhere"),
             qPrintable(broken.error()));
    // Every step is in one transaction: the database is still the version 1 it was, and opens as such.
    auto v1 = TestDb::open(where, 1);
    QVERIFY2(v1.ok(), qPrintable(v1.error()));
    QCOMPARE(schemaVersion(**v1), 1);
    QVERIFY(!(*v1)->exec(QStringLiteral("SELECT k FROM t")).ok());
    QVERIFY(!(*v1)->exec(QStringLiteral("SELECT x FROM u")).ok()); // the step's first table went with it
}

void TestSqlDatabase::errorsNameTheDatabaseAndTheStatement()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 1);
    QVERIFY(db.ok());
    QCOMPARE((*db)->name(), where);
    auto bad = (*db)->exec(QStringLiteral("SELECT nothing FROM nowhere WHERE n = ?"), {1});
    QVERIFY(!bad.ok());
    QVERIFY2(bad.error().startsWith(where + u':') && bad.error().contains(u"SELECT nothing FROM nowhere"),
             qPrintable(bad.error()));
    auto unprepared = (*db)->exec(QStringLiteral("DROP TABLE nowhere"));
    QVERIFY(!unprepared.ok());
    QVERIFY2(unprepared.error().startsWith(where + u':') &&
                 unprepared.error().contains(u"DROP TABLE nowhere"),
             qPrintable(unprepared.error()));
}

void TestSqlDatabase::insertReturningIdAnswersTheNewId()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 10);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    const QString insert = QStringLiteral("INSERT INTO items (at_ms) VALUES (?)");
    auto first = (*db)->insertReturningId(insert, {1000});
    QVERIFY2(first.ok(), qPrintable(first.error()));
    auto second = (*db)->insertReturningId(insert, {2000});
    QVERIFY(second.ok());
    QVERIFY(*first >= 1);
    QCOMPARE(*second, *first + 1);
    auto row = (*db)->exec(QStringLiteral("SELECT at_ms FROM items WHERE id = ?"), {*second});
    QVERIFY(row.ok() && row->next());
    QCOMPARE(row->value(0).toLongLong(), 2000);
    // Another column than id: the log's AUTOINCREMENT seq.
    auto seq = (*db)->insertReturningId(QStringLiteral("INSERT INTO log (what) VALUES (?)"),
                                        {QStringLiteral("a")}, QStringLiteral("seq"));
    QVERIFY2(seq.ok(), qPrintable(seq.error()));
    QCOMPARE(*seq, 1);
    // An insert that inserts nothing has no id to answer.
    auto none = (*db)->insertReturningId(
        QStringLiteral("INSERT INTO items (at_ms) SELECT at_ms FROM items WHERE 1 = 0"), {});
    QVERIFY(!none.ok());
    QVERIFY2(none.error().contains(u"inserted no row"), qPrintable(none.error()));
}

void TestSqlDatabase::givenIdsAreNeverHandedOutAgain()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 10);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    // A row that names its id (an import, a test, a job's snapshot keyed by the job's id) above the
    // numbering: the next numbered row comes after it, not into it.
    const qint64 big = (qint64(1) << 40) + 5;
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO items (id, at_ms) VALUES (?, 0)"), {big}).ok());
    auto next = (*db)->insertReturningId(QStringLiteral("INSERT INTO items (at_ms) VALUES (1)"), {});
    QVERIFY2(next.ok(), qPrintable(next.error()));
    QCOMPARE(*next, big + 1);
    // An id given below the numbering leaves it where it is.
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO items (id, at_ms) VALUES (7, 0)")).ok());
    auto after = (*db)->insertReturningId(QStringLiteral("INSERT INTO items (at_ms) VALUES (2)"), {});
    QVERIFY(after.ok());
    QCOMPARE(*after, big + 2);
    // AUTOINCREMENT: a deleted row's id is not reused either.
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO log (seq, what) VALUES (10, 'given')")).ok());
    QVERIFY((*db)->exec(QStringLiteral("DELETE FROM log WHERE seq = 10")).ok());
    auto seq = (*db)->insertReturningId(QStringLiteral("INSERT INTO log (what) VALUES ('numbered')"), {},
                                        QStringLiteral("seq"));
    QVERIFY2(seq.ok(), qPrintable(seq.error()));
    QCOMPARE(*seq, 11);
}

void TestSqlDatabase::hostileTextAndExactNumbersRoundTrip()
{
    // On PostgreSQL values are written into the statement as literals by the driver (one round trip instead
    // of a prepared statement's three): whatever an agent sends as text must come back as it was, and match
    // itself in a WHERE, without ever being read as SQL.
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 10);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    const QStringList hostile = {
        QStringLiteral("'; DROP TABLE log; --"),
        QStringLiteral("\\'); DELETE FROM kv; --"),
        QStringLiteral("ends with a backslash \\"),
        QStringLiteral("ends with a quote '"),
        QStringLiteral("'' OR ''1''=''1"),
        QStringLiteral("? $1 %s :name"),
        QStringLiteral("E'\\x41' U&'\\0041' $$dollar$$"),
        QString::fromUtf8("Z\u00fcrich \u6771\u4eac \U0001F680"),
        QString(100'000, u'\''),
        QString(),
    };
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO kv (k, v) VALUES ('keep', 1)")).ok());
    for (const QString& text : hostile) {
        auto seq = (*db)->insertReturningId(QStringLiteral("INSERT INTO log (what) VALUES (?)"), {text},
                                            QStringLiteral("seq"));
        QVERIFY2(seq.ok(), qPrintable(seq.error()));
        auto back =
            (*db)->exec(QStringLiteral("SELECT what FROM log WHERE seq = ? AND what = ?"), {*seq, text});
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QVERIFY2(back->next(), qPrintable(text.left(40)));
        QCOMPARE(back->value(0).toString(), text.isNull() ? QStringLiteral("") : text);
    }
    QCOMPARE(count(**db, QStringLiteral("log")), qint64(hostile.size()));
    QCOMPARE(count(**db, QStringLiteral("kv")), qint64(1));
    // A NUL inside text: SQLite keeps it, PostgreSQL refuses the value; neither runs what follows it.
    const QString withNul = QStringLiteral("a") + QChar(0) + QStringLiteral("'); DELETE FROM kv; --");
    const bool kept = (*db)->exec(QStringLiteral("INSERT INTO log (what) VALUES (?)"), {withNul}).ok();
    QCOMPARE(kept, !postgres());
    QCOMPARE(count(**db, QStringLiteral("kv")), qint64(1));

    const double numbers[] = {0.1, 1.0 / 3, 5e-324, 1e-300, 1.7976931348623157e308, -123456789.123456789,
                              -0.0};
    qint64 id = 100;
    for (double x : numbers) {
        QVERIFY((*db)
                    ->exec(QStringLiteral("INSERT INTO items (id, at_ms, x) VALUES (?, ?, ?)"),
                           {++id, std::numeric_limits<qint64>::min(), x})
                    .ok());
        auto back = (*db)->exec(QStringLiteral("SELECT x, at_ms FROM items WHERE id = ? AND x = ?"), {id, x});
        QVERIFY2(back.ok(), qPrintable(back.error()));
        QVERIFY2(back->next(), qPrintable(QString::number(x, 'g', 17)));
        QCOMPARE(back->value(0).toDouble(), x);
        QCOMPARE(back->value(1).toLongLong(), std::numeric_limits<qint64>::min());
    }
}

void TestSqlDatabase::valuesRoundTripWithTheirTypes()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 10);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    const qint64 id = (qint64(1) << 53) + 1; // not a double's: only a 64-bit integer holds it
    const qint64 atMs = 4'102'444'800'123;   // 2100-01-01 in milliseconds, past 32 bits
    const qint64 negative = -(qint64(1) << 62);
    const double x = 0.1; // a 4-byte REAL would give back 0.100000001490116
    const QByteArray data("\x00\x01\xff'\\?", 6);
    QVERIFY((*db)
                ->exec(QStringLiteral(
                           "INSERT INTO items (id, at_ms, x, data, flag, note) VALUES (?, ?, ?, ?, ?, ?)"),
                       {id, atMs, x, data, true, QVariant()})
                .ok());
    QVERIFY((*db)
                ->exec(QStringLiteral("INSERT INTO items (id, at_ms, x, flag, note) VALUES (?, ?, ?, ?, ?)"),
                       {id + 1, negative, 1.0 / 3, false, QStringLiteral("it's ? not a placeholder")})
                .ok());

    auto row = (*db)->exec(
        QStringLiteral("SELECT id, at_ms, x, data, flag, note, '?' FROM items WHERE id = ?"), {id});
    QVERIFY(row.ok() && row->next());
    QCOMPARE(row->value(0).toLongLong(), id);
    QCOMPARE(row->value(1).toLongLong(), atMs);
    QCOMPARE(row->value(2).toDouble(), x);
    QCOMPARE(row->value(3).toByteArray(), data);
    QCOMPARE(row->value(4).toInt(), 1); // a bool binds as 1
    QVERIFY(row->value(5).isNull());
    QCOMPARE(row->value(6).toString(),
             QStringLiteral("?")); // a ? inside a literal is text, not a placeholder

    auto other =
        (*db)->exec(QStringLiteral("SELECT at_ms, x, flag, note, data FROM items WHERE id = ?"), {id + 1});
    QVERIFY(other.ok() && other->next());
    QCOMPARE(other->value(0).toLongLong(), negative);
    QCOMPARE(other->value(1).toDouble(), 1.0 / 3);
    QCOMPARE(other->value(2).toInt(), 0);
    QCOMPARE(other->value(3).toString(), QStringLiteral("it's ? not a placeholder"));
    QVERIFY(other->value(4).isNull());

    // A flag compares with a bound bool, as the coordinator's queries do.
    auto flagged = (*db)->exec(QStringLiteral("SELECT COUNT(*) FROM items WHERE flag = ?"), {true});
    QVERIFY2(flagged.ok(), qPrintable(flagged.error()));
    QVERIFY(flagged->next());
    QCOMPARE(flagged->value(0).toLongLong(), 1);
    // Aggregates: a count is an integer on both; a sum of BIGINTs a NUMERIC (a double through Qt) on
    // PostgreSQL.
    auto sums = (*db)->exec(QStringLiteral("SELECT COUNT(*), COALESCE(SUM(flag), 0), MAX(at_ms) FROM items"));
    QVERIFY(sums.ok() && sums->next());
    QCOMPARE(sums->value(0).toLongLong(), 2);
    QCOMPARE(sums->value(1).toLongLong(), 1);
    QCOMPARE(sums->value(2).toLongLong(), atMs);
}

void TestSqlDatabase::onConflictUpserts()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 10);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    const QString upsert =
        QStringLiteral("INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v");
    QVERIFY((*db)->exec(upsert, {QStringLiteral("a"), 1}).ok());
    auto replaced = (*db)->exec(upsert, {QStringLiteral("a"), 2});
    QVERIFY2(replaced.ok(), qPrintable(replaced.error()));
    QCOMPARE(count(**db, QStringLiteral("kv")), 1);
    auto value = (*db)->exec(QStringLiteral("SELECT v FROM kv WHERE k = 'a'"));
    QVERIFY(value.ok() && value->next());
    QCOMPARE(value->value(0).toLongLong(), 2);

    const QString keep = QStringLiteral("INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING");
    auto ignored = (*db)->exec(keep, {QStringLiteral("a"), 3});
    QVERIFY2(ignored.ok(), qPrintable(ignored.error()));
    QCOMPARE(ignored->numRowsAffected(), 0);
    auto added = (*db)->exec(keep, {QStringLiteral("b"), 4});
    QVERIFY(added.ok());
    QCOMPARE(added->numRowsAffected(), 1);
    value = (*db)->exec(QStringLiteral("SELECT v FROM kv WHERE k = 'a'"));
    QVERIFY(value.ok() && value->next());
    QCOMPARE(value->value(0).toLongLong(), 2);
}

void TestSqlDatabase::failedStatementInsideATransaction()
{
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 1);
    QVERIFY(db.ok());
    const Status status = (*db)->transaction([&]() -> Status {
        (void)(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('before')"));
        (void)(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (NULL)")); // NOT NULL: fails, ignored
        (void)(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('after')"));
        return {};
    });
    if (postgres()) {
        // PostgreSQL refuses the rest of a transaction after a failed statement: none of it is stored, and
        // the caller hears which statement spoilt it.
        QVERIFY(!status.ok());
        QVERIFY2(status.error().contains(u"INSERT INTO t (name) VALUES (NULL)") &&
                     status.error().contains(u"stored none of it"),
                 qPrintable(status.error()));
        QCOMPARE(count(**db), 0);
    } else {
        QVERIFY2(status.ok(), qPrintable(status.error())); // SQLite: the work decided to go on
        QCOMPARE(count(**db), 2);
    }
    // Either way the next transaction starts clean.
    const Status next = (*db)->transaction([&]() -> Status {
        auto r = (*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('next')"));
        return r ? Status() : fail(r.error());
    });
    QVERIFY2(next.ok(), qPrintable(next.error()));
}

void TestSqlDatabase::postgresUrlIsChecked_data()
{
    QTest::addColumn<QString>("url");
    QTest::addColumn<QString>("expected");
    QTest::newRow("scheme") << "mysql://u@h/db"
                            << "the PostgreSQL URL mysql://u@h/db has the scheme \"mysql\", not postgresql";
    QTest::newRow("no user") << "postgresql://h/db"
                             << "names no user";
    QTest::newRow("no database") << "postgresql://u@h"
                                 << "does not end in the database's name (/dbname)";
    QTest::newRow("database with a slash") << "postgresql://u@h/a/b"
                                           << "does not end in the database's name";
    QTest::newRow("port out of range") << "postgresql://u:secret@h:99999/db"
                                       << "Invalid port";
    QTest::newRow("port 0") << "postgresql://u@h:0/db"
                            << "has the port 0";
    QTest::newRow("no host") << "postgresql://u@/db"
                             << "names no host";
    QTest::newRow("relative socket") << "postgresql://u@/db?host=run"
                                     << "has host=run, which is not a socket";
    QTest::newRow("host and socket") << "postgresql://u@h/db?host=/run"
                                     << "names both a host and a socket";
    QTest::newRow("other parameter") << "postgresql://u@h/db?sslcert=/c.pem"
                                     << "has the parameter \"sslcert\", which Gleaner does not take";
    QTest::newRow("password that needs encoding") << "postgresql://u:se cret@h/db"
                                                  << "password may need percent-encoding";
    QTest::newRow("relative passfile") << "postgresql://u@h/db?passfile=pgpass"
                                       << "has passfile=pgpass, which is not an absolute path";
    QTest::newRow("unknown sslmode") << "postgresql://u@h/db?sslmode=verify"
                                     << "has sslmode=verify; expected one of disable";
    QTest::newRow("relative CA") << "postgresql://u@h/db?sslmode=verify-full&sslrootcert=ca.pem"
                                 << "has sslrootcert=ca.pem, which is not an absolute path";
    QTest::newRow("password and passfile") << "postgresql://u:secret@h/db?passfile=/run/pgpass"
                                           << "gives both a password and a passfile";
}

void TestSqlDatabase::postgresUrlIsChecked()
{
    // Checked before any connection: needs no server.
    QFETCH(QString, url);
    QFETCH(QString, expected);
    auto db = TestDb::open(url, 1);
    QVERIFY(!db.ok());
    QVERIFY2(db.error().contains(expected), qPrintable(db.error()));
    QVERIFY2(!db.error().contains(u"secret"), qPrintable(db.error()));
    QVERIFY2(db.error().contains(u"postgresql://user[:password]@host[:port]/dbname"), qPrintable(db.error()));
}

void TestSqlDatabase::passwordIsNeverInAMessage()
{
    if (!postgres())
        QSKIP("PostgreSQL only");
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    const QString password = QStringLiteral("Pa55-w0rd/for:tests");
    const QString name = where.section(u'/', -1);
    // The server trusts the test user, so the password is taken and ignored: the database opens.
    auto db = TestDb::open(m_server.url(name, password), 1);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    QCOMPARE((*db)->name(), where); // the URL without the password
    auto bad = (*db)->exec(QStringLiteral("SELECT * FROM nowhere"));
    QVERIFY(!bad.ok());
    QVERIFY2(bad.error().startsWith(where) && !bad.error().contains(u"Pa55"), qPrintable(bad.error()));
    const Status failed = (*db)->transaction([]() -> Status { return {}; });
    QVERIFY(failed.ok());

    // A database that does not exist: the connection fails, and says where to without the password.
    auto missing = TestDb::open(m_server.url(QStringLiteral("no_such_db"), password), 1);
    QVERIFY(!missing.ok());
    QVERIFY2(missing.error().contains(m_server.url(QStringLiteral("no_such_db"))) &&
                 !missing.error().contains(u"Pa55") && missing.error().contains(u"no_such_db"),
             qPrintable(missing.error()));
    // Nobody listens: the same.
    auto nobody = TestDb::open(QStringLiteral("postgresql://gleaner:Pa55@127.0.0.1:1/db"), 1);
    QVERIFY(!nobody.ok());
    QVERIFY2(nobody.error().contains(u"postgresql://gleaner@127.0.0.1:1/db") &&
                 !nobody.error().contains(u"Pa55"),
             qPrintable(nobody.error()));
}

void TestSqlDatabase::serverWithAPasswordTakesItFromTheFile()
{
    // A server of its own that, as local-postgres.sh sets one up, lets nobody in without the password.
    if (!postgres())
        QSKIP("PostgreSQL only");
    test::PostgresServer secured;
    const QString started = secured.start(/*password=*/true);
    QVERIFY2(started.isEmpty(), qPrintable(started));
    QVERIFY2(secured.createDatabase(QStringLiteral("locked")).isEmpty(), "createdb with the password file");

    // Without the password, over TCP and over the socket: refused, and told where the password goes.
    const QString bare = secured.urlWithoutPassword(QStringLiteral("locked"));
    auto refused = TestDb::open(bare, 1);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(u"no password supplied") && refused.error().contains(u"?passfile="),
             qPrintable(refused.error()));
    const QString socket = secured.socketUrl(QStringLiteral("locked"));
    auto bySocket = TestDb::open(socket.left(socket.indexOf(QStringLiteral("&passfile="))), 1);
    QVERIFY2(!bySocket.ok() && bySocket.error().contains(u"no password supplied"), qPrintable(bySocket.error()));

    // With the file the URL names: over TCP and over the socket.
    auto opened = TestDb::open(secured.url(QStringLiteral("locked")), 1);
    QVERIFY2(opened.ok(), qPrintable(opened.error()));
    QVERIFY((*opened)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('with the password')")).ok());
    auto overSocket = TestDb::open(socket, 1);
    QVERIFY2(overSocket.ok(), qPrintable(overSocket.error()));
    QCOMPARE(count(**overSocket), 1);

    // A file others may read is refused before libpq would skip it with no more than a warning.
    QVERIFY(QFile::setPermissions(secured.passfile(), QFileDevice::ReadOwner | QFileDevice::WriteOwner |
                                                          QFileDevice::ReadGroup));
    auto exposed = TestDb::open(secured.url(QStringLiteral("locked")), 1);
    QVERIFY(!exposed.ok());
    QVERIFY2(exposed.error().contains(QStringLiteral("chmod 600 %1").arg(secured.passfile())),
             qPrintable(exposed.error()));

    // A wrong password: refused, naming the file, never the password.
    const QString wrong = m_dir->filePath(QStringLiteral("wrong.pgpass"));
    QVERIFY(test::writeFile(wrong, "*:*:*:gleaner:Wr0ngPassw0rd\n"));
    QVERIFY(QFile::setPermissions(wrong, QFileDevice::ReadOwner | QFileDevice::WriteOwner));
    auto wrongly =
        TestDb::open(bare + QStringLiteral("?passfile=") + QString::fromLatin1(QUrl::toPercentEncoding(wrong, "/")), 1);
    QVERIFY(!wrongly.ok());
    QVERIFY2(wrongly.error().contains(u"password authentication failed") && wrongly.error().contains(wrong) &&
                 !wrongly.error().contains(u"Wr0ng"),
             qPrintable(wrongly.error()));
}

void TestSqlDatabase::opensOverTheUnixSocket()
{
    if (!postgres())
        QSKIP("PostgreSQL only");
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    const QString socket = m_server.socketUrl(where.section(u'/', -1));
    auto db = TestDb::open(socket, 1);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('by socket')")).ok());
    auto same = TestDb::open(where, 1); // the same database over TCP
    QVERIFY2(same.ok(), qPrintable(same.error()));
    QCOMPARE(count(**same), 1);
}

void TestSqlDatabase::concurrentFirstOpensCreateTheSchemaOnce()
{
    if (!postgres())
        QSKIP("PostgreSQL only");
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    // Several coordinators start at once on one new database: one creates the schema, the others find it.
    constexpr int kOpeners = 4;
    QStringList errors(kOpeners);
    std::vector<std::thread> openers;
    for (int i = 0; i < kOpeners; ++i)
        openers.emplace_back([&, i] {
            auto db = TestDb::open(where, 10);
            if (!db)
                errors[i] = db.error();
        });
    for (std::thread& opener : openers)
        opener.join();
    for (const QString& error : std::as_const(errors))
        QVERIFY2(error.isEmpty(), qPrintable(error));
    auto db = TestDb::open(where, 10);
    QVERIFY(db.ok());
    QCOMPARE(count(**db, QStringLiteral("meta")), 1);
}

void TestSqlDatabase::lostConnectionIsOpenedAgain()
{
    if (!postgres())
        QSKIP("PostgreSQL only: an SQLite file has no connection to lose");
    const QString where = freshDatabase();
    QVERIFY(!where.isEmpty());
    auto db = TestDb::open(where, 1);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('before')")).ok());

    // The server restarts (an upgrade, a failover): the connection it had is gone.
    const QString restarted = m_server.restart();
    QVERIFY2(restarted.isEmpty(), qPrintable(restarted));
    // The next transaction opens it again before anything of it runs, and stores its work.
    QVERIFY2((*db)->transaction([&]() -> Status {
                      auto r = (*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('in a transaction')"));
                      return r ? Status() : fail(r.error());
                  }).ok(),
             "the first transaction after the restart failed");
    QCOMPARE(count(**db), 2);

    // Outside a transaction, a read that finds the connection gone runs again on the new one.
    QVERIFY(m_server.restart().isEmpty());
    QCOMPARE(count(**db), 2);
    // A write that finds it gone fails: it may or may not have been carried out, so it is not run again. The next
    // statement works.
    QVERIFY(m_server.restart().isEmpty());
    QVERIFY(!(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('lost')")).ok());
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('after')")).ok());
    QCOMPARE(count(**db), 3);
    QCOMPARE((*db)->reopened, 3); // the subclass took back what each lost session held

    // When it cannot, the new connection is not used: the work fails, naming nothing stored, and the next try
    // reconnects again.
    (*db)->reopenAnswer = fail(QStringLiteral("the lock is held elsewhere"));
    QVERIFY(m_server.restart().isEmpty());
    QVERIFY(!(*db)->transaction([&]() -> Status {
                       auto r = (*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('unclaimed')"));
                       return r ? Status() : fail(r.error());
                   }).ok());
    QCOMPARE((*db)->reopened, 4);
    (*db)->reopenAnswer = {};
    QCOMPARE(count(**db), 3);
    QCOMPARE((*db)->reopened, 5);
}

QTEST_GUILESS_MAIN(TestSqlDatabase)
#include "TestSqlDatabase.moc"
