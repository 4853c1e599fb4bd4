#include "format/SafeTensors.h"
#include "ml/data/Cifar10Reader.h"
#include "ml/data/DatasetLoader.h"
#include "ml/data/IdxReader.h"
#include "ml/data/ShardWriter.h"

#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QTest>

#include <limits>
#include <set>
#include <zlib.h>

using namespace gleaner;
using namespace gleaner::ml;

namespace {

QByteArray idxBytes(quint8 type, const QList<quint32>& dims, qint64 dataBytes, quint8 fill = 7)
{
    QByteArray b;
    b.append(char(0)).append(char(0)).append(char(type)).append(char(dims.size()));
    for (quint32 d : dims)
        b.append(char(d >> 24)).append(char(d >> 16)).append(char(d >> 8)).append(char(d));
    b.append(QByteArray(qsizetype(dataBytes), char(fill)));
    return b;
}

void writeFile(const QString& path, const QByteArray& bytes, bool gzip = false)
{
    if (gzip) {
        gzFile f = gzopen(QFile::encodeName(path).constData(), "wb");
        QVERIFY(f);
        QCOMPARE(gzwrite(f, bytes.constData(), unsigned(bytes.size())), int(bytes.size()));
        gzclose(f);
        return;
    }
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
}

// Labels 0..classes-1 in a skewed pattern, so balancing has something to do.
Dataset labelled(qint64 count, int classes)
{
    std::vector<qint64> labels(static_cast<size_t>(count));
    QByteArray pixels(count * 4, '\0');
    for (qint64 i = 0; i < count; ++i) {
        labels[size_t(i)] = (i * i + i / 3) % classes;
        pixels[i * 4] = char(i % 251); // a fingerprint of the sample, to follow it into its shard
        pixels[i * 4 + 1] = char(i / 251);
    }
    return *Dataset::fromBytes(pixels, {1, 2, 2}, labels, QStringLiteral("test"));
}

} // namespace

class TestDataset : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void idxReadsPlainAndGzip_data();
    void idxReadsPlainAndGzip();
    void idxRefusesMalformed_data();
    void idxRefusesMalformed();
    void idxPairMustAgree();
    void cifar10Batches();
    void datasetLayoutIsChecked_data();
    void datasetLayoutIsChecked();
    void largestLabelIsAccepted();
    void shardPlanIsBalancedAndDeterministic();
    void shardPlanDoesNotAllocateByLabelValue();
    void shardFilesRoundTrip();
    void shardWriteRefuses_data();
    void shardWriteRefuses();
    void fashionMnistFromDebianPackage();
};

void TestDataset::idxReadsPlainAndGzip_data()
{
    QTest::addColumn<bool>("gzip");
    QTest::newRow("plain") << false;
    QTest::newRow("gzip") << true;
}

void TestDataset::idxReadsPlainAndGzip()
{
    QFETCH(bool, gzip);
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("images.idx"));
    writeFile(path, idxBytes(0x08, {3, 4, 5}, 60, 9), gzip);
    auto array = Idx::read(path);
    QVERIFY2(array.ok(), qPrintable(array.error()));
    QCOMPARE(array->shape, (QList<qint64>{3, 4, 5}));
    QCOMPARE(array->data, QByteArray(60, char(9)));
}

void TestDataset::idxRefusesMalformed_data()
{
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<bool>("gzip");
    QTest::addColumn<QString>("message");
    QTest::newRow("too short") << QByteArray("\0\0", 2) << false << "too short for an IDX header";
    QTest::newRow("bad magic") << QByteArray("\1\0\x08\1\0\0\0\1x", 9) << false << "not an IDX file";
    QTest::newRow("float type") << idxBytes(0x0D, {2}, 8) << false << "element type 0x0d is not supported";
    QTest::newRow("zero dims") << idxBytes(0x08, {}, 0) << false << "has 0 dimensions";
    QTest::newRow("truncated data") << idxBytes(0x08, {10, 10}, 99) << false
                                    << "needs 100 bytes of data, the file has 99 (truncated?)";
    QTest::newRow("trailing data") << idxBytes(0x08, {10}, 11) << false
                                   << "needs 10 bytes of data, the file has 11";
    QTest::newRow("truncated header") << idxBytes(0x08, {10}, 0).left(6) << false << "truncated IDX header";
    QByteArray brokenGzip = QByteArray::fromHex("1f8b0800000000000003");
    QTest::newRow("truncated gzip") << brokenGzip << false << "gzip:";
    QTest::newRow("huge shape") << idxBytes(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, 0) << false
                                << "is too large";
}

