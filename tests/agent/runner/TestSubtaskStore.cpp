#include "runner/SubtaskStore.h"

#include "TestSupport.h"

#include <QSqlDatabase>
#include <QSqlQuery>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

Q_DECLARE_METATYPE(gleaner::agent::SubtaskState)

namespace {

// A lease id (32 hex digits) made from a short name, so that the tests read "a", "old", "running".
LeaseId id(const char* name)
{
    return *LeaseId::parse(QString::fromLatin1(QByteArray(name).toHex()).leftJustified(LeaseId::kLength, u'0'));
}

Subtask leased(const LeaseId& id)
{
    Subtask s{id};
    s.manifest = QByteArrayLiteral("{\"lease_id\":\"") + id.toString().toLatin1() + "\"}";
    s.signature = "c2lnbmF0dXJl";
    s.deadlineMs = 1000;
    return s;
}

} // namespace

class TestSubtaskStore : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void survivesAReopenWithExactManifestBytes();
    void transitions_data();
    void transitions();
    void unfinishedIsWhatARestartResumes();
    void workerStartsAreCounted();
    void repeatedLeaseIsRefused();
    void pruneKeepsRecentHistory();
    void storedIdThatIsNotALeaseIdIsRefused();
};

void TestSubtaskStore::survivesAReopenWithExactManifestBytes()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("subtasks.db"));
    Subtask s = leased(id("a"));
    s.manifest = QByteArray("{\"x\": \"caf\xc3\xa9\",\r\n \"y\":1.50}"); // signed bytes survive exactly
    {
        auto store = SubtaskStore::open(path);
        QVERIFY2(store.ok(), qPrintable(store.error()));
        QVERIFY((*store)->add(s).ok());
        QVERIFY((*store)->setState(id("a"), SubtaskState::Downloading).ok());
    }
    auto store = SubtaskStore::open(path);
    QVERIFY(store.ok());
    auto found = (*store)->find(id("a"));
    QVERIFY(found.ok() && found->has_value());
    QCOMPARE((*found)->manifest, s.manifest);
    QCOMPARE((*found)->signature, s.signature);
    QCOMPARE((*found)->state, SubtaskState::Downloading);
}

void TestSubtaskStore::transitions_data()
{
    QTest::addColumn<QList<SubtaskState>>("path");
    QTest::addColumn<bool>("lastAllowed");
    using S = SubtaskState;
    QTest::newRow("the whole life") << QList<S>{S::Downloading, S::Verified, S::Training, S::Uploading, S::Done} << true;
    QTest::newRow("worker restarted from its checkpoint") << QList<S>{S::Downloading, S::Verified, S::Training, S::Verified} << true;
    QTest::newRow("download failed") << QList<S>{S::Downloading, S::Failed} << true;
    QTest::newRow("dropped after a restart") << QList<S>{S::Downloading, S::Verified, S::Training, S::Dropped} << true;
    QTest::newRow("nothing after done") << QList<S>{S::Downloading, S::Verified, S::Training, S::Uploading, S::Done, S::Uploading} << false;
    QTest::newRow("nothing after failed") << QList<S>{S::Failed, S::Downloading} << false;
    QTest::newRow("no way back to downloading") << QList<S>{S::Downloading, S::Verified, S::Training, S::Downloading} << false;
    QTest::newRow("uploading back to training") << QList<S>{S::Downloading, S::Verified, S::Training, S::Uploading, S::Training} << false;
}

void TestSubtaskStore::transitions()
{
    QFETCH(QList<SubtaskState>, path);
    QFETCH(bool, lastAllowed);
    const auto dir = test::scratchDir();
    auto store = SubtaskStore::open(dir->filePath(QStringLiteral("s.db")));
    QVERIFY(store.ok());
    QVERIFY((*store)->add(leased(id("l"))).ok());
    for (qsizetype i = 0; i + 1 < path.size(); ++i)
        QVERIFY((*store)->setState(id("l"), path[i]).ok());
    const Status last = (*store)->setState(id("l"), path.last(), QStringLiteral("why"));
    QCOMPARE(last.ok(), lastAllowed);
    if (!lastAllowed)
        QVERIFY2(last.error().contains(u"cannot go from"), qPrintable(last.error()));
}

