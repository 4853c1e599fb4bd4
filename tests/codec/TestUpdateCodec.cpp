// The update encodings of compressed uploads: each one's error bound, error feedback, the decoder's refusals
// and the zstd stage's limits.
#include "codec/Half.h"
#include "codec/UpdateCodec.h"
#include "format/SafeTensors.h"

#include <QRandomGenerator>
#include <QTest>

#include <cmath>
#include <vector>

using namespace gleaner;

namespace {

TensorBundle randomWeights(quint32 seed, qint64 n = 1000, float spread = 1.0f)
{
    QRandomGenerator rng(seed);
    std::vector<float> w(static_cast<size_t>(n)), b(10);
    for (float& v : w)
        v = float(rng.generateDouble() * 2.0 - 1.0) * spread;
    for (float& v : b)
        v = float(rng.generateDouble());
    const std::vector<qint64> count{7};
    TensorBundle bundle;
    (void)bundle.addValues<float>(QStringLiteral("fc.weight"), DType::F32, {n / 10, 10}, w);
    (void)bundle.addValues<float>(QStringLiteral("fc.bias"), DType::F32, {10}, b);
    (void)bundle.addValues<qint64>(QStringLiteral("bn.num_batches_tracked"), DType::I64, {1}, count);
    return bundle;
}

// base + a small random step, as a subtask's training gives, with a counter moved on.
TensorBundle trainedFrom(const TensorBundle& base, quint32 seed, float step = 0.01f)
{
    TensorBundle trained = base;
    QRandomGenerator rng(seed);
    for (const TensorEntry& entry : trained.entries()) {
        if (entry.dtype == DType::F32) {
            for (float& v : trained.mutableValues<float>(entry))
                v += float(rng.generateDouble() * 2.0 - 1.0) * step;
        } else {
            trained.mutableValues<qint64>(entry)[0] += 3;
        }
    }
    trained.setMetadata(QStringLiteral("gleaner.samples"), QStringLiteral("100"));
    return trained;
}

UploadSpec spec(UploadSpec::Encoding encoding, double density = 0.01, bool errorFeedback = true)
{
    UploadSpec s;
    s.encoding = encoding;
    s.density = density;
    s.errorFeedback = errorFeedback;
    return s;
}

std::span<const float> valuesOf(const TensorBundle& bundle, const char* name)
{
    return bundle.values<float>(*bundle.find(QString::fromLatin1(name)));
}

// An encoded upload with one tensor replaced (or removed when `bytes` is empty and dtype is Bool).
TensorBundle replaced(const TensorBundle& upload, const QString& name, DType dtype,
                      const QList<qint64>& shape, QByteArrayView bytes, bool drop = false)
{
    TensorBundle out;
    for (const TensorEntry& entry : upload.entries()) {
        if (entry.name == name) {
            if (!drop)
                (void)out.add(name, dtype, shape, bytes);
            continue;
        }
        (void)out.add(entry.name, entry.dtype, entry.shape, upload.data(entry));
    }
    out.metadata() = upload.metadata();
    return out;
}

} // namespace

class TestUpdateCodec : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void halfConversions();
    void fp32IsTheTrainedWeights();
    void fp16StaysWithinItsBound();
    void int8StaysWithinHalfAStep();
    void topkSendsTheLargestValues();
    void errorFeedbackLosesNothing();
    void countersTravelWhole();
    void residualOfAnotherModelIsRefused();
    void decodeRefusesMalformedUploads_data();
    void decodeRefusesMalformedUploads();
    void unknownEncodingIsNamed();
    void zstdRoundTripAndLimits();
    void topkIsOverThirtyTwoTimesSmaller();
};