void TestDataset::idxRefusesMalformed()
{
    QFETCH(QByteArray, bytes);
    QFETCH(bool, gzip);
    QFETCH(QString, message);
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("bad.idx"));
    writeFile(path, bytes, gzip);
    auto array = Idx::read(path);
    QVERIFY(!array.ok());
    QVERIFY2(array.error().contains(message), qPrintable(array.error()));
    QVERIFY2(array.error().contains(path), qPrintable(array.error()));
}

void TestDataset::idxPairMustAgree()
{
    const auto dir = test::scratchDir();
    const QString images = dir->filePath(QStringLiteral("i"));
    const QString labels = dir->filePath(QStringLiteral("l"));
    writeFile(images, idxBytes(0x08, {4, 2, 2}, 16));
    writeFile(labels, idxBytes(0x08, {3}, 3, 1));
    auto pair = Idx::importPair(images, labels);
    QVERIFY(!pair.ok());
    QVERIFY2(pair.error().contains(u"holds 4 images but"), qPrintable(pair.error()));

    writeFile(labels, idxBytes(0x08, {4}, 4, 2));
    pair = Idx::importPair(images, labels);
    QVERIFY2(pair.ok(), qPrintable(pair.error()));
    QCOMPARE(pair->sampleShape(), (QList<qint64>{1, 2, 2}));
    QCOMPARE(pair->label(3), 2);
}

void TestDataset::cifar10Batches()
{
    const auto dir = test::scratchDir();
    for (int batch = 1; batch <= 6; ++batch) {
        QByteArray bytes;
        for (int r = 0; r < 3; ++r) {
            bytes.append(char((batch + r) % 10));
            bytes.append(QByteArray(3072, char(batch)));
        }
        const QString name =
            batch == 6 ? QStringLiteral("test_batch.bin") : QStringLiteral("data_batch_%1.bin").arg(batch);
        writeFile(dir->filePath(name), bytes);
    }
    auto split = Cifar10::importDirectory(dir->path());
    QVERIFY2(split.ok(), qPrintable(split.error()));
    QCOMPARE(split->train.size(), 15);
    QCOMPARE(split->test.size(), 3);
    QCOMPARE(split->train.sampleShape(), (QList<qint64>{3, 32, 32}));
    QCOMPARE(split->train.label(4), 3); // batch 2, record 1
    QCOMPARE(quint8(split->train.bundle().data(split->train.x())[qsizetype(4 * 3072)]), quint8(2));

    writeFile(dir->filePath(QStringLiteral("data_batch_3.bin")), QByteArray(3073 * 2 - 1, 0));
    auto broken = Cifar10::importDirectory(dir->path());
    QVERIFY(!broken.ok());
    QVERIFY2(broken.error().contains(u"data_batch_3.bin: 6145 bytes is not a whole number"),
             qPrintable(broken.error()));

    QVERIFY(!Cifar10::importDirectory(dir->filePath(QStringLiteral("nope"))).ok());
}

void TestDataset::datasetLayoutIsChecked_data()
{
    QTest::addColumn<int>("kind");
    QTest::addColumn<QString>("message");
    QTest::newRow("no y") << 0 << "needs tensors \"x\" (samples) and \"y\" (labels)";
    QTest::newRow("x is I32") << 1 << "\"x\" must be U8 or F32, not I32";
    QTest::newRow("label count differs") << 2 << "\"y\" must have shape [4] to label every sample, got [3]";
    QTest::newRow("float labels") << 3 << "\"y\" must hold integer class labels, not F32";
    QTest::newRow("negative label") << 4 << "label -1 of sample 0 is negative";
    QTest::newRow("label 100000") << 5
                                  << "label 100000 of sample 1 is outside 0..99999; class labels must be "
                                     "0..num_classes-1";
    QTest::newRow("label 2^62") << 6 << "label 4611686018427387904 of sample 1 is outside 0..99999";
}

