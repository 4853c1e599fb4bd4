#include "store/SqlDatabase.h"

#include "TestSupport.h"

#include <QTest>

using namespace gleaner;

namespace {

const char* const kV1[] = {"CREATE TABLE t (name TEXT NOT NULL, n INTEGER)"};
// Version 3 as a new file gets it, and the steps that take a version 1 file there.
const char* const kV3[] = {"CREATE TABLE t (name TEXT NOT NULL, n INTEGER, k INTEGER NOT NULL DEFAULT 7)",
                           "CREATE TABLE u (x TEXT)"};
const char* const kTo2[] = {"ALTER TABLE t ADD COLUMN k INTEGER NOT NULL DEFAULT 7"};
const char* const kTo3[] = {"CREATE TABLE u (x TEXT)"};
const char* const kTo3Broken[] = {"CREATE TABLE u (x TEXT)", "ALTER TABLE nowhere ADD COLUMN y TEXT"};
const SqlUpgrade kUpgrades[] = {{1, kTo2}, {2, kTo3}};
const SqlUpgrade kBrokenUpgrades[] = {{1, kTo2}, {2, kTo3Broken}};
const SqlUpgrade kGap[] = {{2, kTo3}};

class TestDb final : public SqlDatabase
{
public:
    static Result<std::unique_ptr<TestDb>> open(const QString& path, int version,
                                                std::span<const SqlUpgrade> upgrades = {})
    {
        std::unique_ptr<TestDb> db(new TestDb);
        if (auto s = db->openFile(path, SqlSchema{QStringLiteral("the test database"), version,
                                                  version == 3 ? std::span<const char* const>(kV3)
                                                               : std::span<const char* const>(kV1),
                                                  QStringLiteral("delete it"), upgrades});
            !s)
            return fail(s.error());
        return db;
    }
};

int schemaVersion(TestDb& db)
{
    auto q = db.exec(QStringLiteral("SELECT value FROM meta WHERE key = 'schema_version'"));
    return q && q->next() ? q->value(0).toInt() : -1;
}

qint64 rows(TestDb& db)
{
    auto q = db.exec(QStringLiteral("SELECT COUNT(*) FROM t"));
    return q && q->next() ? q->value(0).toLongLong() : -1;
}

} // namespace

class TestSqlDatabase : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void createsAndReopens();
    void otherSchemaVersionIsRefusedWithTheRemedy();
    void failedInnerTransactionRollsBackTheOuter();
    void nullStringBindsAsEmptyText();
    void olderFileIsUpgradedStepByStep();
    void failedUpgradeChangesNothing();
};

void TestSqlDatabase::createsAndReopens()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("t.db"));
    {
        auto db = TestDb::open(path, 1);
        QVERIFY2(db.ok(), qPrintable(db.error()));
        QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name, n) VALUES (?, ?)"), {QStringLiteral("a"), 1}).ok());
        QCOMPARE((*db)->lastInsertId(), 1);
    }
    auto again = TestDb::open(path, 1);
    QVERIFY(again.ok());
    QCOMPARE(rows(**again), 1);
}

void TestSqlDatabase::otherSchemaVersionIsRefusedWithTheRemedy()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("t.db"));
    QVERIFY(TestDb::open(path, 1).ok());
    auto newer = TestDb::open(path, 2);
    QVERIFY(!newer.ok());
    QVERIFY2(newer.error().contains(u"schema version 1, not the 2") && newer.error().contains(u"delete it"),
             qPrintable(newer.error()));
}

void TestSqlDatabase::failedInnerTransactionRollsBackTheOuter()
{
    const auto dir = test::scratchDir();
    auto db = TestDb::open(dir->filePath(QStringLiteral("t.db")), 1);
    QVERIFY(db.ok());
    const Status outer = (*db)->transaction([&]() -> Status {
        (void)(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES ('kept?')"));
        (void)(*db)->transaction([]() -> Status { return fail(QStringLiteral("inner step failed")); });
        return {}; // the outer work itself did not notice
    });
    QVERIFY(!outer.ok());
    QCOMPARE(rows(**db), 0);
}

void TestSqlDatabase::nullStringBindsAsEmptyText()
{
    const auto dir = test::scratchDir();
    auto db = TestDb::open(dir->filePath(QStringLiteral("t.db")), 1);
    QVERIFY(db.ok());
    // name is NOT NULL: Qt's "no text" must arrive as '', not as NULL.
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (?)"), {QString()}).ok());
    QVERIFY(!(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (?)"), {QVariant()}).ok());
}

void TestSqlDatabase::olderFileIsUpgradedStepByStep()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("t.db"));
    {
        auto v1 = TestDb::open(path, 1);
        QVERIFY(v1.ok());
        QVERIFY((*v1)->exec(QStringLiteral("INSERT INTO t (name, n) VALUES ('kept', 1)")).ok());
    }
    {
        auto v3 = TestDb::open(path, 3, kUpgrades);
        QVERIFY2(v3.ok(), qPrintable(v3.error()));
        QCOMPARE(schemaVersion(**v3), 3);
        auto row = (*v3)->exec(QStringLiteral("SELECT name, n, k FROM t"));
        QVERIFY(row.ok() && row->next());
        QCOMPARE(row->value(0).toString(), QStringLiteral("kept")); // the data survives; new columns get their default
        QCOMPARE(row->value(2).toInt(), 7);
        QVERIFY((*v3)->exec(QStringLiteral("INSERT INTO u (x) VALUES ('new table')")).ok());
    }
    QVERIFY(TestDb::open(path, 3, kUpgrades).ok()); // opens as is from now on

    // No chain of steps from the file's version: refused with the remedy, as without upgrades.
    const QString other = dir->filePath(QStringLiteral("other.db"));
    QVERIFY(TestDb::open(other, 1).ok());
    auto gap = TestDb::open(other, 3, kGap);
    QVERIFY(!gap.ok());
    QVERIFY2(gap.error().contains(u"no upgrade from version 1 to 2") && gap.error().contains(u"delete it"),
             qPrintable(gap.error()));
    // A file of a newer version is never "upgraded" downwards.
    auto older = TestDb::open(path, 1, kUpgrades);
    QVERIFY(!older.ok());
    QVERIFY2(older.error().contains(u"schema version 3, not the 1"), qPrintable(older.error()));
}

void TestSqlDatabase::failedUpgradeChangesNothing()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("t.db"));
    QVERIFY(TestDb::open(path, 1).ok());
    auto broken = TestDb::open(path, 3, kBrokenUpgrades);
    QVERIFY(!broken.ok());
    QVERIFY2(broken.error().contains(u"from schema version 2 to 3") && broken.error().contains(u"nowhere"),
             qPrintable(broken.error()));
    // Every step is in one transaction: the file is still the version 1 it was, and opens as such.
    auto v1 = TestDb::open(path, 1);
    QVERIFY2(v1.ok(), qPrintable(v1.error()));
    QCOMPARE(schemaVersion(**v1), 1);
    QVERIFY(!(*v1)->exec(QStringLiteral("SELECT k FROM t")).ok());
}

QTEST_GUILESS_MAIN(TestSqlDatabase)
#include "TestSqlDatabase.moc"
