#include "ml/WeightMath.h"

#include <QTest>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace gleaner;
using namespace gleaner::ml;

namespace {

TensorBundle weights(float w0, float w1, qint64 counter)
{
    TensorBundle b;
    const std::array<float, 2> w{w0, w1};
    (void)b.addValues<float>(QStringLiteral("layer.weight"), DType::F32, {2}, w);
    const std::array<qint64, 1> c{counter};
    (void)b.addValues<qint64>(QStringLiteral("bn.num_batches_tracked"), DType::I64, {}, c);
    return b;
}

} // namespace

class TestWeightMath : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void blendFollowsVcAsgd_data();
    void blendFollowsVcAsgd();
    void blendRefusesIncompatible_data();
    void blendRefusesIncompatible();
    void finiteCheck();
    void norms();
    void blendDoesNotTouchSharedCopies();
    void readsDoNotDetachSharedBuffers();
    void normsOfOtherFloatTypesAndLargeTensors();
    void f32DistanceMatchesAFloat64Sum();
};

void TestWeightMath::blendFollowsVcAsgd_data()
{
    QTest::addColumn<double>("alpha");
    QTest::addColumn<float>("expected0");
    QTest::addColumn<float>("expected1");
    // server (1, -2), client (3, 6): a*s + (1-a)*c
    QTest::newRow("alpha 0.95") << 0.95 << 1.1f << -1.6f;
    QTest::newRow("alpha 0.5 (epoch 1 of e/(e+1))") << 0.5 << 2.0f << 2.0f;
    QTest::newRow("alpha 1 keeps the server") << 1.0 << 1.0f << -2.0f;
    QTest::newRow("alpha 0 takes the client") << 0.0 << 3.0f << 6.0f;
}

void TestWeightMath::blendFollowsVcAsgd()
{
    QFETCH(double, alpha);
    QFETCH(float, expected0);
    QFETCH(float, expected1);
    TensorBundle server = weights(1, -2, 10);
    const TensorBundle client = weights(3, 6, 14);
    QVERIFY(WeightMath::blend(server, client, alpha).ok());
    const auto w = server.values<float>(*server.find(u"layer.weight"));
    QVERIFY(std::abs(w[0] - expected0) < 1e-6f);
    QVERIFY(std::abs(w[1] - expected1) < 1e-6f);
    // Counters are not averaged: the larger count is kept.
    QCOMPARE(server.values<qint64>(*server.find(u"bn.num_batches_tracked"))[0], qint64(14));
}

void TestWeightMath::blendRefusesIncompatible_data()
{
    QTest::addColumn<int>("kind");
    QTest::addColumn<QString>("message");
    QTest::newRow("missing tensor") << 0 << "tensor \"bn.num_batches_tracked\" is missing";
    QTest::newRow("other shape") << 1 << "has shape [3], expected [2]";
    QTest::newRow("other dtype") << 2 << "is F16, expected F32";
    QTest::newRow("alpha out of range") << 3 << "alpha must lie in [0, 1]";
}

void TestWeightMath::blendRefusesIncompatible()
{
    QFETCH(int, kind);
    QFETCH(QString, message);
    TensorBundle server = weights(1, 2, 0);
    TensorBundle client;
    double alpha = 0.5;
    if (kind == 3) {
        client = weights(1, 2, 0);
        alpha = 1.5;
    } else {
        QVERIFY(client.addZeroed(QStringLiteral("layer.weight"), kind == 2 ? DType::F16 : DType::F32,
                                 {kind == 1 ? 3 : 2}));
        if (kind != 0)
            QVERIFY(client.addZeroed(QStringLiteral("bn.num_batches_tracked"), DType::I64, {}));
        else
            QVERIFY(client.addZeroed(QStringLiteral("other"), DType::I64, {}));
    }
    const QByteArray before = server.buffer();
    const Status status = WeightMath::blend(server, client, alpha);
    QVERIFY(!status.ok());
    QVERIFY2(status.error().contains(message), qPrintable(status.error()));
    QCOMPARE(server.buffer(), before);
}

void TestWeightMath::finiteCheck()
{
    TensorBundle good = weights(1, 2, 0);
    QVERIFY(WeightMath::allFinite(good));
    TensorBundle bad = weights(1, std::numeric_limits<float>::quiet_NaN(), 0);
    QString where;
    QVERIFY(!WeightMath::allFinite(bad, &where));
    QCOMPARE(where, QStringLiteral("layer.weight"));
    TensorBundle inf = weights(std::numeric_limits<float>::infinity(), 0, 0);
    QVERIFY(!WeightMath::allFinite(inf));
}

void TestWeightMath::norms()
{
    QCOMPARE(WeightMath::l2Norm(weights(3, 4, 100)), 5.0); // counters are not weights
    auto distance = WeightMath::l2Distance(weights(1, 1, 0), weights(4, 5, 0));
    QVERIFY(distance.ok());
    QCOMPARE(*distance, 5.0);
}

