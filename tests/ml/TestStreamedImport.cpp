// The streamed import (TrainingImport) against the in-memory one (loadDataset + Shards::write): for every format,
// small files made here, the same spec and seed must give byte-identical shard files and the same test set,
// with test_fraction, limit_train and normalize; a file that turns out malformed while its samples stream is
// refused with the in-memory reader's message and leaves no shard behind.
#include "TestSupport.h"

#include "format/SafeTensors.h"
#include "ml/data/DatasetLoader.h"
#include "ml/data/ShardWriter.h"
#include "ml/data/TrainingImport.h"
#include "spec/JobSpec.h"

#include <QDir>
#include <QImage>
#include <QJsonArray>
#include <QJsonObject>
#include <QTest>

#include <zlib.h>

#include <random>

using namespace gleaner;
using namespace gleaner::ml;

class TestStreamedImport : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void matchesInMemory_data();
    void matchesInMemory();
    void writerMatchesSerialize();
    void refusesWhatStreamingFinds_data();
    void refusesWhatStreamingFinds();

private:
    std::unique_ptr<QTemporaryDir> m_dir;
    QString path(const QString& name) const { return m_dir->filePath(name); }
};

namespace {

QByteArray gzip(const QByteArray& data)
{
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    QByteArray out(qsizetype(deflateBound(&z, uLong(data.size()))), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.constData()));
    z.avail_in = uInt(data.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    deflate(&z, Z_FINISH);
    out.truncate(qsizetype(z.total_out));
    deflateEnd(&z);
    return out;
}

QByteArray rawDeflate(const QByteArray& data)
{
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    QByteArray out(qsizetype(deflateBound(&z, uLong(data.size()))), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.constData()));
    z.avail_in = uInt(data.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    deflate(&z, Z_FINISH);
    out.truncate(qsizetype(z.total_out));
    deflateEnd(&z);
    return out;
}

void le(QByteArray& out, quint64 value, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        out += char((value >> (8 * i)) & 0xff);
}

// A .npz as np.savez (stored) or np.savez_compressed (deflated) writes it.
QByteArray zip(const QList<std::pair<QString, QByteArray>>& members, bool deflated)
{
    QByteArray out, directory;
    for (const auto& [name, data] : members) {
        const QByteArray packed = deflated ? rawDeflate(data) : data;
        const quint32 crc = quint32(crc32(0, reinterpret_cast<const Bytef*>(data.constData()), uInt(data.size())));
        const QByteArray file = name.toUtf8();
        const qint64 at = out.size();
        le(out, 0x04034b50, 4); le(out, 20, 2); le(out, 0, 2); le(out, deflated ? 8 : 0, 2); le(out, 0, 4);
        le(out, crc, 4); le(out, quint64(packed.size()), 4); le(out, quint64(data.size()), 4); le(out, quint64(file.size()), 2);
        le(out, 0, 2);
        out += file + packed;
        le(directory, 0x02014b50, 4); le(directory, 20, 2); le(directory, 20, 2); le(directory, 0, 2);
        le(directory, deflated ? 8 : 0, 2); le(directory, 0, 4); le(directory, crc, 4);
        le(directory, quint64(packed.size()), 4); le(directory, quint64(data.size()), 4);
        le(directory, quint64(file.size()), 2); le(directory, 0, 2); le(directory, 0, 2); le(directory, 0, 2);
        le(directory, 0, 2); le(directory, 0, 4); le(directory, quint64(at), 4);
        directory += file;
    }
    const qint64 directoryAt = out.size();
    out += directory;
    le(out, 0x06054b50, 4); le(out, 0, 2); le(out, 0, 2); le(out, quint64(members.size()), 2);
    le(out, quint64(members.size()), 2); le(out, quint64(directory.size()), 4); le(out, quint64(directoryAt), 4);
    le(out, 0, 2);
    return out;
}

QByteArray npy(const char* descr, const QList<qint64>& shape, const QByteArray& data)
{
    QStringList dims;
    for (qint64 d : shape)
        dims << QString::number(d);
    QByteArray text = QStringLiteral("{'descr': '%1', 'fortran_order': False, 'shape': (%2%3), }")
                          .arg(QLatin1StringView(descr), dims.join(QStringLiteral(", ")), shape.size() == 1 ? QStringLiteral(",") : QString())
                          .toLatin1();
    while ((10 + text.size() + 1) % 64 != 0)
        text += ' ';
    text += '\n';
    QByteArray out("\x93NUMPY\x01\x00", 8);
    out += char(text.size() & 0xff);
    out += char(text.size() >> 8);
    return out + text + data;
}

QByteArray idx(const QList<qint64>& shape, const QByteArray& data)
{
    QByteArray out("\x00\x00\x08", 3);
    out += char(shape.size());
    for (qint64 d : shape)
        for (int b = 3; b >= 0; --b)
            out += char((d >> (8 * b)) & 0xff);
    return out + data;
}

QByteArray randomBytes(qint64 n, std::mt19937& rng)
{
    QByteArray out(qsizetype(n), Qt::Uninitialized);
    for (char& c : out)
        c = char(rng() & 0xff);
    return out;
}

QByteArray randomLabels(qint64 n, int classes, std::mt19937& rng)
{
    QByteArray out(qsizetype(n), Qt::Uninitialized);
    for (char& c : out)
        c = char(rng() % quint32(classes));
    return out;
}

template <typename T>
QByteArray bytesOf(const std::vector<T>& values)
{
    return QByteArray(reinterpret_cast<const char*>(values.data()), qsizetype(values.size() * sizeof(T)));
}

QJsonObject spec(std::initializer_list<std::pair<QString, QJsonValue>> fields)
{
    QJsonObject out;
    for (const auto& [key, value] : fields)
        out.insert(key, value);
    return out;
}

QStringList filesIn(const QString& dir)
{
    return QDir(dir).entryList(QDir::Files, QDir::Name);
}

} // namespace