void TestUpdateCodec::halfConversions()
{
    QCOMPARE(Half::fromFloat(1.0f), quint16(0x3c00));
    QCOMPARE(Half::fromFloat(-2.0f), quint16(0xc000));
    QCOMPARE(Half::fromFloat(65504.0f), quint16(0x7bff));
    QCOMPARE(Half::fromFloat(65520.0f), quint16(0x7c00)); // rounds up past the largest half: infinity
    QCOMPARE(Half::fromFloat(0.1f), quint16(0x2e66));
    QCOMPARE(Half::fromFloat(std::ldexp(1.0f, -24)), quint16(0x0001)); // the smallest subnormal
    QCOMPARE(Half::fromFloat(std::ldexp(1.0f, -26)), quint16(0x0000));
    QCOMPARE(Half::fromFloat(1.0f + std::ldexp(1.0f, -11)), quint16(0x3c00)); // a tie goes to even
    QCOMPARE(Half::fromFloat(1.0f + 3 * std::ldexp(1.0f, -11)), quint16(0x3c02));
    QVERIFY(std::isnan(Half::toFloat(Half::fromFloat(std::nanf("")))));
    // Every half is a float, and back: exact for all 63,488 that are not NaN.
    for (quint32 h = 0; h < 0x10000; ++h) {
        const float f = Half::toFloat(quint16(h));
        if (std::isnan(f))
            continue;
        QCOMPARE(Half::fromFloat(f), quint16(h));
        if ((h & 0x7c00u) == 0) { // zero and the subnormals: (h & 0x3ff) * 2^-24, signed
            const float expected = std::ldexp(float(h & 0x3ffu), -24);
            QCOMPARE(f, (h & 0x8000u) ? -expected : expected);
        }
    }
}

void TestUpdateCodec::fp32IsTheTrainedWeights()
{
    const TensorBundle base = randomWeights(1);
    const TensorBundle trained = trainedFrom(base, 2);
    TensorBundle residual = base;
    auto encoded = UpdateCodec::encode(trained, base, UploadSpec{}, &residual);
    QVERIFY2(encoded.ok(), qPrintable(encoded ? QString() : encoded.error()));
    QVERIFY(!encoded->metadata().contains(UpdateCodec::kEncodingKey));
    QCOMPARE(encoded->buffer(), trained.buffer());
    QVERIFY(residual.isEmpty());
    auto decoded = UpdateCodec::decode(*encoded, base);
    QVERIFY(decoded.ok());
    QCOMPARE(decoded->buffer(), trained.buffer());
}

void TestUpdateCodec::fp16StaysWithinItsBound()
{
    const TensorBundle base = randomWeights(3);
    const TensorBundle trained = trainedFrom(base, 4);
    auto encoded = UpdateCodec::encode(trained, base, spec(UploadSpec::Encoding::Fp16), nullptr);
    QVERIFY(encoded.ok());
    QCOMPARE(encoded->find(QStringLiteral("fc.weight"))->dtype, DType::F16);
    QCOMPARE(encoded->metadata().value(UpdateCodec::kEncodingKey), QStringLiteral("fp16"));
    auto decoded = UpdateCodec::decode(*encoded, base);
    QVERIFY2(decoded.ok(), qPrintable(decoded ? QString() : decoded.error()));
    QCOMPARE(decoded->metadata().value(QStringLiteral("gleaner.samples")), QStringLiteral("100"));
    QVERIFY(!decoded->metadata().contains(UpdateCodec::kEncodingKey));
    const auto t = valuesOf(trained, "fc.weight"), b = valuesOf(base, "fc.weight"),
               d = valuesOf(*decoded, "fc.weight");
    for (size_t i = 0; i < t.size(); ++i) {
        // Half precision keeps 11 significant bits of the update; the sums in float add their own rounding.
        const float update = t[i] - b[i];
        const float bound =
            std::fabs(update) * std::ldexp(1.0f, -11) + 2 * std::ldexp(std::fabs(t[i]), -24) + 1e-12f;
        QVERIFY2(std::fabs(d[i] - t[i]) <= bound, qPrintable(QString::number(i)));
    }
}