void TestWeightMath::blendDoesNotTouchSharedCopies()
{
    // The coordinator hands out the server weights while it folds updates in: a copy taken before must not
    // move.
    TensorBundle server = weights(1, 1, 0);
    const TensorBundle snapshot = server;
    QVERIFY(WeightMath::blend(server, weights(3, 3, 0), 0.5).ok());
    QCOMPARE(snapshot.values<float>(*snapshot.find(u"layer.weight"))[0], 1.0f);
    QCOMPARE(server.values<float>(*server.find(u"layer.weight"))[0], 2.0f);
}

void TestWeightMath::readsDoNotDetachSharedBuffers()
{
    // The coordinator serves the weights to other threads while it measures them: a read must not copy (and
    // so race on) the shared buffer.
    TensorBundle a = weights(3, 4, 100);
    const TensorBundle b = a;
    // As addresses: QCOMPARE on two const char* would compare them as C strings.
    const auto address = [](const TensorBundle& bundle) { return quintptr(bundle.buffer().constData()); };
    const quintptr shared = address(a);
    QCOMPARE(address(b), shared);
    QCOMPARE(WeightMath::l2Norm(a), 5.0);
    QCOMPARE(WeightMath::l2Norm(b), 5.0);
    QCOMPARE(*WeightMath::l2Distance(a, b), 0.0);
    QVERIFY(WeightMath::allFinite(a));
    QCOMPARE(address(a), shared);
    QCOMPARE(address(b), shared);

    // Blending reads the client without detaching it; only the server gets its own buffer.
    TensorBundle server = weights(1, 1, 0);
    const TensorBundle client = a;
    QVERIFY(WeightMath::blend(server, client, 0.5).ok());
    QCOMPARE(address(client), shared);
    QCOMPARE(address(a), shared);
}

void TestWeightMath::normsOfOtherFloatTypesAndLargeTensors()
{
    // F64 and F16 go through libtorch (chunked, in float64); a tensor longer than one chunk is summed whole.
    TensorBundle f64;
    const std::array<double, 2> d{6, 8};
    QVERIFY(f64.addValues<double>(QStringLiteral("w"), DType::F64, {2}, d).ok());
    QCOMPARE(WeightMath::l2Norm(f64), 10.0);
    const QByteArray before = f64.buffer();
    QCOMPARE(*WeightMath::l2Distance(f64, f64), 0.0);
    QCOMPARE(f64.buffer(), before); // the F64 views are never written through

    TensorBundle large;
    const qint64 count = 200000; // about three chunks
    std::vector<float> ones(size_t(count), 1.0f);
    QVERIFY(large.addValues<float>(QStringLiteral("w"), DType::F32, {count}, ones).ok());
    QCOMPARE(WeightMath::l2Norm(large), std::sqrt(double(count)));
    TensorBundle zeros;
    QVERIFY(zeros.addZeroed(QStringLiteral("w"), DType::F32, {count}));
    QCOMPARE(*WeightMath::l2Distance(large, zeros), std::sqrt(double(count)));
}

void TestWeightMath::f32DistanceMatchesAFloat64Sum()
{
    // The F32 path reads the bytes directly: random values, a length that leaves a tail, against a plain
    // float64 sum; and a NaN or an infinity on either side makes the distance non-finite.
    const qint64 count = 10'007;
    std::vector<float> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
    std::mt19937 rng(7);
    std::normal_distribution<float> value(0.0f, 3.0f);
    double expected = 0.0, norm = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = value(rng);
        y[i] = value(rng);
        expected += (double(x[i]) - double(y[i])) * (double(x[i]) - double(y[i]));
        norm += double(x[i]) * double(x[i]);
    }
    TensorBundle a, b;
    QVERIFY(a.addValues<float>(QStringLiteral("w"), DType::F32, {count}, x).ok());
    QVERIFY(b.addValues<float>(QStringLiteral("w"), DType::F32, {count}, y).ok());
    QVERIFY(std::abs(*WeightMath::l2Distance(a, b) - std::sqrt(expected)) <= 1e-12 * std::sqrt(expected));
    QVERIFY(std::abs(WeightMath::l2Norm(a) - std::sqrt(norm)) <= 1e-12 * std::sqrt(norm));
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        TensorBundle c = b;
        c.mutableValues<float>(c.entries().first())[count - 1] = bad; // in the tail
        QVERIFY(!std::isfinite(*WeightMath::l2Distance(a, c)));
        QVERIFY(!std::isfinite(*WeightMath::l2Distance(c, a)));
    }
}

QTEST_GUILESS_MAIN(TestWeightMath)
#include "TestWeightMath.moc"
