// The agent's file cache: what a volunteer would notice if it broke is a corrupted shard reaching training,
// a download starting over after every restart, the disk filling past the cap, or a running subtask losing
// its files to eviction.

#include "TestSupport.h"
#include "cache/FileCache.h"
#include "crypto/Sha256.h"
#include "util/Clock.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QTest>
#include <QThread>

#include <atomic>
#include <memory>
#include <vector>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

QByteArray content(int size, char seed)
{
    QByteArray data(size, Qt::Uninitialized);
    for (int i = 0; i < size; ++i)
        data[i] = char(seed + i * 7 + i / 251);
    return data;
}

QString shaOf(const QByteArray& data)
{
    return Sha256::toHex(Sha256::hash(data));
}

// Downloads `data` into the cache in small pieces, as the network layer would.
Result<CommitResult> put(FileCache& cache, const QByteArray& data, CacheRole role = CacheRole::Shard)
{
    auto writer = cache.beginWrite(shaOf(data), data.size(), role);
    if (!writer)
        return fail(writer.error());
    for (qsizetype at = 0; at < data.size(); at += 1000)
        if (Status s = (*writer)->append(data.mid(at, 1000)); !s)
            return fail(s.error());
    return (*writer)->commit();
}

// Files under a trusted name (<dir>/ab/<sha256>), not partial downloads.
QStringList filesUnder(const QString& dir)
{
    QStringList found;
    const QDir root(dir);
    for (const QString& folder : root.entryList(QDir::Dirs | QDir::NoDotAndDotDot))
        if (folder.size() == 2)
            for (const QString& name : QDir(root.filePath(folder)).entryList(QDir::Files))
                found.append(folder + u'/' + name);
    return found;
}

} // namespace

