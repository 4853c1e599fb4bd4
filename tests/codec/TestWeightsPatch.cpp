// Weights patches: exact reconstruction, sizes that follow what changed, and every damaged or foreign patch
// refused.
#include "codec/UpdateCodec.h"
#include "codec/WeightsPatch.h"
#include "crypto/Sha256.h"
#include "format/SafeTensors.h"

#include <QRandomGenerator>
#include <QTest>

#include <vector>

using namespace gleaner;

namespace {

TensorBundle weights(quint32 seed, qint64 n, qint64 version)
{
    QRandomGenerator rng(seed);
    std::vector<float> w(static_cast<size_t>(n));
    for (float& v : w)
        v = float(rng.generateDouble());
    const std::vector<qint64> counter{version};
    const std::vector<quint8> flags{1, 2, 3}; // 3 bytes: the data ends in a partial word
    TensorBundle bundle;
    (void)bundle.addValues<float>(QStringLiteral("w"), DType::F32, {n}, w);
    (void)bundle.addValues<qint64>(QStringLiteral("count"), DType::I64, {1}, counter);
    (void)bundle.addValues<quint8>(QStringLiteral("flags"), DType::U8, {3}, flags);
    bundle.setMetadata(QStringLiteral("gleaner.version"), QString::number(version));
    return bundle;
}

// `from` with `changed` of its F32 values moved, as a sparse publication does.
TensorBundle moved(const TensorBundle& from, qint64 changed, qint64 version)
{
    TensorBundle to = from;
    auto values = to.mutableValues<float>(*to.find(QStringLiteral("w")));
    for (qint64 i = 0; i < changed; ++i)
        values[size_t(i * 7 % qint64(values.size()))] += 0.5f;
    to.mutableValues<qint64>(*to.find(QStringLiteral("count")))[0] = version;
    to.setMetadata(QStringLiteral("gleaner.version"), QString::number(version));
    return to;
}

QString shaOf(const QByteArray& bytes)
{
    return Sha256::toHex(Sha256::hash(bytes));
}

} // namespace

class TestWeightsPatch : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void patchRebuildsTheFileExactly();
    void patchIsAsSmallAsTheChange();
    void foreignOrDamagedPatchesAreRefused();
    void otherModelsCannotBePatched();
};

void TestWeightsPatch::patchRebuildsTheFileExactly()
{
    const QByteArray a = SafeTensors::serialize(weights(1, 10001, 9));
    const QByteArray b = SafeTensors::serialize(moved(*SafeTensors::parse(a), 300, 10));
    // The version's metadata changes the header's length: the data moves, the patch does not mind.
    TensorBundle longer = *SafeTensors::parse(b);
    longer.setMetadata(QStringLiteral("gleaner.version"), QStringLiteral("1000000"));
    for (const QByteArray& target : {b, SafeTensors::serialize(longer)}) {
        auto patch = WeightsPatch::make(a, target, shaOf(a), shaOf(target));
        QVERIFY2(patch.ok(), qPrintable(patch ? QString() : patch.error()));
        auto rebuilt = WeightsPatch::apply(a, *patch, shaOf(a), target.size());
        QVERIFY2(rebuilt.ok(), qPrintable(rebuilt ? QString() : rebuilt.error()));
        QCOMPARE(*rebuilt, target);
    }
    // No change at all: the header alone.
    auto same = WeightsPatch::make(a, a, shaOf(a), shaOf(a));
    QVERIFY(same.ok());
    QCOMPARE(*WeightsPatch::apply(a, *same, shaOf(a), a.size()), a);
}

void TestWeightsPatch::patchIsAsSmallAsTheChange()
{
    const TensorBundle base = weights(2, 100000, 1);
    const QByteArray a = SafeTensors::serialize(base);
    // 1% of the values changed: a patch of about 8 bytes a changed value (before zstd), far under the file.
    const QByteArray b = SafeTensors::serialize(moved(base, 1000, 2));
    const qint64 patch = WeightsPatch::make(a, b, shaOf(a), shaOf(b))->size();
    QVERIFY2(patch * 30 < b.size(), qPrintable(QStringLiteral("%1 of %2").arg(patch).arg(b.size())));
    // Everything changed: about the file again, which is why the coordinator keeps only patches under half.
    const QByteArray c = SafeTensors::serialize(weights(3, 100000, 2));
    QVERIFY(WeightsPatch::make(a, c, shaOf(a), shaOf(c))->size() * 2 > c.size());
}

void TestWeightsPatch::foreignOrDamagedPatchesAreRefused()
{
    const QByteArray a = SafeTensors::serialize(weights(4, 1000, 1));
    const QByteArray b = SafeTensors::serialize(moved(*SafeTensors::parse(a), 50, 2));
    const QByteArray patch = *WeightsPatch::make(a, b, shaOf(a), shaOf(b));

    auto foreign = WeightsPatch::apply(a, patch, shaOf(b), b.size());
    QVERIFY(!foreign.ok());
    QVERIFY2(foreign.error().contains(QStringLiteral("another file")), qPrintable(foreign.error()));
    auto tooBig = WeightsPatch::apply(a, patch, shaOf(a), b.size() - 1);
    QVERIFY(!tooBig.ok());
    QVERIFY2(tooBig.error().contains(QStringLiteral("more than")), qPrintable(tooBig.error()));
    QVERIFY(!WeightsPatch::apply(a, patch.left(patch.size() / 2), shaOf(a), b.size()).ok());
    QVERIFY(!WeightsPatch::apply(a, QByteArray("not a patch"), shaOf(a), b.size()).ok());

    // A word beyond the data, and positions out of order.
    TensorBundle parts = *UpdateCodec::unpack(patch, 1 << 24);
    const auto index = parts.mutableValues<qint32>(*parts.find(QStringLiteral("index")));
    index[1] = 1000000;
    auto beyond = WeightsPatch::apply(a, UpdateCodec::pack(parts, true), shaOf(a), b.size());
    QVERIFY(!beyond.ok());
    QVERIFY2(beyond.error().contains(QStringLiteral("outside the weights or out of order")),
             qPrintable(beyond.error()));
    index[1] = 0;
    QVERIFY(!WeightsPatch::apply(a, UpdateCodec::pack(parts, true), shaOf(a), b.size()).ok());

    // A header that is not a weights file's.
    TensorBundle badHeader = *UpdateCodec::unpack(patch, 1 << 24);
    auto head = badHeader.mutableValues<quint8>(*badHeader.find(QStringLiteral("header")));
    head[0] = 0xff;
    auto refused = WeightsPatch::apply(a, UpdateCodec::pack(badHeader, true), shaOf(a), b.size());
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(QStringLiteral("header")), qPrintable(refused.error()));
}

void TestWeightsPatch::otherModelsCannotBePatched()
{
    const QByteArray a = SafeTensors::serialize(weights(5, 1000, 1));
    const QByteArray b = SafeTensors::serialize(weights(5, 1001, 1));
    auto patch = WeightsPatch::make(a, b, shaOf(a), shaOf(b));
    QVERIFY(!patch.ok());
    QVERIFY2(patch.error().contains(QStringLiteral("not the same model")), qPrintable(patch.error()));
    QVERIFY(!WeightsPatch::make(QByteArray("short"), b, QString(), QString()).ok());
}

QTEST_GUILESS_MAIN(TestWeightsPatch)
#include "TestWeightsPatch.moc"