void TestStreamedImport::initTestCase()
{
    m_dir = test::scratchDir();
    QVERIFY(m_dir);
    std::mt19937 rng(7);

    // IDX, plain and gzip: 700 samples of 40x40, more than one read buffer of them.
    const QByteArray trainX = randomBytes(700 * 40 * 40, rng);
    const QByteArray trainY = randomLabels(700, 7, rng);
    QVERIFY(test::writeFile(path(u"train-images"_qs), idx({700, 40, 40}, trainX)));
    QVERIFY(test::writeFile(path(u"train-labels"_qs), idx({700}, trainY)));
    QVERIFY(test::writeFile(path(u"train-images.gz"_qs), gzip(idx({700, 40, 40}, trainX))));
    QVERIFY(test::writeFile(path(u"t10k-images"_qs), idx({30, 40, 40}, randomBytes(30 * 40 * 40, rng))));
    QVERIFY(test::writeFile(path(u"t10k-labels"_qs), idx({30}, randomLabels(30, 7, rng))));
    // A gzip file cut short, and one whose data is longer than its header says: found only while streaming.
    const QByteArray whole = gzip(idx({700, 40, 40}, trainX));
    QVERIFY(test::writeFile(path(u"truncated.gz"_qs), whole.left(whole.size() - 100)));
    QVERIFY(test::writeFile(path(u"long.gz"_qs), gzip(idx({700, 40, 40}, trainX + "extra"))));

    // CIFAR-10: five training batches and a test batch of a few records each.
    QVERIFY(QDir().mkpath(path(u"cifar"_qs)));
    const auto batch = [&](int records) {
        QByteArray out;
        for (int r = 0; r < records; ++r)
            out += char(rng() % 10) + randomBytes(3 * 32 * 32, rng);
        return out;
    };
    for (int i = 1; i <= 5; ++i)
        QVERIFY(test::writeFile(path(u"cifar/data_batch_%1.bin"_qs.arg(i)), batch(20 + i)));
    QVERIFY(test::writeFile(path(u"cifar/test_batch.bin"_qs), batch(10)));

    // safetensors: U8 samples with I32 labels, F32 samples with I64 labels.
    {
        TensorBundle u8;
        std::vector<qint32> labels(120);
        for (auto& label : labels)
            label = qint32(rng() % 4);
        QVERIFY(u8.add(u"x"_qs, DType::U8, {120, 3, 5}, randomBytes(120 * 15, rng)));
        QVERIFY(u8.addValues<qint32>(u"y"_qs, DType::I32, {120}, labels));
        QVERIFY(SafeTensors::save(path(u"u8.safetensors"_qs), u8));
        TensorBundle f32;
        std::vector<float> values(90 * 6);
        for (auto& v : values)
            v = float(rng() % 1000) / 7.0f;
        std::vector<qint64> y(90);
        for (auto& label : y)
            label = qint64(rng() % 3);
        QVERIFY(f32.addValues<float>(u"x"_qs, DType::F32, {90, 6}, values));
        QVERIFY(f32.addValues<qint64>(u"y"_qs, DType::I64, {90}, y));
        QVERIFY(SafeTensors::save(path(u"f32.safetensors"_qs), f32));
    }

    // npz: float64 samples (become float32), stored and deflated; Keras's single file with x_train ... y_test.
    {
        std::vector<double> x(150 * 2 * 4);
        for (auto& v : x)
            v = double(rng() % 10000) / 13.0;
        std::vector<qint64> y(150);
        for (auto& label : y)
            label = qint64(rng() % 5);
        const QList<std::pair<QString, QByteArray>> members{{u"x.npy"_qs, npy("<f8", {150, 2, 4}, bytesOf(x))},
                                                            {u"y.npy"_qs, npy("<i8", {150}, bytesOf(y))}};
        QVERIFY(test::writeFile(path(u"stored.npz"_qs), zip(members, false)));
        QVERIFY(test::writeFile(path(u"deflated.npz"_qs), zip(members, true)));
        QVERIFY(test::writeFile(path(u"keras.npz"_qs),
                                zip({{u"x_train.npy"_qs, npy("|u1", {80, 1, 3, 3}, randomBytes(80 * 9, rng))},
                                     {u"y_train.npy"_qs, npy("|u1", {80}, randomLabels(80, 3, rng))},
                                     {u"x_test.npy"_qs, npy("|u1", {12, 1, 3, 3}, randomBytes(12 * 9, rng))},
                                     {u"y_test.npy"_qs, npy("|u1", {12}, randomLabels(12, 3, rng))}},
                                    true)));
        // A stored member with one byte of its samples changed: only its CRC-32 says so, at the end.
        QByteArray damaged = zip(members, false);
        damaged[damaged.indexOf("\x93NUMPY") + 200] ^= 0x55;
        QVERIFY(test::writeFile(path(u"damaged.npz"_qs), damaged));
    }

    // CSV with names as labels.
    {
        QByteArray text = "a,species,b,c\n";
        const char* names[] = {"setosa", "versicolor", "virginica"};
        for (int row = 0; row < 90; ++row)
            text += QByteArray::number(double(rng() % 1000) / 10.0) + ',' + names[rng() % 3] + ',' +
                    QByteArray::number(int(rng() % 50)) + ",\"" + QByteArray::number(double(rng() % 100) / 3.0) + "\"\n";
        QVERIFY(test::writeFile(path(u"table.csv"_qs), text));
        QVERIFY(test::writeFile(path(u"table-test.csv"_qs), "a,species,b,c\n1,setosa,2,3\n4,virginica,5,6\n"));
    }

    // An image folder: three classes of uneven size, one bad file (left out), with and without test/.
    for (const QString& root : {u"images/train"_qs, u"images/test"_qs, u"flat"_qs}) {
        const QStringList classes{u"cat"_qs, u"dog"_qs, u"owl"_qs};
        for (qsizetype c = 0; c < classes.size(); ++c) {
            const QString folder = path(root + u'/' + classes[c]);
            QVERIFY(QDir().mkpath(folder));
            const int count = root.endsWith(u"test") ? 2 : 4 + int(c) * 3;
            for (int i = 0; i < count; ++i) {
                QImage image(5 + i, 6, QImage::Format_RGB32);
                for (int y = 0; y < image.height(); ++y)
                    for (int x = 0; x < image.width(); ++x)
                        image.setPixel(x, y, qRgb(int(rng() % 256), int(rng() % 256), int(rng() % 256)));
                QVERIFY(image.save(u"%1/%2.png"_qs.arg(folder).arg(i)));
            }
        }
        QVERIFY(test::writeFile(path(root + u"/dog/broken.png"_qs), "not a png"));
    }
}

