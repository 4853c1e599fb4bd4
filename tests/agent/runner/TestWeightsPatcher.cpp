// The agent's side of incremental downloads: weights built from a cached earlier file and a patch, and every way
// that can fail (no base, an altered base, a patch that does not arrive or is not the signed one), each an error
// that leaves no weights file in the cache, so the daemon downloads the full file.
#include "runner/WeightsPatcher.h"

#include "cache/FileCache.h"
#include "codec/WeightsPatch.h"
#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "util/Clock.h"

#include "TestSupport.h"

#include <QFile>
#include <QTest>

#include <vector>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

QByteArray weightsFile(float shift, qint64 version)
{
    std::vector<float> w(5000);
    for (size_t i = 0; i < w.size(); ++i)
        w[i] = float(i) * 0.001f + (i % 50 == 0 ? shift : 0.0f);
    TensorBundle bundle;
    (void)bundle.addValues<float>(QStringLiteral("w"), DType::F32, {5000}, w);
    bundle.setMetadata(QStringLiteral("gleaner.version"), QString::number(version));
    return SafeTensors::serialize(bundle);
}

QString shaOf(const QByteArray& bytes)
{
    return Sha256::toHex(Sha256::hash(bytes));
}

Status put(FileCache& cache, const QByteArray& bytes, CacheRole role)
{
    auto writer = cache.beginWrite(shaOf(bytes), bytes.size(), role);
    if (!writer)
        return fail(writer.error());
    if (auto s = (*writer)->append(bytes); !s)
        return s;
    auto committed = (*writer)->commit();
    return committed ? Status() : fail(committed.error());
}

QByteArray readAll(const QString& path)
{
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

} // namespace

class TestWeightsPatcher : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void weightsAreBuiltFromTheCachedFile();
    void theSmallestUsablePatchIsTaken();
    void withoutTheBaseNothingIsFetched();
    void alteredBaseIsCaught();
    void patchThatIsNotTheSignedOneIsRefused();
    void patchThatDoesNotArriveIsAnError();

private:
    FetchFile serving(const QMap<QString, QByteArray>& files);

    std::unique_ptr<QTemporaryDir> m_dir;
    ManualClock m_clock;
    std::unique_ptr<FileCache> m_cache;
    QByteArray m_old, m_new, m_patch;
    ManifestFile m_weights;
    ManifestPatch m_offer;
    int m_fetches = 0;
};

void TestWeightsPatcher::init()
{
    m_dir = test::scratchDir();
    auto cache = FileCache::open(m_dir->filePath(QStringLiteral("cache")), 1 << 30, m_clock);
    QVERIFY2(cache.ok(), qPrintable(cache ? QString() : cache.error()));
    m_cache = std::move(*cache);
    m_old = weightsFile(0.0f, 1);
    m_new = weightsFile(0.5f, 2);
    m_patch = *WeightsPatch::make(m_old, m_new, shaOf(m_old), shaOf(m_new));
    m_weights = ManifestFile{QStringLiteral("weights"), shaOf(m_new), m_new.size()};
    m_offer = ManifestPatch{shaOf(m_old), shaOf(m_patch), m_patch.size()};
    m_fetches = 0;
}

FetchFile TestWeightsPatcher::serving(const QMap<QString, QByteArray>& files)
{
    return [this, files](const QString& sha, const QString& path, qint64) -> Status {
        ++m_fetches;
        if (!files.contains(sha))
            return fail(QStringLiteral("HTTP 404: no file has SHA-256 %1").arg(sha));
        QFile out(path);
        if (!out.open(QIODevice::WriteOnly | QIODevice::Append))
            return fail(QStringLiteral("cannot write %1").arg(path));
        out.write(files.value(sha));
        return {};
    };
}