void TestDataset::datasetLayoutIsChecked()
{
    QFETCH(int, kind);
    QFETCH(QString, message);
    TensorBundle b;
    QVERIFY(b.addZeroed(QStringLiteral("x"), kind == 1 ? DType::I32 : DType::U8, {4, 2}));
    if (kind == 2)
        QVERIFY(b.addZeroed(QStringLiteral("y"), DType::I64, {3}));
    else if (kind == 3)
        QVERIFY(b.addZeroed(QStringLiteral("y"), DType::F32, {4}));
    else if (kind != 0) {
        qint64* y = reinterpret_cast<qint64*>(b.addZeroed(QStringLiteral("y"), DType::I64, {4}));
        if (kind == 4)
            y[0] = -1;
        if (kind == 5)
            y[1] = 100000;
        if (kind == 6)
            y[1] = qint64(1) << 62;
    }
    auto dataset = Dataset::fromBundle(b, QStringLiteral("shard.safetensors"));
    QVERIFY(!dataset.ok());
    QVERIFY2(dataset.error().startsWith(u"shard.safetensors: "), qPrintable(dataset.error()));
    QVERIFY2(dataset.error().contains(message), qPrintable(dataset.error()));
}

void TestDataset::largestLabelIsAccepted()
{
    auto dataset = Dataset::fromBytes(QByteArray(8, '\0'), {1, 2, 2}, {99999, 3}, QStringLiteral("edge"));
    QVERIFY2(dataset.ok(), qPrintable(dataset.error()));
    QCOMPARE(dataset->labelBound(), qint64(100000));
    const auto counts = dataset->classCounts(4);
    QCOMPARE(counts, (std::vector<qint64>{0, 0, 0, 1})); // 99999 lies outside 0..3 and is not counted
}

void TestDataset::shardPlanIsBalancedAndDeterministic()
{
    const int classes = 7;
    const Dataset data = labelled(1003, classes);
    const auto plan = Shards::plan(data, 10, 42);
    QCOMPARE(plan.size(), size_t(10));
    QCOMPARE(Shards::plan(data, 10, 42), plan);
    QVERIFY(Shards::plan(data, 10, 43) != plan);

    std::set<qint64> seen;
    size_t smallest = plan[0].size(), largest = plan[0].size();
    const auto total = data.classCounts(classes);
    for (const auto& shard : plan) {
        smallest = std::min(smallest, shard.size());
        largest = std::max(largest, shard.size());
        std::vector<qint64> counts(classes, 0);
        for (qint64 i : shard) {
            QVERIFY(seen.insert(i).second); // every sample in exactly one shard
            ++counts[size_t(data.label(i))];
        }
        for (int c = 0; c < classes; ++c) {
            // each class is spread evenly: a shard holds floor or ceil of its share
            QVERIFY(counts[size_t(c)] >= total[size_t(c)] / 10);
            QVERIFY(counts[size_t(c)] <= (total[size_t(c)] + 9) / 10);
        }
    }
    QCOMPARE(seen.size(), size_t(1003));
    QVERIFY(largest - smallest <= 1);
}

void TestDataset::shardPlanDoesNotAllocateByLabelValue()
{
    // bundle() is writable, so a label can be changed after the checks: planning must still group by the
    // classes present, not allocate one list per possible label value, and labelBound() must not overflow.
    Dataset data = labelled(40, 3);
    TensorBundle& bundle = data.bundle();
    auto labels = bundle.mutableValues<qint64>(*bundle.find(u"y"));
    labels[0] = qint64(1) << 40;
    labels[1] = std::numeric_limits<qint64>::max();
    QCOMPARE(data.labelBound(), std::numeric_limits<qint64>::max());
    const auto plan = Shards::plan(data, 4, 1);
    size_t total = 0;
    for (const auto& shard : plan)
        total += shard.size();
    QCOMPARE(total, size_t(40));
}