void TestStreamedImport::matchesInMemory_data()
{
    QTest::addColumn<QJsonObject>("dataset");
    QTest::addColumn<int>("limit");
    QTest::addColumn<QList<qint64>>("inputShape");
    QTest::addColumn<int>("shards");

    const QJsonObject idxPlain = spec({{u"format"_qs, u"idx"_qs},
                                       {u"train_images"_qs, path(u"train-images"_qs)},
                                       {u"train_labels"_qs, path(u"train-labels"_qs)},
                                       {u"test_images"_qs, path(u"t10k-images"_qs)},
                                       {u"test_labels"_qs, path(u"t10k-labels"_qs)}});
    QJsonObject idxGzip = idxPlain;
    idxGzip[u"train_images"_qs] = path(u"train-images.gz"_qs);
    QJsonObject idxNormalized = idxGzip;
    idxNormalized[u"normalize"_qs] = QJsonObject{{u"mean"_qs, QJsonArray{0.3}}, {u"std"_qs, QJsonArray{0.2}}};
    QTest::newRow("idx") << idxPlain << 0 << QList<qint64>{1, 40, 40} << 7;
    QTest::newRow("idx gzip, limit_train") << idxGzip << 333 << QList<qint64>{1, 40, 40} << 5;
    QTest::newRow("idx gzip, normalize") << idxNormalized << 0 << QList<qint64>{1, 40, 40} << 3;
    QTest::newRow("cifar10") << spec({{u"format"_qs, u"cifar10"_qs}, {u"dir"_qs, path(u"cifar"_qs)}}) << 0
                             << QList<qint64>{3, 32, 32} << 4;
    QTest::newRow("safetensors u8, test_fraction")
        << spec({{u"format"_qs, u"safetensors"_qs}, {u"train"_qs, path(u"u8.safetensors"_qs)}, {u"test_fraction"_qs, 0.25}})
        << 0 << QList<qint64>{3, 5} << 6;
    QTest::newRow("safetensors f32, test_fraction, normalize, limit_train")
        << spec({{u"format"_qs, u"safetensors"_qs},
                 {u"train"_qs, path(u"f32.safetensors"_qs)},
                 {u"test_fraction"_qs, 0.1},
                 {u"split_seed"_qs, 3},
                 {u"normalize"_qs, QJsonObject{{u"mean"_qs, QJsonArray{10.0}}, {u"std"_qs, QJsonArray{40.0}}}}})
        << 50 << QList<qint64>{6} << 2;
    QTest::newRow("npz stored, float64")
        << spec({{u"format"_qs, u"npz"_qs}, {u"train"_qs, path(u"stored.npz"_qs)}, {u"test"_qs, path(u"deflated.npz"_qs)}})
        << 0 << QList<qint64>{2, 4} << 4;
    QTest::newRow("npz deflated, test_fraction")
        << spec({{u"format"_qs, u"npz"_qs}, {u"train"_qs, path(u"deflated.npz"_qs)}, {u"test_fraction"_qs, 0.2}}) << 0
        << QList<qint64>{2, 4} << 3;
    QTest::newRow("npz keras file") << spec({{u"format"_qs, u"npz"_qs}, {u"file"_qs, path(u"keras.npz"_qs)}}) << 0
                                    << QList<qint64>{1, 3, 3} << 3;
    QTest::newRow("csv, names")
        << spec({{u"format"_qs, u"csv"_qs}, {u"train"_qs, path(u"table.csv"_qs)}, {u"test"_qs, path(u"table-test.csv"_qs)},
                 {u"label"_qs, u"species"_qs}})
        << 0 << QList<qint64>{3} << 4;
    QTest::newRow("csv, test_fraction, normalize")
        << spec({{u"format"_qs, u"csv"_qs}, {u"train"_qs, path(u"table.csv"_qs)}, {u"test_fraction"_qs, 0.3},
                 {u"label"_qs, u"species"_qs},
                 {u"normalize"_qs, QJsonObject{{u"mean"_qs, QJsonArray{1, 2, 3}}, {u"std"_qs, QJsonArray{4, 5, 6}}}}})
        << 0 << QList<qint64>{3} << 2;
    QTest::newRow("images with test/")
        << spec({{u"format"_qs, u"images"_qs}, {u"dir"_qs, path(u"images"_qs)}}) << 0 << QList<qint64>{3, 4, 4} << 3;
    QTest::newRow("images, test_fraction, limit_train")
        << spec({{u"format"_qs, u"images"_qs}, {u"dir"_qs, path(u"flat"_qs)}, {u"test_fraction"_qs, 0.2}}) << 12
        << QList<qint64>{1, 3, 5} << 2;
}

