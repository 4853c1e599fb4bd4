// Random crops and flips of training mini-batches: the arithmetic on small hand-made images, the draws pinned
// (every agent must augment a subtask alike), their seeding, and training with augmentation on.
#include "ml/Augmentation.h"
#include "ml/Checkpoint.h"
#include "ml/Model.h"
#include "ml/Trainer.h"

#include "SyntheticData.h"

#include <QTest>

#include <numeric>
#include <set>

using namespace gleaner;
using namespace gleaner::ml;

namespace {

constexpr qint64 kH = 4;
constexpr qint64 kW = 5;

AugmentSpec augment(int cropPadding, bool flip)
{
    AugmentSpec spec;
    spec.cropPadding = cropPadding;
    spec.flip = flip;
    return spec;
}

// `count` U8 images [1, 4, 5]; image i holds 1 + i * 20 ... 20 + i * 20 (mod 256, never 0 for i < 12) row by
// row, so every value that is not padding is non-zero and tells where it came from. Stored as `shape` per
// sample.
Dataset images(qint64 count, const QList<qint64>& shape = {1, kH, kW})
{
    QByteArray pixels(count * kH * kW, '\0');
    for (qint64 i = 0; i < pixels.size(); ++i)
        pixels[i] = char(quint8(1 + i % 240));
    std::vector<qint64> labels(static_cast<size_t>(count));
    std::iota(labels.begin(), labels.end(), 0);
    return *Dataset::fromBytes(pixels, shape, labels, QStringLiteral("images"));
}

// The same values as F32, shifted below zero, so padding (0.0) is told apart from every sample value.
Dataset floatImages(qint64 count)
{
    std::vector<float> values(size_t(count * kH * kW));
    for (size_t i = 0; i < values.size(); ++i)
        values[i] = -1.0f - float(i % 240);
    std::vector<qint64> labels(size_t(count), 0);
    TensorBundle bundle;
    if (!bundle.addValues<float>(QStringLiteral("x"), DType::F32, {count, 1, kH, kW}, values) ||
        !bundle.addValues<qint64>(QStringLiteral("y"), DType::I64, {count}, labels))
        return {};
    return *Dataset::fromBundle(std::move(bundle), QStringLiteral("float images"));
}

// Sample i of a dataset as a [H][W] grid of doubles.
using Grid = std::vector<std::vector<double>>;
Grid grid(const Dataset& data, qint64 i)
{
    Grid out(static_cast<size_t>(kH), std::vector<double>(static_cast<size_t>(kW)));
    const qint64 base = i * kH * kW;
    for (qint64 y = 0; y < kH; ++y)
        for (qint64 x = 0; x < kW; ++x) {
            const qint64 at = base + y * kW + x;
            out[size_t(y)][size_t(x)] = data.sampleType() == DType::U8
                                            ? double(data.bundle().values<quint8>(data.x())[size_t(at)])
                                            : double(data.bundle().values<float>(data.x())[size_t(at)]);
        }
    return out;
}

// What a crop at (top, left) of the image padded by p, then an optional mirror, makes of `in`: computed
// here pixel by pixel, independently of the library's tensor code.
Grid expected(const Grid& in, int p, const Augmentation::Draw& draw)
{
    Grid out(static_cast<size_t>(kH), std::vector<double>(static_cast<size_t>(kW), 0.0));
    for (qint64 y = 0; y < kH; ++y)
        for (qint64 x = 0; x < kW; ++x) {
            const qint64 sy = y + draw.top - p;
            const qint64 sx = x + draw.left - p;
            const qint64 ox = draw.flip ? kW - 1 - x : x;
            out[size_t(y)][size_t(ox)] =
                sy >= 0 && sy < kH && sx >= 0 && sx < kW ? in[size_t(sy)][size_t(sx)] : 0.0;
        }
    return out;
}

QByteArray samplesOf(const Dataset& data)
{
    return data.bundle().data(data.x()).toByteArray();
}

TrainRequest smallRequest(Architecture arch)
{
    TrainRequest r;
    r.model.arch = arch;
    r.model.inputShape = {1, 8, 8};
    r.model.numClasses = 4;
    r.model.hidden = {16};
    r.model.channels = {4, 8};
    r.optimizer.kind = OptimizerSpec::Kind::Adam;
    r.optimizer.lr = 0.01;
    r.localEpochs = 2;
    r.batchSize = 16;
    r.seed = 11;
    r.threads = 1;
    return r;
}

} // namespace