void TestDataset::shardFilesRoundTrip()
{
    const auto dir = test::scratchDir();
    const Dataset data = labelled(95, 5);
    auto files = Shards::write(data, 4, 9, dir->filePath(QStringLiteral("shards")));
    QVERIFY2(files.ok(), qPrintable(files.error()));
    QCOMPARE(files->size(), 4);
    qint64 total = 0;
    for (const ShardFile& file : *files) {
        QVERIFY(file.path.endsWith(
            QStringLiteral("shard-%1-of-00004.safetensors").arg(file.index, 5, 10, QLatin1Char('0'))));
        auto bundle = SafeTensors::load(file.path);
        QVERIFY2(bundle.ok(), qPrintable(bundle.error()));
        QCOMPARE(bundle->metadata().value(QStringLiteral("gleaner.shard.index")),
                 QString::number(file.index));
        auto shard = Dataset::fromBundle(*bundle, file.path);
        QVERIFY(shard.ok());
        QCOMPARE(shard->size(), file.samples);
        QCOMPARE(QFileInfo(file.path).size(), file.bytes);
        total += shard->size();
        // Samples keep their labels through the shuffle.
        for (qint64 i = 0; i < shard->size(); ++i) {
            const auto* px = reinterpret_cast<const quint8*>(shard->bundle().data(shard->x()).data()) + i * 4;
            const qint64 original = qint64(px[0]) + 251 * qint64(px[1]);
            QCOMPARE(shard->label(i), data.label(original));
        }
    }
    QCOMPARE(total, 95);

    // Same seed, same bytes: content addresses stay stable across coordinator restarts.
    auto again = Shards::write(data, 4, 9, dir->filePath(QStringLiteral("again")));
    QVERIFY(again.ok());
    for (int i = 0; i < 4; ++i)
        QCOMPARE(again->at(i).sha256, files->at(i).sha256);

    auto tooMany = Shards::write(data, 96, 9, dir->filePath(QStringLiteral("x")));
    QVERIFY(!tooMany.ok());
    QVERIFY(tooMany.error().contains(u"cannot fill 96 shards"));
}

void TestDataset::shardWriteRefuses_data()
{
    QTest::addColumn<int>("shards");
    QTest::addColumn<QString>("obstacle"); // what stands in the way of the folder or a shard file
    QTest::addColumn<QString>("message");
    QTest::newRow("no shards") << 0 << ""
                               << "the number of shards must be at least 1, got 0";
    QTest::newRow("negative shards") << -3 << ""
                                     << "the number of shards must be at least 1, got -3";
    QTest::newRow("folder under a file") << 2 << "file"
                                         << "cannot create the shard folder";
    QTest::newRow("a folder where a shard goes") << 2 << "folder"
                                                 << "cannot write the shard";
}

void TestDataset::shardWriteRefuses()
{
    QFETCH(int, shards);
    QFETCH(QString, obstacle);
    QFETCH(QString, message);
    // Obstacles made of files and folders, not permissions, so the refusals hold for root too.
    const auto dir = test::scratchDir();
    QString target = dir->filePath(QStringLiteral("shards"));
    if (obstacle == u"file") {
        writeFile(dir->filePath(QStringLiteral("blocker")), "x");
        target = dir->filePath(QStringLiteral("blocker/shards"));
    } else if (obstacle == u"folder") {
        QVERIFY(QDir().mkpath(target + QStringLiteral("/shard-00001-of-00002.safetensors")));
    }
    auto files = Shards::write(labelled(20, 2), shards, 1, target);
    QVERIFY(!files.ok());
    QVERIFY2(files.error().contains(message), qPrintable(files.error()));
    if (!obstacle.isEmpty())
        QVERIFY2(files.error().contains(target), qPrintable(files.error()));
}

void TestDataset::fashionMnistFromDebianPackage()
{
    auto split = loadDataset(DatasetSpec{}, std::nullopt);
    QVERIFY2(split.ok(), qPrintable(split.error()));
    QCOMPARE(split->train.size(), 60000);
    QCOMPARE(split->test.size(), 10000);
    QCOMPARE(split->train.sampleShape(), (QList<qint64>{1, 28, 28}));
    QCOMPARE(split->train.labelBound(), 10);
    const auto counts = split->test.classCounts(10);
    for (qint64 c : counts)
        QCOMPARE(c, 1000);

    DatasetSpec missing;
    missing.dir = QStringLiteral("/nonexistent/fashion");
    auto error = loadDataset(missing);
    QVERIFY(!error.ok());
    QVERIFY2(error.error().contains(u"apt-get install dataset-fashion-mnist"), qPrintable(error.error()));
}

QTEST_GUILESS_MAIN(TestDataset)
#include "TestDataset.moc"