void TestStreamedImport::matchesInMemory()
{
    QFETCH(QJsonObject, dataset);
    QFETCH(int, limit);
    QFETCH(QList<qint64>, inputShape);
    QFETCH(int, shards);
    auto parsed = DatasetSpec::fromJson(dataset);
    QVERIFY2(parsed, qPrintable(parsed ? QString() : parsed.error()));
    const std::optional<qint64> limitTrain = limit > 0 ? std::optional<qint64>(limit) : std::nullopt;
    const quint64 seed = 11;

    auto whole = loadDataset(*parsed, limitTrain, inputShape);
    QVERIFY2(whole, qPrintable(whole ? QString() : whole.error()));
    const QString inMemoryDir = path(u"in-memory-%1"_qs.arg(QTest::currentDataTag()));
    auto expected = Shards::write(whole->train, shards, seed, inMemoryDir);
    QVERIFY2(expected, qPrintable(expected ? QString() : expected.error()));

    auto streamed = TrainingImport::open(*parsed, limitTrain, inputShape);
    QVERIFY2(streamed, qPrintable(streamed ? QString() : streamed.error()));
    QCOMPARE(streamed->trainSize(), whole->train.size());
    QCOMPARE(streamed->sampleShape(), whole->train.sampleShape());
    QCOMPARE(streamed->trainLabelBound(), whole->train.labelBound());
    QCOMPARE(streamed->testLabelBound(), whole->test.labelBound());
    QCOMPARE(streamed->notes(), whole->notes);
    QCOMPARE(streamed->trainBytes(), whole->train.x().byteSize);
    const QString streamedDir = path(u"streamed-%1"_qs.arg(QTest::currentDataTag()));
    auto written = streamed->writeShards(shards, seed, streamedDir);
    QVERIFY2(written, qPrintable(written ? QString() : written.error()));

    QCOMPARE(written->size(), expected->size());
    for (qsizetype i = 0; i < written->size(); ++i) {
        QCOMPARE(written->at(i).samples, expected->at(i).samples);
        QCOMPARE(written->at(i).bytes, expected->at(i).bytes);
        QCOMPARE(written->at(i).sha256, expected->at(i).sha256);
        QCOMPARE(test::readFile(written->at(i).path), test::readFile(expected->at(i).path));
    }
    QCOMPARE(SafeTensors::serialize(streamed->test().bundle()), SafeTensors::serialize(whole->test.bundle()));
}