void TestUpdateCodec::int8StaysWithinHalfAStep()
{
    const TensorBundle base = randomWeights(5, 2000);
    const TensorBundle trained = trainedFrom(base, 6);
    auto encoded = UpdateCodec::encode(trained, base, spec(UploadSpec::Encoding::Int8), nullptr);
    QVERIFY(encoded.ok());
    QCOMPARE(encoded->find(QStringLiteral("fc.weight#scale"))->shape, QList<qint64>{8}); // 2000 values / 256
    auto decoded = UpdateCodec::decode(*encoded, base);
    QVERIFY(decoded.ok());
    const auto t = valuesOf(trained, "fc.weight"), b = valuesOf(base, "fc.weight"),
               d = valuesOf(*decoded, "fc.weight");
    for (qint64 chunk = 0; chunk < 8; ++chunk) {
        float largest = 0;
        for (qint64 i = chunk * 256; i < std::min<qint64>(2000, (chunk + 1) * 256); ++i)
            largest = std::max(largest, std::fabs(t[i] - b[i]));
        const float step = largest / 127.0f;
        for (qint64 i = chunk * 256; i < std::min<qint64>(2000, (chunk + 1) * 256); ++i)
            QVERIFY2(std::fabs(d[i] - t[i]) <= step / 2 + 1e-6f, qPrintable(QString::number(i)));
    }
}

void TestUpdateCodec::topkSendsTheLargestValues()
{
    const TensorBundle base = randomWeights(7);
    const TensorBundle trained = trainedFrom(base, 8);
    auto encoded = UpdateCodec::encode(trained, base, spec(UploadSpec::Encoding::TopK, 0.05), nullptr);
    QVERIFY(encoded.ok());
    QCOMPARE(encoded->find(QStringLiteral("fc.weight#index"))->shape, QList<qint64>{50});
    QCOMPARE(encoded->find(QStringLiteral("fc.bias#index"))->shape,
             QList<qint64>{1}); // at least one value a tensor
    QVERIFY(!encoded->contains(QStringLiteral("fc.weight")));
    auto decoded = UpdateCodec::decode(*encoded, base);
    QVERIFY(decoded.ok());
    const auto t = valuesOf(trained, "fc.weight"), b = valuesOf(base, "fc.weight"),
               d = valuesOf(*decoded, "fc.weight");
    std::vector<float> magnitudes;
    for (size_t i = 0; i < t.size(); ++i)
        magnitudes.push_back(std::fabs(t[i] - b[i]));
    std::vector<float> sorted = magnitudes;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const float threshold = sorted[49];
    int changed = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        if (d[i] == b[i])
            continue;
        ++changed;
        QVERIFY2(magnitudes[i] >= threshold, qPrintable(QString::number(i)));
    }
    QCOMPARE(changed, 50);
}

void TestUpdateCodec::errorFeedbackLosesNothing()
{
    // What one upload leaves out, the next sends: after two subtasks the server has both updates but for the
    // last residual, which the agent still holds.
    for (auto encoding :
         {UploadSpec::Encoding::Fp16, UploadSpec::Encoding::Int8, UploadSpec::Encoding::TopK}) {
        const TensorBundle w0 = randomWeights(9);
        const TensorBundle w1 = trainedFrom(w0, 10);
        TensorBundle residual;
        auto first = UpdateCodec::encode(w1, w0, spec(encoding, 0.02), &residual);
        QVERIFY(first.ok());
        QCOMPARE(residual.size(), 2); // the F32 tensors
        const TensorBundle server1 = *UpdateCodec::decode(*first, w0);
        const TensorBundle w2 = trainedFrom(server1, 11);
        auto second = UpdateCodec::encode(w2, server1, spec(encoding, 0.02), &residual);
        QVERIFY(second.ok());
        const TensorBundle server2 = *UpdateCodec::decode(*second, server1);
        // server2 + residual == w2 + (w1 - server1): the updates, nothing lost.
        const auto s2 = valuesOf(server2, "fc.weight"), r = valuesOf(residual, "fc.weight");
        const auto t1 = valuesOf(w1, "fc.weight"), t2 = valuesOf(w2, "fc.weight"),
                   s1 = valuesOf(server1, "fc.weight");
        for (size_t i = 0; i < s2.size(); ++i)
            QVERIFY2(std::fabs((s2[i] + r[i]) - (t2[i] + t1[i] - s1[i])) < 1e-5f,
                     qPrintable(UploadSpec{encoding}.encodingName() + QString::number(i)));
        // Without error feedback the agent keeps nothing.
        auto plain = UpdateCodec::encode(w2, server1, spec(encoding, 0.02, false), &residual);
        QVERIFY(plain.ok());
        QVERIFY(residual.isEmpty());
    }
}