void TestSubtaskStore::unfinishedIsWhatARestartResumes()
{
    const auto dir = test::scratchDir();
    auto store = SubtaskStore::open(dir->filePath(QStringLiteral("s.db")));
    QVERIFY(store.ok());
    for (const char* name : {"a", "b", "c"})
        QVERIFY((*store)->add(leased(id(name))).ok());
    QVERIFY((*store)->setState(id("b"), SubtaskState::Failed, QStringLiteral("hash mismatch")).ok());
    auto open = (*store)->unfinished();
    QVERIFY(open.ok());
    QCOMPARE(open->size(), 2);
    QCOMPARE(open->at(0).leaseId.toString(), id("a").toString());
    QCOMPARE(open->at(1).leaseId.toString(), id("c").toString());
    QCOMPARE((*(*store)->find(id("b")))->error, QStringLiteral("hash mismatch"));
}

void TestSubtaskStore::workerStartsAreCounted()
{
    const auto dir = test::scratchDir();
    auto store = SubtaskStore::open(dir->filePath(QStringLiteral("s.db")));
    QVERIFY((*store)->add(leased(id("a"))).ok());
    QCOMPARE(*(*store)->countWorkerStart(id("a")), 1);
    QCOMPARE(*(*store)->countWorkerStart(id("a")), 2);
    QVERIFY(!(*store)->countWorkerStart(id("nope")).ok());
    QVERIFY((*store)->setDeadline(id("a"), 5000).ok());
    QVERIFY((*store)->setTaskDir(id("a"), QStringLiteral("/tmp/x")).ok());
    QCOMPARE((*(*store)->find(id("a")))->deadlineMs, 5000);
    QVERIFY(!(*store)->setDeadline(id("nope"), 1).ok());
}

void TestSubtaskStore::repeatedLeaseIsRefused()
{
    const auto dir = test::scratchDir();
    auto store = SubtaskStore::open(dir->filePath(QStringLiteral("s.db")));
    QVERIFY((*store)->add(leased(id("a"))).ok());
    const Status again = (*store)->add(leased(id("a")));
    QVERIFY(!again.ok());
    QVERIFY(again.error().contains(u"already recorded"));
}

void TestSubtaskStore::pruneKeepsRecentHistory()
{
    const auto dir = test::scratchDir();
    auto store = SubtaskStore::open(dir->filePath(QStringLiteral("s.db")));
    qint64 now = 1000;
    (*store)->setNow([&] { return now; });
    QVERIFY((*store)->add(leased(id("old"))).ok());
    QVERIFY((*store)->setState(id("old"), SubtaskState::Dropped).ok());
    now = 5000;
    QVERIFY((*store)->add(leased(id("new"))).ok());
    QVERIFY((*store)->setState(id("new"), SubtaskState::Failed).ok());
    QVERIFY((*store)->add(leased(id("running"))).ok());
    QCOMPARE(*(*store)->prune(3000), 1);
    QVERIFY(!(*(*store)->find(id("old"))).has_value());
    QVERIFY((*(*store)->find(id("new"))).has_value());
    QCOMPARE(*(*store)->prune(1'000'000), 1); // the running one is never pruned
    QVERIFY((*(*store)->find(id("running"))).has_value());
}

void TestSubtaskStore::storedIdThatIsNotALeaseIdIsRefused()
{
    // A row altered on disk (or written by something else) names the folder the daemon would build and
    // remove: it is refused when read, never handed on as an id.
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("s.db"));
    {
        auto store = SubtaskStore::open(path);
        QVERIFY(store.ok());
        QVERIFY((*store)->add(leased(id("a"))).ok());
    }
    {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("alter"));
        db.setDatabaseName(path);
        QVERIFY(db.open());
        QSqlQuery q(db);
        QVERIFY(q.exec(QStringLiteral("UPDATE subtasks SET lease_id = '../../victim'")));
        db.close();
    }
    QSqlDatabase::removeDatabase(QStringLiteral("alter"));
    auto store = SubtaskStore::open(path);
    QVERIFY(store.ok());
    const auto open = (*store)->unfinished();
    QVERIFY(!open.ok());
    QVERIFY2(open.error().contains(u"not a lease id") && open.error().contains(path), qPrintable(open.error()));
}

QTEST_GUILESS_MAIN(TestSubtaskStore)
#include "TestSubtaskStore.moc"
