#include "store/SqliteDatabase.h"

#include "TestSupport.h"

#include <QTest>

using namespace gleaner;

namespace {

const char* const kV1[] = {"CREATE TABLE t (name TEXT NOT NULL, n INTEGER)"};

class TestDb final : public SqliteDatabase
{
public:
    static Result<std::unique_ptr<TestDb>> open(const QString& path, int version)
    {
        std::unique_ptr<TestDb> db(new TestDb);
        if (auto s = db->openFile(path, SqliteSchema{QStringLiteral("the test database"), version, kV1,
                                                     QStringLiteral("delete it")});
            !s)
            return fail(s.error());
        return db;
    }
};

qint64 rows(TestDb& db)
{
    auto q = db.exec(QStringLiteral("SELECT COUNT(*) FROM t"));
    return q && q->next() ? q->value(0).toLongLong() : -1;
}

} // namespace

class TestSqliteDatabase : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void createsAndReopens();
    void otherSchemaVersionIsRefusedWithTheRemedy();
    void failedInnerTransactionRollsBackTheOuter();
    void nullStringBindsAsEmptyText();
};

void TestSqliteDatabase::createsAndReopens()
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

void TestSqliteDatabase::otherSchemaVersionIsRefusedWithTheRemedy()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("t.db"));
    QVERIFY(TestDb::open(path, 1).ok());
    auto newer = TestDb::open(path, 2);
    QVERIFY(!newer.ok());
    QVERIFY2(newer.error().contains(u"schema version 1, not the 2") && newer.error().contains(u"delete it"),
             qPrintable(newer.error()));
}

void TestSqliteDatabase::failedInnerTransactionRollsBackTheOuter()
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

void TestSqliteDatabase::nullStringBindsAsEmptyText()
{
    const auto dir = test::scratchDir();
    auto db = TestDb::open(dir->filePath(QStringLiteral("t.db")), 1);
    QVERIFY(db.ok());
    // name is NOT NULL: Qt's "no text" must arrive as '', not as NULL.
    QVERIFY((*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (?)"), {QString()}).ok());
    QVERIFY(!(*db)->exec(QStringLiteral("INSERT INTO t (name) VALUES (?)"), {QVariant()}).ok());
}

QTEST_GUILESS_MAIN(TestSqliteDatabase)
#include "TestSqliteDatabase.moc"