void TestStreamedImport::writerMatchesSerialize()
{
    // The shard writer fills in files at offsets; what it writes must be what serializing each shard's bundle
    // gives, as the coordinator wrote shards before (content addresses stay the same).
    for (const char* name : {"u8.safetensors", "f32.safetensors"}) {
        auto bundle = SafeTensors::load(path(QLatin1StringView(name)));
        QVERIFY(bundle);
        auto data = Dataset::fromBundle(std::move(*bundle), QLatin1StringView(name));
        QVERIFY(data);
        const QString dir = path(u"serialize-%1"_qs.arg(QLatin1StringView(name)));
        auto files = Shards::write(*data, 3, 5, dir);
        QVERIFY(files);
        const auto plan = Shards::plan(*data, 3, 5);
        for (int i = 0; i < 3; ++i) {
            Dataset shard = data->select(plan[size_t(i)]);
            shard.bundle().metadata().clear();
            shard.bundle().setMetadata(u"gleaner.shard.index"_qs, QString::number(i));
            shard.bundle().setMetadata(u"gleaner.shard.count"_qs, u"3"_qs);
            shard.bundle().setMetadata(u"gleaner.shard.seed"_qs, u"5"_qs);
            QCOMPARE(test::readFile(files->at(i).path), SafeTensors::serialize(shard.bundle()));
        }
    }
}