class TestAugmentation : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void drawsArePinned();
    void drawsFollowSeedEpochAndBatch();
    void everyWindowAndBothSidesOccur();
    void cropIsAShiftedCopyWithZeros();
    void cropAndFlipMatchTheReference_data();
    void cropAndFlipMatchTheReference();
    void flatSamplesTakeTheInputShape();
    void offLeavesSamplesAlone();
    void refusesWhatDoesNotFit();
    void trainingWithAugmentationIsRepeatableAndDiffers();
    void requestHashNamesAugmentationOnlyWhenOn();
};

// The draws are part of what every agent computes for a subtask: a change here changes every augmented job's
// results, and agents of two versions would train one subtask differently. These values were computed by an
// independent implementation of the hash.
void TestAugmentation::drawsArePinned()
{
    using D = Augmentation::Draw;
    const std::vector<D> pinned{{false, 7, 6}, {false, 1, 2}, {false, 5, 1},
                                {true, 6, 8},  {true, 8, 6},  {false, 1, 8}};
    QVERIFY(Augmentation::draws(augment(4, true), 11, 0, 0, 6) == pinned);
    const std::vector<D> small{{false, 4, 2}, {false, 4, 3}, {false, 4, 0}, {false, 3, 0}};
    QVERIFY(Augmentation::draws(augment(2, false), 7, 1, 3, 4) == small);
    // Turning the flip on does not move the windows.
    const std::vector<D> flipped{{false, 4, 2}, {false, 4, 3}, {true, 4, 0}, {true, 3, 0}};
    QVERIFY(Augmentation::draws(augment(2, true), 7, 1, 3, 4) == flipped);
}

void TestAugmentation::drawsFollowSeedEpochAndBatch()
{
    const AugmentSpec spec = augment(4, true);
    const auto base = Augmentation::draws(spec, 11, 2, 5, 32);
    QVERIFY(Augmentation::draws(spec, 11, 2, 5, 32) == base);
    QVERIFY(Augmentation::draws(spec, 12, 2, 5, 32) != base); // another subtask
    QVERIFY(Augmentation::draws(spec, 11, 3, 5, 32) != base); // another local epoch
    QVERIFY(Augmentation::draws(spec, 11, 2, 6, 32) != base); // another mini-batch
    QVERIFY(Augmentation::draws(spec, 11, 5, 2, 32) != base); // epoch and batch are not interchangeable
    // A shorter last mini-batch draws a prefix of the same sequence.
    const auto head = Augmentation::draws(spec, 11, 2, 5, 7);
    QVERIFY(std::equal(head.begin(), head.end(), base.begin()));
}

void TestAugmentation::everyWindowAndBothSidesOccur()
{
    const int p = 3;
    std::set<int> tops, lefts;
    int flips = 0;
    const auto draws = Augmentation::draws(augment(p, true), 5, 0, 0, 400);
    for (const auto& d : draws) {
        QVERIFY(d.top >= 0 && d.top <= 2 * p);
        QVERIFY(d.left >= 0 && d.left <= 2 * p);
        tops.insert(d.top);
        lefts.insert(d.left);
        flips += d.flip ? 1 : 0;
    }
    QCOMPARE(int(tops.size()), 2 * p + 1);
    QCOMPARE(int(lefts.size()), 2 * p + 1);
    QVERIFY2(flips > 150 && flips < 250, qPrintable(QString::number(flips))); // about half
    for (const auto& d : Augmentation::draws(augment(0, false), 5, 0, 0, 50))
        QVERIFY(d == (Augmentation::Draw{false, 0, 0}));
}

