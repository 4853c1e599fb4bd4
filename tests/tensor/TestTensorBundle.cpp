#include "tensor/TensorBundle.h"

#include <QTest>

#include <memory>
#include <vector>

#include <array>

using namespace gleaner;

class TestTensorBundle : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void dtypeNamesRoundTrip();
    void addAndReadBack();
    void addRefusesWrongByteCountAndDuplicates();
    void tensorsAreAligned();
    void mutableDataDetachesSharedBuffer();
    void shapeOverflowIsDetected();
    void addCopiesFromItsOwnBuffer();
    void rawBytesAreKeptAliveAndCopiedBeforeWriting();
};

void TestTensorBundle::dtypeNamesRoundTrip()
{
    for (DType type : {DType::Bool, DType::U8, DType::I8, DType::I16, DType::U16, DType::F16, DType::BF16,
                       DType::I32, DType::U32, DType::F32, DType::F64, DType::I64, DType::U64}) {
        const auto parsed = dtypeFromName(dtypeName(type));
        QVERIFY(parsed.has_value());
        QCOMPARE(*parsed, type);
    }
    QVERIFY(!dtypeFromName(u"F8").has_value());
    QVERIFY(!dtypeFromName(u"f32").has_value());
    QCOMPARE(dtypeSize(DType::BF16), 2);
    QCOMPARE(dtypeSize(DType::I64), 8);
}

void TestTensorBundle::addAndReadBack()
{
    TensorBundle bundle;
    const std::array<float, 6> values{1, 2, 3, 4, 5, 6};
    QVERIFY(bundle.addValues<float>(QStringLiteral("w"), DType::F32, {2, 3}, values).ok());
    const std::array<qint64, 2> ids{7, -9};
    QVERIFY(bundle.addValues<qint64>(QStringLiteral("ids"), DType::I64, {2}, ids).ok());
    QCOMPARE(bundle.size(), 2);
    const TensorEntry* w = bundle.find(u"w");
    QVERIFY(w);
    QCOMPARE(w->elementCount(), 6);
    QCOMPARE(bundle.values<float>(*w)[5], 6.0f);
    QCOMPARE(bundle.values<qint64>(*bundle.find(u"ids"))[1], qint64(-9));
    QCOMPARE(bundle.tensorBytes(), 6 * 4 + 2 * 8);
    QCOMPARE(bundle.parameterCount(), 8);
}

void TestTensorBundle::addRefusesWrongByteCountAndDuplicates()
{
    TensorBundle bundle;
    const std::array<float, 5> five{};
    const Status wrong = bundle.addValues<float>(QStringLiteral("w"), DType::F32, {2, 3}, five);
    QVERIFY(!wrong.ok());
    QVERIFY2(wrong.error().contains(u"needs 24 bytes, got 20"), qPrintable(wrong.error()));
    QVERIFY(bundle.addValues<float>(QStringLiteral("w"), DType::F32, {5}, five).ok());
    const Status dup = bundle.addValues<float>(QStringLiteral("w"), DType::F32, {5}, five);
    QVERIFY(!dup.ok());
    QVERIFY(dup.error().contains(u"already"));
}

void TestTensorBundle::tensorsAreAligned()
{
    TensorBundle bundle;
    QVERIFY(bundle.addZeroed(QStringLiteral("a"), DType::U8, {3}));
    QVERIFY(bundle.addZeroed(QStringLiteral("b"), DType::F32, {3}));
    QCOMPARE(bundle.find(u"b")->offset % 64, 0);
}

void TestTensorBundle::mutableDataDetachesSharedBuffer()
{
    TensorBundle original;
    float* p = reinterpret_cast<float*>(original.addZeroed(QStringLiteral("w"), DType::F32, {4}));
    p[0] = 1.0f;
    TensorBundle copy = original;
    copy.mutableValues<float>(*copy.find(u"w"))[0] = 2.0f;
    QCOMPARE(original.values<float>(*original.find(u"w"))[0], 1.0f);
    QCOMPARE(copy.values<float>(*copy.find(u"w"))[0], 2.0f);
}

void TestTensorBundle::rawBytesAreKeptAliveAndCopiedBeforeWriting()
{
    // Bytes the bundle does not own (a mapped file, in the coordinator's intake), kept by an owner.
    bool released = false;
    auto bytes = std::shared_ptr<std::vector<float>>(new std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f},
                                                     [&](std::vector<float>* v) {
                                                         released = true;
                                                         delete v;
                                                     });
    const float* raw = bytes->data();
    TensorBundle original = TensorBundle::fromBuffer(
        QByteArray::fromRawData(reinterpret_cast<const char*>(raw), 4 * sizeof(float)),
        {TensorEntry{QStringLiteral("w"), DType::F32, {4}, 0, 4 * sizeof(float)}});
    original.keepAlive(bytes);
    bytes.reset();
    QVERIFY(!released);
    {
        TensorBundle copy = original;
        original = TensorBundle();
        QVERIFY(!released); // the copy still views them
        QCOMPARE(copy.values<float>(*copy.find(u"w"))[3], 4.0f);
        TensorBundle written = copy;
        written.mutableValues<float>(*written.find(u"w"))[0] = 9.0f;
        QCOMPARE(raw[0], 1.0f); // written to its own copy, never through to the owner's bytes
        QCOMPARE(copy.values<float>(*copy.find(u"w"))[0], 1.0f);
        QCOMPARE(written.values<float>(*written.find(u"w"))[0], 9.0f);
    }
    QVERIFY(released); // the last bundle that viewed them is gone
}

void TestTensorBundle::shapeOverflowIsDetected()
{
    QVERIFY(!shapeElementCount({qint64(1) << 40, qint64(1) << 40}).has_value());
    QVERIFY(!shapeElementCount({-1, 2}).has_value());
    QCOMPARE(*shapeElementCount({}), qint64(1));
    QCOMPARE(*shapeElementCount({0, 5}), qint64(0));

    // The element count fits but the byte size does not: refused, never a wrapped-around allocation.
    TensorBundle bundle;
    const Status huge = bundle.add(QStringLiteral("w"), DType::F64, {qint64(1) << 62}, {});
    QVERIFY(!huge.ok());
    QVERIFY2(huge.error().contains(u"too large"), qPrintable(huge.error()));
    QVERIFY(!bundle.addZeroed(QStringLiteral("w"), DType::F64, {qint64(1) << 62}));
}

void TestTensorBundle::addCopiesFromItsOwnBuffer()
{
    // Copying a tensor of the bundle under a new name: the source lies in the buffer that growing moves.
    // Large enough that the allocator moves it rather than growing it in place.
    TensorBundle bundle;
    const qint64 count = 4 << 20;
    char* a = bundle.addZeroed(QStringLiteral("a"), DType::U8, {count});
    QVERIFY(a);
    for (qint64 i = 0; i < count; ++i)
        a[i] = char(i * 7 + i / 4099);
    const QByteArray expected = bundle.data(*bundle.find(u"a")).toByteArray();
    const Status added = bundle.add(QStringLiteral("b"), DType::U8, {count}, bundle.data(*bundle.find(u"a")));
    QVERIFY2(added.ok(), qPrintable(added.error()));
    QVERIFY(bundle.data(*bundle.find(u"b")) == expected);
    QVERIFY(bundle.data(*bundle.find(u"a")) == expected);
}

QTEST_GUILESS_MAIN(TestTensorBundle)
#include "TestTensorBundle.moc"