void TestUpdateCodec::countersTravelWhole()
{
    const TensorBundle base = randomWeights(12);
    const TensorBundle trained = trainedFrom(base, 13);
    for (auto encoding :
         {UploadSpec::Encoding::Fp16, UploadSpec::Encoding::Int8, UploadSpec::Encoding::TopK}) {
        auto decoded =
            UpdateCodec::decode(*UpdateCodec::encode(trained, base, spec(encoding), nullptr), base);
        QVERIFY(decoded.ok());
        const TensorEntry* counter = decoded->find(QStringLiteral("bn.num_batches_tracked"));
        QCOMPARE(decoded->values<qint64>(*counter)[0], 10);
    }
}

void TestUpdateCodec::residualOfAnotherModelIsRefused()
{
    const TensorBundle base = randomWeights(14);
    TensorBundle residual = randomWeights(15, 500); // another shape
    auto encoded =
        UpdateCodec::encode(trainedFrom(base, 16), base, spec(UploadSpec::Encoding::Int8), &residual);
    QVERIFY(!encoded.ok());
    QVERIFY2(encoded.error().contains(QStringLiteral("residual")), qPrintable(encoded.error()));
}

void TestUpdateCodec::decodeRefusesMalformedUploads_data()
{
    QTest::addColumn<TensorBundle>("upload");
    QTest::addColumn<QString>("message");
    const TensorBundle base = randomWeights(17);
    const TensorBundle trained = trainedFrom(base, 18);
    const TensorBundle int8 = *UpdateCodec::encode(trained, base, spec(UploadSpec::Encoding::Int8), nullptr);
    const TensorBundle topk =
        *UpdateCodec::encode(trained, base, spec(UploadSpec::Encoding::TopK, 0.01), nullptr);
    const QString scale = QStringLiteral("fc.weight#scale");
    const QString index = QStringLiteral("fc.weight#index");

    QTest::newRow("missing tensor") << replaced(int8, scale, DType::F32, {}, {}, true)
                                    << QStringLiteral("lacks tensor \"fc.weight#scale\"");
    TensorBundle extra = int8;
    (void)extra.addValues<float>(QStringLiteral("fc.extra"), DType::F32, {1}, std::vector<float>{1});
    QTest::newRow("extra tensor") << extra << QStringLiteral("\"fc.extra\", which the model");
    const std::vector<float> fourScales(4, 0.1f);
    QTest::newRow("wrong scale count")
        << replaced(int8, scale, DType::F32, {3},
                    QByteArrayView(reinterpret_cast<const char*>(fourScales.data()), 12))
        << QStringLiteral("asks for F32 [4]");
    std::vector<float> badScales(4, 0.1f);
    badScales[2] = std::nanf("");
    QTest::newRow("NaN scale") << replaced(
                                      int8, scale, DType::F32, {4},
                                      QByteArrayView(reinterpret_cast<const char*>(badScales.data()), 16))
                               << QStringLiteral("negative or not finite");
    badScales[2] = -1.0f;
    QTest::newRow("negative scale") << replaced(int8, scale, DType::F32, {4},
                                                QByteArrayView(
                                                    reinterpret_cast<const char*>(badScales.data()), 16))
                                    << QStringLiteral("negative or not finite");
    const std::vector<float> wrongType(1000, 0.0f);
    QTest::newRow("wrong dtype") << replaced(
                                        int8, QStringLiteral("fc.weight"), DType::F32, {100, 10},
                                        QByteArrayView(reinterpret_cast<const char*>(wrongType.data()), 4000))
                                 << QStringLiteral("asks for I8 [100, 10]");
    // 1% of fc.weight's 1,000 values: ten positions, as gaps.
    const auto positions = [&](std::vector<qint32> gaps) {
        return replaced(topk, index, DType::I32, {10},
                        QByteArrayView(reinterpret_cast<const char*>(gaps.data()), 40));
    };
    QTest::newRow("position beyond the tensor")
        << positions({990, 1, 1, 1, 1, 1, 1, 1, 1, 10}) << QStringLiteral("outside its tensor");
    QTest::newRow("position repeated")
        << positions({5, 1, 1, 0, 1, 1, 1, 1, 1, 1}) << QStringLiteral("out of order");
    QTest::newRow("negative position")
        << positions({-1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) << QStringLiteral("out of order");
    QTest::newRow("gap overflows") << positions({1, 2147483647, 2147483647, 1, 1, 1, 1, 1, 1, 1})
                                   << QStringLiteral("outside its tensor");
    const std::vector<qint32> many(1001, 1);
    QTest::newRow("more positions than values")
        << replaced(topk, index, DType::I32, {1001},
                    QByteArrayView(reinterpret_cast<const char*>(many.data()), 4004))
        << QStringLiteral("between 0 and 1000 positions");
    const std::vector<qint32> fewer{1};
    QTest::newRow("positions and values differ")
        << replaced(topk, index, DType::I32, {1},
                    QByteArrayView(reinterpret_cast<const char*>(fewer.data()), 4))
        << QStringLiteral("\"fc.weight#value\" is I8 [10] where the topk encoding asks for I8 [1]");
}

void TestUpdateCodec::decodeRefusesMalformedUploads()
{
    QFETCH(TensorBundle, upload);
    QFETCH(QString, message);
    auto decoded = UpdateCodec::decode(upload, randomWeights(17));
    QVERIFY(!decoded.ok());
    QVERIFY2(decoded.error().contains(message), qPrintable(decoded.error()));
}

void TestUpdateCodec::unknownEncodingIsNamed()
{
    const TensorBundle base = randomWeights(19);
    TensorBundle upload = trainedFrom(base, 20);
    upload.setMetadata(UpdateCodec::kEncodingKey, QStringLiteral("int3"));
    auto decoded = UpdateCodec::decode(upload, base);
    QVERIFY(!decoded.ok());
    QVERIFY2(decoded.error().contains(QStringLiteral("\"int3\"")), qPrintable(decoded.error()));
}

void TestUpdateCodec::zstdRoundTripAndLimits()
{
    const TensorBundle base = randomWeights(21);
    const TensorBundle encoded =
        *UpdateCodec::encode(trainedFrom(base, 22), base, spec(UploadSpec::Encoding::Int8), nullptr);
    const QByteArray packed = UpdateCodec::pack(encoded, true);
    QVERIFY(UpdateCodec::isZstd(packed));
    QVERIFY(!UpdateCodec::isZstd(UpdateCodec::pack(encoded, false)));
    auto back = UpdateCodec::unpack(packed, 1 << 20);
    QVERIFY2(back.ok(), qPrintable(back ? QString() : back.error()));
    QCOMPARE(SafeTensors::serialize(*back), SafeTensors::serialize(encoded));
    // Not more than the model's limit, however well it compresses.
    auto bomb = UpdateCodec::unpack(packed, 100);
    QVERIFY(!bomb.ok());
    QVERIFY2(bomb.error().contains(QStringLiteral("more than 100 bytes")), qPrintable(bomb.error()));
    auto cut = UpdateCodec::unpack(packed.left(packed.size() - 5), 1 << 20);
    QVERIFY(!cut.ok());
    QVERIFY2(cut.error().contains(QStringLiteral("zstd")), qPrintable(cut.error()));
    QByteArray damaged = packed;
    damaged[10] = char(damaged[10] ^ 0x5a);
    damaged[20] = char(damaged[20] ^ 0x5a);
    QVERIFY(!UpdateCodec::unpack(damaged, 1 << 20).ok());
    // Plain safetensors bytes pass straight through.
    QVERIFY(UpdateCodec::unpack(SafeTensors::serialize(encoded), 1 << 20).ok());
}

void TestUpdateCodec::topkIsOverThirtyTwoTimesSmaller()
{
    const TensorBundle base = randomWeights(23, 100000);
    const TensorBundle trained = trainedFrom(base, 24);
    const qint64 full = SafeTensors::serialize(trained).size();
    UploadSpec s = spec(UploadSpec::Encoding::TopK, 0.01);
    const qint64 packed = UpdateCodec::pack(*UpdateCodec::encode(trained, base, s, nullptr), true).size();
    QVERIFY2(packed * 32 < full, qPrintable(QStringLiteral("%1 of %2 bytes").arg(packed).arg(full)));
}

QTEST_GUILESS_MAIN(TestUpdateCodec)
#include "TestUpdateCodec.moc"