void TestWeightsPatcher::weightsAreBuiltFromTheCachedFile()
{
    QVERIFY(put(*m_cache, m_old, CacheRole::Weights).ok());
    QVERIFY(m_patch.size() * 8 < m_new.size()); // a tenth of the values moved: far less than the file
    auto fetched = patchWeights(*m_cache, m_weights, {m_offer}, serving({{m_offer.sha256, m_patch}}));
    QVERIFY2(fetched.ok(), qPrintable(fetched ? QString() : fetched.error()));
    QCOMPARE(*fetched, m_patch.size());
    QVERIFY(m_cache->contains(m_weights.sha256));
    QCOMPARE(readAll(m_cache->path(m_weights.sha256)), m_new); // byte for byte the coordinator's file
    QVERIFY(!m_cache->contains(m_offer.sha256));              // the patch is gone once applied
}

void TestWeightsPatcher::theSmallestUsablePatchIsTaken()
{
    // The agent holds an older and a newer earlier file; the coordinator lists the patch from the older first.
    const QByteArray older = weightsFile(-0.5f, 0);
    QVERIFY(put(*m_cache, older, CacheRole::Weights).ok());
    QVERIFY(put(*m_cache, m_old, CacheRole::Weights).ok());
    const QByteArray far = *WeightsPatch::make(older, m_new, shaOf(older), shaOf(m_new));
    const ManifestPatch fromOlder{shaOf(older), shaOf(far), far.size()};
    QVERIFY(far.size() > m_patch.size());
    auto fetched = patchWeights(*m_cache, m_weights, {fromOlder, m_offer},
                                serving({{fromOlder.sha256, far}, {m_offer.sha256, m_patch}}));
    QVERIFY2(fetched.ok(), qPrintable(fetched ? QString() : fetched.error()));
    QCOMPARE(*fetched, m_patch.size());
    QCOMPARE(m_fetches, 1);
    QCOMPARE(readAll(m_cache->path(m_weights.sha256)), m_new);
}

void TestWeightsPatcher::withoutTheBaseNothingIsFetched()
{
    auto fetched = patchWeights(*m_cache, m_weights, {m_offer}, serving({{m_offer.sha256, m_patch}}));
    QVERIFY(!fetched.ok());
    QVERIFY2(fetched.error().contains(QStringLiteral("holds none")), qPrintable(fetched.error()));
    QCOMPARE(m_fetches, 0);
    QVERIFY(!m_cache->contains(m_weights.sha256));
}

void TestWeightsPatcher::alteredBaseIsCaught()
{
    QVERIFY(put(*m_cache, m_old, CacheRole::Weights).ok());
    // The cached file changes on disk after it was checked; its size stays, so the cache still lists it.
    QFile file(m_cache->path(m_offer.fromSha256));
    QVERIFY(file.open(QIODevice::ReadWrite));
    file.seek(file.size() - 4);
    file.write("\x01\x02\x03\x04", 4);
    file.close();
    auto fetched = patchWeights(*m_cache, m_weights, {m_offer}, serving({{m_offer.sha256, m_patch}}));
    QVERIFY(!fetched.ok());
    QVERIFY2(fetched.error().contains(QStringLiteral("not the signed file")), qPrintable(fetched.error()));
    QVERIFY(!m_cache->contains(m_weights.sha256));
}

void TestWeightsPatcher::patchThatIsNotTheSignedOneIsRefused()
{
    QVERIFY(put(*m_cache, m_old, CacheRole::Weights).ok());
    QByteArray forged = m_patch;
    forged[forged.size() / 2] = char(forged[forged.size() / 2] ^ 0x40);
    auto fetched = patchWeights(*m_cache, m_weights, {m_offer}, serving({{m_offer.sha256, forged}}));
    QVERIFY(!fetched.ok());
    QVERIFY2(fetched.error().contains(QStringLiteral("is not the signed file")), qPrintable(fetched.error()));
    QVERIFY(!m_cache->contains(m_weights.sha256));
}

void TestWeightsPatcher::patchThatDoesNotArriveIsAnError()
{
    QVERIFY(put(*m_cache, m_old, CacheRole::Weights).ok());
    auto fetched = patchWeights(*m_cache, m_weights, {m_offer}, serving({}));
    QVERIFY(!fetched.ok());
    QVERIFY2(fetched.error().contains(QStringLiteral("404")), qPrintable(fetched.error()));
    QVERIFY(!m_cache->contains(m_weights.sha256));
}

QTEST_GUILESS_MAIN(TestWeightsPatcher)
#include "TestWeightsPatcher.moc"