void TestStreamedImport::refusesWhatStreamingFinds_data()
{
    QTest::addColumn<QJsonObject>("dataset");
    QTest::addColumn<QString>("message");
    const auto idxWith = [&](const QString& images) {
        return spec({{u"format"_qs, u"idx"_qs},
                     {u"train_images"_qs, path(images)},
                     {u"train_labels"_qs, path(u"train-labels"_qs)},
                     {u"test_images"_qs, path(u"t10k-images"_qs)},
                     {u"test_labels"_qs, path(u"t10k-labels"_qs)}});
    };
    QTest::newRow("gzip cut short") << idxWith(u"truncated.gz"_qs) << u"truncated.gz: gzip: the compressed data ends early"_qs;
    QTest::newRow("gzip longer than its header") << idxWith(u"long.gz"_qs) << u"needs 1120000 bytes of data, the file has 1120005"_qs;
    QTest::newRow("npz damaged") << spec({{u"format"_qs, u"npz"_qs}, {u"train"_qs, path(u"damaged.npz"_qs)},
                                          {u"test"_qs, path(u"deflated.npz"_qs)}})
                                 << u"damaged.npz: member x.npy fails its CRC-32 check (damaged)"_qs;
}

void TestStreamedImport::refusesWhatStreamingFinds()
{
    QFETCH(QJsonObject, dataset);
    QFETCH(QString, message);
    auto parsed = DatasetSpec::fromJson(dataset);
    QVERIFY2(parsed, qPrintable(parsed ? QString() : parsed.error()));
    auto whole = loadDataset(*parsed);
    QVERIFY(!whole);
    QVERIFY2(whole.error().contains(message), qPrintable(whole.error()));

    const QString dir = path(u"refused-%1"_qs.arg(QTest::currentDataTag()));
    auto streamed = TrainingImport::open(*parsed);
    if (streamed) { // the header was sound: the samples tell
        auto written = streamed->writeShards(3, 1, dir);
        QVERIFY(!written);
        QCOMPARE(written.error(), whole.error());
        QVERIFY2(filesIn(dir).isEmpty(), qPrintable(filesIn(dir).join(u", "_qs)));
    } else {
        QCOMPARE(streamed.error(), whole.error());
    }
}

QTEST_GUILESS_MAIN(TestStreamedImport)
#include "TestStreamedImport.moc"