class TestFileCache : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void init()
    {
        m_dir = test::scratchDir();
        m_clock = std::make_unique<ManualClock>();
    }

    void writeCommitRead()
    {
        auto cache = openCache();
        QVERIFY(cache);
        const QByteArray data = content(10'000, 'a');
        auto committed = put(*cache, data);
        QVERIFY2(committed, qPrintable(committed.error()));
        QCOMPARE(committed->path, cache->path(shaOf(data)));
        QVERIFY(committed->path.startsWith(cache->directory() + u'/' + shaOf(data).left(2) + u'/'));
        QCOMPARE(gleaner::test::readFile(cache->path(shaOf(data))), data);
        QVERIFY(cache->contains(shaOf(data)));
        QCOMPARE(cache->usedBytes(), qint64(10'000));
        QVERIFY(QDir(cache->directory() + QStringLiteral("/partial")).isEmpty());
        QVERIFY(committed->eviction.evicted.isEmpty());

        // A second download of a cached file is refused: the caller should use the one it has.
        auto again = cache->beginWrite(shaOf(data), data.size(), CacheRole::Shard);
        QVERIFY(!again);
        QVERIFY2(again.error().contains(QStringLiteral("already cached")), qPrintable(again.error()));

        // The index survives a restart.
        cache.reset();
        cache = openCache();
        QVERIFY(cache->contains(shaOf(data)));
        QCOMPARE(cache->heldHashes(), QStringList{shaOf(data)});
        QCOMPARE(cache->startupReport().droppedRows + cache->startupReport().indexedStrays, 0);
    }

    void refusesWrongContent_data()
    {
        QTest::addColumn<QByteArray>("manifestContent"); // what the manifest's hash and size describe
        QTest::addColumn<QByteArray>("served");          // what the server sends
        QTest::addColumn<QString>("message");
        QTest::addColumn<bool>("partialKept");

        const QByteArray good = content(5000, 'x');
        QByteArray flipped = good;
        flipped[2500] = char(flipped[2500] ^ 1);
        QTest::newRow("one byte differs")
            << good << flipped << QStringLiteral("differs from its manifest") << false;
        QTest::newRow("longer than the manifest")
            << good << good + QByteArray("!") << QStringLiteral("more than the 5000 bytes") << false;
        QTest::newRow("shorter: incomplete, resumable")
            << good << good.left(4000) << QStringLiteral("incomplete, 4000 of 5000 bytes") << true;
        QTest::newRow("empty body") << good << QByteArray() << QStringLiteral("incomplete, 0 of 5000")
                                    << true;
    }

    void refusesWrongContent()
    {
        QFETCH(QByteArray, manifestContent);
        QFETCH(QByteArray, served);
        QFETCH(QString, message);
        QFETCH(bool, partialKept);
        auto cache = openCache();
        const QString sha = shaOf(manifestContent);
        auto writer = cache->beginWrite(sha, manifestContent.size(), CacheRole::Shard);
        QVERIFY2(writer, qPrintable(writer.error()));
        Status appended = (*writer)->append(served);
        QString error = appended.error();
        if (appended) {
            auto committed = (*writer)->commit();
            QVERIFY(!committed);
            error = committed.error();
        }
        QVERIFY2(error.contains(message), qPrintable(error));
        QVERIFY2(error.contains(sha), qPrintable(error));
        if (message.contains(QStringLiteral("differs")))
            QVERIFY2(error.contains(shaOf(served)), qPrintable(error)); // names the actual hash too
        QCOMPARE(QFile::exists((*writer)->partialPath()), partialKept);
        QVERIFY(!cache->contains(sha));
        QVERIFY(cache->path(sha).isEmpty());
        QVERIFY(filesUnder(cache->directory()).isEmpty()); // nothing under a trusted name
        QCOMPARE(cache->usedBytes(), qint64(0));
    }

    void resumesAfterCrash_data()
    {
        QTest::addColumn<bool>("externalWriter"); // libcurl writing to partialPath() with its own FILE*
        QTest::newRow("append()") << false;
        QTest::newRow("writes to partialPath()") << true;
    }

    void resumesAfterCrash()
    {
        QFETCH(bool, externalWriter);
        const QByteArray data = content(300'000, 'r');
        const QString sha = shaOf(data);
        auto cache = openCache();
        {
            auto writer = cache->beginWrite(sha, data.size(), CacheRole::Weights);
            QVERIFY(writer);
            QCOMPARE((*writer)->resumeOffset(), qint64(0));
            QVERIFY((*writer)->append(data.left(123'457)));
            // Destroyed without commit: the process died mid-download.
        }
        cache.reset();
        cache = openCache();
        QCOMPARE(cache->startupReport().removedPartials, 0);
        auto writer = cache->beginWrite(sha, data.size(), CacheRole::Weights);
        QVERIFY2(writer, qPrintable(writer.error()));
        QCOMPARE((*writer)->resumeOffset(), qint64(123'457));
        QCOMPARE(QFileInfo((*writer)->partialPath()).size(), qint64(123'457));
        if (externalWriter) {
            QFile file((*writer)->partialPath());
            QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Append));
            QCOMPARE(file.write(data.mid(123'457)), qint64(data.size() - 123'457));
        } else {
            QVERIFY((*writer)->append(data.mid(123'457)));
        }
        auto committed = (*writer)->commit();
        QVERIFY2(committed, qPrintable(committed.error()));
        QCOMPARE(gleaner::test::readFile(cache->path(sha)), data);
        QCOMPARE(cache->heldHashes(CacheRole::Weights), QStringList{sha});
    }

    void incompleteCommitThenRest()
    {
        const QByteArray data = content(4000, 'i');
        auto cache = openCache();
        auto writer = cache->beginWrite(shaOf(data), data.size(), CacheRole::Model);
        QVERIFY((*writer)->append(data.left(1000)));
        QVERIFY(!(*writer)->commit());
        QVERIFY((*writer)->append(data.mid(1000)));
        auto committed = (*writer)->commit();
        QVERIFY2(committed, qPrintable(committed.error()));
        QVERIFY(cache->contains(shaOf(data)));
    }

    void secondWriterOfOneFileRefused()
    {
        const QByteArray data = content(100, 's');
        auto cache = openCache();
        auto first = cache->beginWrite(shaOf(data), data.size(), CacheRole::Shard);
        QVERIFY(first);
        auto second = cache->beginWrite(shaOf(data), data.size(), CacheRole::Shard);
        QVERIFY(!second);
        QVERIFY2(second.error().contains(QStringLiteral("already being downloaded")),
                 qPrintable(second.error()));
        first->reset();
        QVERIFY(cache->beginWrite(shaOf(data), data.size(), CacheRole::Shard));
    }

    void evictsLeastRecentlyUsed()
    {
        auto cache = openCache(3000);
        const QByteArray a = content(1000, 'A'), b = content(1000, 'B'), c = content(1000, 'C'),
                         d = content(1000, 'D');
        for (const QByteArray& data : {a, b, c}) {
            QVERIFY(put(*cache, data));
            m_clock->advance(1000);
        }
        QVERIFY(cache->touch(shaOf(a))); // a is now the most recent; b the oldest
        m_clock->advance(1000);
        auto committed = put(*cache, d);
        QVERIFY2(committed, qPrintable(committed.error()));
        QCOMPARE(committed->eviction.evicted.size(), 1);
        QCOMPARE(committed->eviction.evicted.first().sha256, shaOf(b));
        QVERIFY(!cache->contains(shaOf(b)));
        QVERIFY(!QFile::exists(cache->directory() + u'/' + shaOf(b).left(2) + u'/' + shaOf(b)));
        QCOMPARE(cache->heldHashes(), (QStringList{shaOf(d), shaOf(a), shaOf(c)}));
        QCOMPARE(cache->usedBytes(), qint64(3000));
        QVERIFY(!cache->touch(shaOf(b)));
    }

    void pinnedNeverEvicted()
    {
        auto cache = openCache(2000);
        const QByteArray a = content(1000, 'A'), b = content(1000, 'B'), c = content(1000, 'C');
        QVERIFY(cache->pin(shaOf(a), QStringLiteral("lease-1"))); // pinned before it is downloaded
        QVERIFY(cache->pin(shaOf(a), QStringLiteral("lease-1"))); // idempotent: one pin per owner
        for (const QByteArray& data : {a, b, c}) {
            QVERIFY(put(*cache, data));
            m_clock->advance(1000);
        }
        QVERIFY(cache->contains(shaOf(a))); // the oldest, but pinned
        QVERIFY(!cache->contains(shaOf(b)));
        QVERIFY(cache->contains(shaOf(c)));

        // Pins survive a restart.
        cache.reset();
        cache = openCache(2000);
        QCOMPARE(cache->pinOwners(), QStringList{QStringLiteral("lease-1")});
        EvictionReport report = cache->setCap(0);
        QCOMPARE(report.evicted.size(), 1);
        QVERIFY(cache->contains(shaOf(a)));
        QVERIFY(report.overCap());

        // One unpin by the owner is enough despite the two pin() calls.
        QVERIFY(cache->unpin(shaOf(a), QStringLiteral("lease-1")));
        QVERIFY(cache->pinOwners().isEmpty());
        QCOMPARE(cache->setCap(0).evicted.size(), 1);
        QCOMPARE(cache->usedBytes(), qint64(0));
    }

    void fileLargerThanCapKeptWhilePinned()
    {
        auto cache = openCache(500);
        const QByteArray big = content(2000, 'G');
        QVERIFY(cache->pin(shaOf(big), QStringLiteral("lease-7")));
        QVERIFY(cache->pin(shaOf(big), QStringLiteral("lease-8")));
        auto committed = put(*cache, big);
        QVERIFY2(committed, qPrintable(committed.error()));
        QVERIFY(committed->eviction.overCap());
        QVERIFY(cache->contains(shaOf(big)));
        QCOMPARE(cache->releaseOwner(QStringLiteral("lease-7")).value(), 1);
        QVERIFY(cache->setCap(500).evicted.isEmpty()); // lease-8 still holds it
        QCOMPARE(cache->releaseOwner(QStringLiteral("lease-8")).value(), 1);
        QCOMPARE(cache->setCap(500).evicted.size(), 1);
        QVERIFY(!cache->contains(shaOf(big)));
    }

    void loweringCapEvicts()
    {
        auto cache = openCache();
        QStringList hashes;
        for (char seed : {'1', '2', '3', '4'}) {
            const QByteArray data = content(1000, seed);
            QVERIFY(put(*cache, data));
            hashes.append(shaOf(data));
            m_clock->advance(10);
        }
        EvictionReport report = cache->setCap(2500);
        QCOMPARE(report.evicted.size(), 2);
        QCOMPARE(report.evicted.at(0).sha256, hashes.at(0));
        QCOMPARE(report.evicted.at(1).sha256, hashes.at(1));
        QCOMPARE(report.usedBytes, qint64(2000));
        QVERIFY(!report.overCap());
        QCOMPARE(cache->usedBytes(), qint64(2000));

        // A cap lowered between runs applies on open.
        cache.reset();
        cache = openCache(1000);
        QCOMPARE(cache->startupReport().eviction.evicted.size(), 1);
        QCOMPARE(cache->heldHashes(), QStringList{hashes.at(3)});
    }

    void verifyCatchesAlteredFile()
    {
        auto cache = openCache();
        const QByteArray data = content(8000, 'v');
        QVERIFY(put(*cache, data));
        QVERIFY(cache->verify(shaOf(data)));
        {
            QFile file(cache->path(shaOf(data)));
            QVERIFY(file.open(QIODevice::ReadWrite));
            file.seek(4000);
            file.write("X"); // same size: contains()'s stat cannot see it, verify() must
        }
        QVERIFY(cache->contains(shaOf(data)));
        Status verified = cache->verify(shaOf(data));
        QVERIFY(!verified);
        QVERIFY2(verified.error().contains(QStringLiteral("altered on disk")), qPrintable(verified.error()));
        QVERIFY2(verified.error().contains(shaOf(data)), qPrintable(verified.error()));
        QVERIFY(!cache->contains(shaOf(data)));
        QVERIFY(filesUnder(cache->directory()).isEmpty());
        QVERIFY(!cache->verify(shaOf(data)));
    }

    void startupReconciliation()
    {
        const QByteArray kept = content(1000, 'k'), gone = content(1000, 'g'), resized = content(1000, 'z');
        const QByteArray stray = content(700, 's'), liar = content(700, 'l');
        QString root;
        {
            auto cache = openCache();
            root = cache->directory();
            for (const QByteArray& data : {kept, gone, resized})
                QVERIFY(put(*cache, data));
            auto fresh = cache->beginWrite(shaOf(content(50, 'f')), 50, CacheRole::Shard);
            QVERIFY((*fresh)->append(content(50, 'f').left(10)));
        }
        auto writeFile = [](const QString& path, const QByteArray& data) {
            QDir().mkpath(QFileInfo(path).absolutePath());
            QFile file(path);
            return file.open(QIODevice::WriteOnly) && file.write(data) == data.size();
        };
        auto cachedPath = [&](const QString& sha) -> QString {
            return root + u'/' + sha.left(2) + u'/' + sha;
        };
        QVERIFY(QFile::remove(cachedPath(shaOf(gone))));
        QVERIFY(writeFile(cachedPath(shaOf(resized)), resized.left(10)));
        QVERIFY(writeFile(cachedPath(shaOf(stray)), stray)); // rename done, index insert lost
        QVERIFY(writeFile(cachedPath(shaOf(liar)), stray));  // name and content disagree
        QVERIFY(writeFile(root + QStringLiteral("/ab/notes.txt"), "x"));
        QVERIFY(writeFile(
            root + QStringLiteral("/partial/") + shaOf(content(60, 'o')) + QStringLiteral(".part"), "old"));
        QVERIFY(writeFile(root + QStringLiteral("/partial/garbage"), "g"));
        QVERIFY(writeFile(root + QStringLiteral("/partial/") + shaOf(kept) + QStringLiteral(".part"), "dup"));
        // Back-date the old partial; the fresh one keeps today's time. The clock is real time so that the
        // files' modification times compare with it.
        m_clock->set(QDateTime::currentMSecsSinceEpoch());
        {
            QFile old(root + QStringLiteral("/partial/") + shaOf(content(60, 'o')) + QStringLiteral(".part"));
            QVERIFY(old.open(QIODevice::ReadWrite));
            QVERIFY(
                old.setFileTime(QDateTime::currentDateTime().addDays(-8), QFileDevice::FileModificationTime));
        }

        auto cache = openCache();
        const CacheStartupReport& report = cache->startupReport();
        QCOMPARE(report.droppedRows, 2);
        QCOMPARE(report.indexedStrays, 1);
        QCOMPARE(report.deletedStrays, 2);
        QCOMPARE(report.removedPartials, 3);
        QVERIFY(cache->contains(shaOf(kept)));
        QVERIFY(cache->contains(shaOf(stray)));
        QVERIFY(!cache->contains(shaOf(gone)));
        QVERIFY(!cache->contains(shaOf(resized)));
        QVERIFY(!QFile::exists(cachedPath(shaOf(resized))));
        QVERIFY(!QFile::exists(cachedPath(shaOf(liar))));
        QCOMPARE(cache->usedBytes(), qint64(1700));
        QCOMPARE(cache->heldHashes(CacheRole::Unknown), QStringList{shaOf(stray)});
        QCOMPARE(QDir(root + QStringLiteral("/partial")).entryList(QDir::Files),
                 QStringList{shaOf(content(50, 'f')) + QStringLiteral(".part")});
    }

    void refusesMalformedHashes_data()
    {
        QTest::addColumn<QString>("sha");
        const QString hex = shaOf("x");
        QTest::newRow("empty") << QString();
        QTest::newRow("parent folder") << QStringLiteral("../x");
        QTest::newRow("parent + 61 hex") << QStringLiteral("../") + hex.left(61);
        QTest::newRow("absolute") << u'/' + hex.left(63);
        QTest::newRow("uppercase") << hex.toUpper();
        QTest::newRow("63 digits") << hex.left(63);
        QTest::newRow("65 digits") << hex + u'0';
        QTest::newRow("not hex") << QString(64, u'g');
        QTest::newRow("separator inside") << hex.left(30) + u'/' + hex.mid(31);
    }

    void refusesMalformedHashes()
    {
        QFETCH(QString, sha);
        auto cache = openCache();
        QVERIFY(cache->path(sha).isEmpty());
        QVERIFY(!cache->contains(sha));
        QVERIFY(!cache->touch(sha));
        QVERIFY(!cache->pin(sha, QStringLiteral("lease")));
        QVERIFY(!cache->verify(sha));
        auto writer = cache->beginWrite(sha, 1, CacheRole::Shard);
        QVERIFY(!writer);
        QVERIFY2(writer.error().contains(QStringLiteral("is not a SHA-256")), qPrintable(writer.error()));
        QVERIFY(QDir(cache->directory() + QStringLiteral("/partial")).isEmpty());
    }

    void pathOfUncachedFileIsEmpty()
    {
        auto cache = openCache();
        QVERIFY(cache->path(shaOf("never downloaded")).isEmpty());
    }

    void heldHashesByRole()
    {
        auto cache = openCache();
        const QByteArray model = content(10, 'm'), weights = content(20, 'w'), shard1 = content(30, '1'),
                         shard2 = content(40, '2');
        QVERIFY(put(*cache, model, CacheRole::Model));
        m_clock->advance(1);
        QVERIFY(put(*cache, weights, CacheRole::Weights));
        m_clock->advance(1);
        QVERIFY(put(*cache, shard1, CacheRole::Shard));
        m_clock->advance(1);
        QVERIFY(put(*cache, shard2, CacheRole::Shard));
        QCOMPARE(cache->heldHashes(CacheRole::Shard), (QStringList{shaOf(shard2), shaOf(shard1)}));
        QCOMPARE(cache->heldHashes(CacheRole::Model), QStringList{shaOf(model)});
        QCOMPARE(cache->heldHashes().size(), 4);
        QCOMPARE(cache->usedBytes(), qint64(100));
    }

    void concurrentWriters()
    {
        auto cache = openCache();
        constexpr int kThreads = 6;
        std::vector<QByteArray> data;
        for (int i = 0; i < kThreads; ++i)
            data.push_back(content(200'000 + i * 1013, char('a' + i)));
        std::atomic<int> failures{0};
        std::vector<std::unique_ptr<QThread>> threads;
        for (int i = 0; i < kThreads; ++i) {
            threads.emplace_back(QThread::create([&, i] {
                auto writer = cache->beginWrite(shaOf(data[i]), data[i].size(), CacheRole::Shard);
                if (!writer) {
                    ++failures;
                    return;
                }
                for (qsizetype at = 0; at < data[i].size(); at += 4096) {
                    if (!(*writer)->append(data[i].mid(at, 4096)))
                        ++failures;
                    if (at % 65536 == 0)
                        QThread::yieldCurrentThread();
                }
                if (!(*writer)->commit())
                    ++failures;
                cache->touch(shaOf(data[i]));
            }));
            threads.back()->start();
        }
        for (auto& thread : threads)
            QVERIFY(thread->wait(60'000));
        QCOMPARE(failures.load(), 0);
        qint64 total = 0;
        for (const QByteArray& bytes : data) {
            QCOMPARE(gleaner::test::readFile(cache->path(shaOf(bytes))), bytes);
            total += bytes.size();
        }
        QCOMPARE(cache->usedBytes(), total);
        QCOMPARE(cache->heldHashes().size(), kThreads);
    }

private:
    std::unique_ptr<FileCache> openCache(qint64 cap = 1 << 30)
    {
        auto cache = FileCache::open(m_dir->path() + QStringLiteral("/cache"), cap, *m_clock);
        if (!cache)
            qWarning("%s", qPrintable(cache.error()));
        return cache ? std::move(*cache) : nullptr;
    }

    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<ManualClock> m_clock;
};

QTEST_GUILESS_MAIN(TestFileCache)
#include "TestFileCache.moc"