// Written out by hand for one seed, from the pinned draws above: seed 7, local epoch 1, mini-batch 3,
// padding 2.
void TestAugmentation::cropIsAShiftedCopyWithZeros()
{
    const Dataset batch = images(4);
    auto cropped = Augmentation::apply(augment(2, false), {1, kH, kW}, batch, 7, 1, 3);
    QVERIFY2(cropped.ok(), qPrintable(cropped.error()));
    // Sample 0, window at (4, 2): two rows up, no column shift; the last two rows are padding.
    const Grid up{{11, 12, 13, 14, 15}, {16, 17, 18, 19, 20}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
    QCOMPARE(grid(*cropped, 0), up);
    // Sample 3 (values 61..80), window at (3, 0): one row up, two columns right.
    const Grid upRight{{0, 0, 66, 67, 68}, {0, 0, 71, 72, 73}, {0, 0, 76, 77, 78}, {0, 0, 0, 0, 0}};
    QCOMPARE(grid(*cropped, 3), upRight);
    // With the flip on, sample 2 (41..60, window (4, 0)) is that crop mirrored; sample 0 is not flipped.
    auto both = Augmentation::apply(augment(2, true), {1, kH, kW}, batch, 7, 1, 3);
    QVERIFY2(both.ok(), qPrintable(both.error()));
    const Grid mirrored{{53, 52, 51, 0, 0}, {58, 57, 56, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
    QCOMPARE(grid(*both, 2), mirrored);
    QCOMPARE(grid(*both, 0), up);
    // Labels travel with their samples unchanged.
    QCOMPARE(both->label(3), qint64(3));
}

void TestAugmentation::cropAndFlipMatchTheReference_data()
{
    QTest::addColumn<int>("padding");
    QTest::addColumn<bool>("flip");
    QTest::addColumn<bool>("floats");
    QTest::newRow("flip alone reverses W") << 0 << true << false;
    QTest::newRow("crop 1") << 1 << false << false;
    QTest::newRow("crop 2 and flip") << 2 << true << false;
    QTest::newRow("crop 2 and flip, F32 samples pad with 0.0") << 2 << true << true;
}

void TestAugmentation::cropAndFlipMatchTheReference()
{
    QFETCH(int, padding);
    QFETCH(bool, flip);
    QFETCH(bool, floats);
    const qint64 count = 12;
    const Dataset batch = floats ? floatImages(count) : images(count);
    QCOMPARE(batch.size(), count);
    const AugmentSpec spec = augment(padding, flip);
    auto out = Augmentation::apply(spec, {1, kH, kW}, batch, 21, 0, 2);
    QVERIFY2(out.ok(), qPrintable(out.error()));
    QCOMPARE(out->sampleType(), batch.sampleType());
    QCOMPARE(out->sampleShape(), batch.sampleShape());
    const auto draws = Augmentation::draws(spec, 21, 0, 2, count);
    int flipped = 0, moved = 0;
    for (qint64 i = 0; i < count; ++i) {
        const auto& d = draws[size_t(i)];
        QCOMPARE(grid(*out, i), expected(grid(batch, i), padding, d));
        flipped += d.flip ? 1 : 0;
        moved += d.top != padding || d.left != padding ? 1 : 0;
    }
    // The batch shows both kinds of sample, or the comparison would prove less than it claims.
    if (flip)
        QVERIFY(flipped > 0 && flipped < count);
    if (padding > 0)
        QVERIFY(moved > 0);
}

void TestAugmentation::flatSamplesTakeTheInputShape()
{
    // An mlp's shard may store its image samples flat; they are augmented as the model's [C, H, W].
    const Dataset shaped = images(8);
    const Dataset flat = images(8, {kH * kW});
    auto a = Augmentation::apply(augment(1, true), {1, kH, kW}, shaped, 3, 0, 0);
    auto b = Augmentation::apply(augment(1, true), {1, kH, kW}, flat, 3, 0, 0);
    QVERIFY2(a.ok() && b.ok(), qPrintable(a.ok() ? b.error() : a.error()));
    QCOMPARE(b->sampleShape(), (QList<qint64>{kH * kW}));
    QCOMPARE(samplesOf(*b), samplesOf(*a));
    QVERIFY(samplesOf(*a) != samplesOf(shaped));
}

void TestAugmentation::offLeavesSamplesAlone()
{
    const Dataset batch = images(6);
    auto out = Augmentation::apply(AugmentSpec{}, {kH * kW}, images(6, {kH * kW}), 1, 0, 0);
    QVERIFY2(out.ok(), qPrintable(out.error()));
    QCOMPARE(samplesOf(*out), samplesOf(batch));
}

void TestAugmentation::refusesWhatDoesNotFit()
{
    auto flat = Augmentation::apply(augment(0, true), {kH * kW}, images(2, {kH * kW}), 1, 0, 0);
    QVERIFY(!flat.ok());
    QVERIFY2(flat.error().contains(u"augmentation is for images"), qPrintable(flat.error()));
    auto wide = Augmentation::apply(augment(3, false), {1, kH, kW}, images(2), 1, 0, 0);
    QVERIFY(!wide.ok());
    QVERIFY2(
        wide.error().contains(u"augment.crop_padding: 3 is more than half the image (input_shape [1, 4, 5] "
                              u"allows at most 2)"),
        qPrintable(wide.error()));
    auto device =
        Augmentation::apply(augment(1, false), {1, kH, kW}, images(2), 1, 0, 0, QStringLiteral("tpu"));
    QVERIFY(!device.ok());
}

// The Trainer draws per (seed, local epoch, mini-batch): the same request trains to the same bits, and the
// augmentation does change what it learns. (Resuming exactly is TestTrainer's resumeEqualsUninterruptedRun.)
void TestAugmentation::trainingWithAugmentationIsRepeatableAndDiffers()
{
    const Dataset shard = test::syntheticSet(128, 3);
    TrainRequest plain = smallRequest(Architecture::Cnn);
    const TensorBundle start = Model::create(plain.model, 5)->weights();
    TrainRequest augmented = plain;
    augmented.augment = augment(2, true);
    auto a = Trainer::train(augmented, start, shard);
    auto b = Trainer::train(augmented, start, shard);
    auto c = Trainer::train(plain, start, shard);
    TrainRequest flipOnly = plain;
    flipOnly.augment = augment(0, true);
    auto d = Trainer::train(flipOnly, start, shard);
    for (const auto* outcome : {&a, &b, &c, &d})
        QVERIFY2(outcome->ok(), qPrintable(outcome->error()));
    QVERIFY(a->weights.buffer() == b->weights.buffer());
    QCOMPARE(a->meanLoss, b->meanLoss);
    QVERIFY(a->weights.buffer() != c->weights.buffer());
    QVERIFY(d->weights.buffer() != c->weights.buffer());
    QVERIFY(d->weights.buffer() != a->weights.buffer());
    QCOMPARE(a->samples, c->samples); // augmentation replaces samples, never adds any
}

// The coordinator and every agent compute this hash alike (a handed-back checkpoint is matched by it). With
// augmentation off it is the hash of before augmentation existed, so checkpoints written then stay valid.
void TestAugmentation::requestHashNamesAugmentationOnlyWhenOn()
{
    const QJsonObject model{{QStringLiteral("arch"), QStringLiteral("mlp")}};
    const QJsonObject optimizer{{QStringLiteral("name"), QStringLiteral("sgd")}};
    // SHA-256 of
    // {"batch_size":32,"local_epochs":1,"model":{"arch":"mlp"},"optimizer":{"name":"sgd"},"seed":"7"}
    QCOMPARE(RunIdentity::requestHash(model, optimizer, 1, 32, 7, 0, AugmentSpec{}),
             QStringLiteral("852781af84ee379164923506390d821d7e7ce65d736ca65217291eb68f13bf89"));
    // ... and with "augment":{"crop_padding":4,"flip":true} first.
    QCOMPARE(RunIdentity::requestHash(model, optimizer, 1, 32, 7, 0, augment(4, true)),
             QStringLiteral("812a11ac87eab24cb201c0e052d8058ab0af33aeeeafb694d8f566563b2dcab8"));
    QVERIFY(RunIdentity::requestHash(model, optimizer, 1, 32, 7, 0, augment(0, true)) !=
            RunIdentity::requestHash(model, optimizer, 1, 32, 7, 0, augment(4, true)));
}

QTEST_GUILESS_MAIN(TestAugmentation)
#include "TestAugmentation.moc"
