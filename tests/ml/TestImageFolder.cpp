// Folders of images as datasets: classes from the folder names, every image decoded once and made the model's
// [C, H, W], bad files skipped or fatal by name, train/ and test/ splits; and the per-channel normalisation
// any dataset may ask for.
#include "TestSupport.h"

#include "ml/data/DatasetLoader.h"
#include "ml/data/ImageFolderReader.h"
#include "ml/data/Normalization.h"
#include "spec/JobSpec.h"

#include <QDir>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QTest>

#include <cmath>

using namespace gleaner;
using namespace gleaner::ml;
using namespace Qt::StringLiterals;

class TestImageFolder : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void readsClassFoldersInSortedOrder();
    void keepsPixelsInPlanarLayout();
    void convertsToGrayscale();
    void resizesImagesOfMixedSizes();
    void skipsBadFilesByName();
    void stopsAtTheFirstBadFile();
    void refusesClassesWithoutImages();
    void readsTrainAndTestFolders();
    void refusesMismatchedSplits_data();
    void refusesMismatchedSplits();
    void holdsOutATestSetWithoutTestFolder();
    void loadsThroughTheSpec();
    void normalizesPerChannel();
    void normalizesFloatSamples();
    void refusesBadNormalizeSpecs_data();
    void refusesBadNormalizeSpecs();
    void refusesNormalizeThatDoesNotFitTheSamples();
};

namespace {

QImage solid(int width, int height, QColor colour, QImage::Format format = QImage::Format_RGB32)
{
    QImage image(width, height, format);
    image.fill(colour);
    return image;
}

// Saves `image` as dir/relative (folders made as needed); the format follows the suffix.
void save(const QTemporaryDir& dir, const QString& relative, const QImage& image)
{
    const QString path = dir.filePath(relative);
    QVERIFY(QDir().mkpath(QFileInfo(path).path()));
    QVERIFY2(image.save(path, nullptr, 100), qPrintable(u"cannot write "_s + path));
}

void writeBytes(const QTemporaryDir& dir, const QString& relative, const QByteArray& bytes)
{
    const QString path = dir.filePath(relative);
    QVERIFY(QDir().mkpath(QFileInfo(path).path()));
    QVERIFY(test::writeFile(path, bytes));
}

QByteArray randomBytes(int count)
{
    QRandomGenerator random(7);
    QByteArray bytes(count, '\0');
    for (char& byte : bytes)
        byte = char(random.bounded(256));
    return bytes;
}

ImageFolder::Options shape(qint64 channels, qint64 height, qint64 width, bool stop = false)
{
    ImageFolder::Options options;
    options.channels = channels;
    options.height = height;
    options.width = width;
    options.stopAtBadFile = stop;
    return options;
}

// Sample `index` of a U8 dataset: its pixel at (channel, y, x).
int pixel(const Dataset& data, qint64 index, qint64 channel, qint64 y, qint64 x)
{
    const QList<qint64> s = data.sampleShape();
    const auto bytes = data.bundle().values<quint8>(data.x());
    return bytes[size_t(((index * s[0] + channel) * s[1] + y) * s[2] + x)];
}

float value(const Dataset& data, qint64 index, qint64 flat)
{
    const qint64 perSample = data.sampleBytes() / qint64(sizeof(float));
    return data.bundle().values<float>(data.x())[size_t(index * perSample + flat)];
}

// Three classes, sorted ant, cat, dog: PNG and JPEG, colour and grayscale, of different sizes.
void writeAnimals(const QTemporaryDir& dir, const QString& under = QString())
{
    const QString root = under.isEmpty() ? QString() : under + u'/';
    save(dir, root + u"dog/1.png"_s, solid(20, 10, Qt::red));
    save(dir, root + u"dog/2.jpg"_s, solid(64, 64, Qt::red));
    save(dir, root + u"cat/a.png"_s, solid(8, 8, QColor(128, 128, 128), QImage::Format_Grayscale8));
    save(dir, root + u"ant/x.png"_s, solid(3, 5, Qt::blue));
    save(dir, root + u"ant/y.jpeg"_s, solid(100, 30, Qt::blue));
    save(dir, root + u"ant/z.bmp"_s, solid(9, 9, Qt::blue));
}

Result<DatasetSpec> imagesSpec(const QString& dir, QJsonObject more = {})
{
    more.insert(u"format"_s, u"images"_s);
    more.insert(u"dir"_s, dir);
    return DatasetSpec::fromJson(more);
}

} // namespace

void TestImageFolder::readsClassFoldersInSortedOrder()
{
    auto dir = test::scratchDir();
    writeAnimals(*dir);
    writeBytes(*dir, u"README.txt"_s, "files beside the class folders are not images of a class"); // ignored
    auto folder = ImageFolder::read(dir->path(), shape(3, 8, 8));
    QVERIFY2(folder, qPrintable(folder ? QString() : folder.error()));
    QCOMPARE(folder->classes, (QStringList{u"ant"_s, u"cat"_s, u"dog"_s}));
    QVERIFY(!folder->hasTestSplit);
    QVERIFY(folder->leftOut.isEmpty());
    const Dataset& train = folder->split.train;
    QCOMPARE(train.size(), qint64(6));
    QCOMPARE(train.sampleShape(), (QList<qint64>{3, 8, 8}));
    QCOMPARE(train.sampleType(), DType::U8); // training scales the pixels to [0, 1]
    // Interleaved by class, each class in file order: ant x, cat a, dog 1, ant y, dog 2, ant z.
    QList<qint64> labels;
    for (qint64 i = 0; i < train.size(); ++i)
        labels << train.label(i);
    QCOMPARE(labels, (QList<qint64>{0, 1, 2, 0, 2, 0}));
    // Solid colours stay themselves through resizing: blue ant, gray cat, red dog (the JPEG within its loss).
    QCOMPARE(pixel(train, 0, 2, 4, 4), 255);
    QCOMPARE(pixel(train, 0, 0, 4, 4), 0);
    QCOMPARE(pixel(train, 1, 0, 0, 0), 128);
    QCOMPARE(pixel(train, 1, 2, 7, 7), 128);
    QCOMPARE(pixel(train, 2, 0, 3, 3), 255);
    QVERIFY(pixel(train, 4, 0, 3, 3) > 245 && pixel(train, 4, 1, 3, 3) < 10);
    QVERIFY(test::writeFile(dir->filePath(u"cat/b.png"_s), test::readFile(dir->filePath(u"cat/a.png"_s))));
    // The same folder, the same bytes.
    auto again = ImageFolder::read(dir->path(), shape(3, 8, 8));
    auto third = ImageFolder::read(dir->path(), shape(3, 8, 8));
    QCOMPARE(again->split.train.size(), qint64(7));
    QCOMPARE(again->split.train.bundle().data(again->split.train.x()).toByteArray(),
             third->split.train.bundle().data(third->split.train.x()).toByteArray());
}

void TestImageFolder::keepsPixelsInPlanarLayout()
{
    auto dir = test::scratchDir();
    // Top half red, bottom half blue, left column green: at the target size, so no scaling blurs the edges.
    QImage image = solid(4, 4, Qt::red);
    for (int y = 2; y < 4; ++y)
        for (int x = 0; x < 4; ++x)
            image.setPixelColor(x, y, Qt::blue);
    image.setPixelColor(0, 0, Qt::green);
    save(*dir, u"only/one.png"_s, image);
    auto folder = ImageFolder::read(dir->path(), shape(3, 4, 4));
    QVERIFY2(folder, qPrintable(folder ? QString() : folder.error()));
    const Dataset& data = folder->split.train;
    QCOMPARE(pixel(data, 0, 0, 0, 1), 255); // red plane, top row
    QCOMPARE(pixel(data, 0, 2, 0, 1), 0);
    QCOMPARE(pixel(data, 0, 0, 3, 1), 0); // bottom rows are blue
    QCOMPARE(pixel(data, 0, 2, 3, 1), 255);
    QCOMPARE(pixel(data, 0, 1, 0, 0), 255); // green at (0, 0) only
    QCOMPARE(pixel(data, 0, 0, 0, 0), 0);
    QCOMPARE(pixel(data, 0, 1, 0, 1), 0);
}

void TestImageFolder::convertsToGrayscale()
{
    auto dir = test::scratchDir();
    QImage image = solid(6, 6, Qt::white);
    for (int y = 0; y < 6; ++y)
        for (int x = 3; x < 6; ++x)
            image.setPixelColor(x, y, Qt::black);
    save(*dir, u"halves/one.png"_s, image);
    save(*dir, u"red/one.png"_s, solid(6, 6, Qt::red));
    auto folder = ImageFolder::read(dir->path(), shape(1, 6, 6));
    QVERIFY2(folder, qPrintable(folder ? QString() : folder.error()));
    const Dataset& data = folder->split.train;
    QCOMPARE(data.sampleShape(), (QList<qint64>{1, 6, 6}));
    QCOMPARE(pixel(data, 0, 0, 2, 0), 255);
    QCOMPARE(pixel(data, 0, 0, 2, 5), 0);
    // Red is darker than white and lighter than black, the same everywhere.
    const int red = pixel(data, 1, 0, 0, 0);
    QVERIFY2(red > 40 && red < 140, qPrintable(QString::number(red)));
    QCOMPARE(pixel(data, 1, 0, 5, 5), red);
}

void TestImageFolder::resizesImagesOfMixedSizes()
{
    auto dir = test::scratchDir();
    // 40 x 20, left half white, right half black; and a tiny one that must grow.
    QImage wide = solid(40, 20, Qt::white);
    for (int y = 0; y < 20; ++y)
        for (int x = 20; x < 40; ++x)
            wide.setPixelColor(x, y, Qt::black);
    save(*dir, u"a/wide.png"_s, wide);
    save(*dir, u"a/tiny.png"_s, solid(1, 1, Qt::white));
    auto folder = ImageFolder::read(dir->path(), shape(1, 8, 8));
    QVERIFY2(folder, qPrintable(folder ? QString() : folder.error()));
    const Dataset& data = folder->split.train;
    QCOMPARE(data.size(), qint64(2));
    // Sorted: tiny.png, then wide.png, stretched to 8 x 8 (the aspect ratio is not kept).
    for (qint64 y = 0; y < 8; ++y) {
        QCOMPARE(pixel(data, 0, 0, y, 7), 255);
        QCOMPARE(pixel(data, 1, 0, y, 0), 255);
        QCOMPARE(pixel(data, 1, 0, y, 1), 255);
        QCOMPARE(pixel(data, 1, 0, y, 6), 0);
        QCOMPARE(pixel(data, 1, 0, y, 7), 0);
    }
}

void TestImageFolder::skipsBadFilesByName()
{
    auto dir = test::scratchDir();
    writeAnimals(*dir);
    writeBytes(*dir, u"cat/broken.png"_s, randomBytes(300));
    writeBytes(*dir, u"dog/notes.txt"_s, "a note, not an image\n");
    QVERIFY(QDir().mkpath(dir->filePath(u"ant/nested"_s)));
    auto spec = imagesSpec(dir->path(), {{u"test_fraction"_s, 0.5}});
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    QCOMPARE(spec->stopOnBadFile, false); // skip is the default
    for (const QString& bad : {u"broken.png"_s, u"notes.txt"_s, u"nested"_s})
        QTest::ignoreMessage(QtWarningMsg,
                             QRegularExpression(QRegularExpression::escape(bad) + u".*left out"_s));
    auto split = loadDataset(*spec, std::nullopt, {3, 8, 8});
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.size() + split->test.size(), qint64(6));
    QCOMPARE(split->notes.size(), 2);
    QVERIFY2(split->notes[0].contains(
                 u"3 classes (labels 0 ant, 1 cat, 2 dog); 6 images, each decoded to [3, 8, 8]"_s),
             qPrintable(split->notes[0]));
    const QString& leftOut = split->notes[1];
    QVERIFY2(leftOut.contains(u"3 bad files left out"_s), qPrintable(leftOut));
    QVERIFY2(leftOut.contains(dir->filePath(u"cat/broken.png"_s) + u": not an image Qt can read"_s),
             qPrintable(leftOut));
    QVERIFY2(leftOut.contains(dir->filePath(u"dog/notes.txt"_s) + u": not an image Qt can read"_s),
             qPrintable(leftOut));
    QVERIFY2(leftOut.contains(dir->filePath(u"ant/nested"_s) + u": is a folder"_s), qPrintable(leftOut));
}

void TestImageFolder::stopsAtTheFirstBadFile()
{
    auto dir = test::scratchDir();
    writeAnimals(*dir);
    writeBytes(*dir, u"cat/broken.png"_s, randomBytes(300));
    writeBytes(*dir, u"dog/notes.txt"_s, "a note\n");
    auto spec = imagesSpec(dir->path(), {{u"on_bad_file"_s, u"stop"_s}, {u"test_fraction"_s, 0.5}});
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    QVERIFY(spec->stopOnBadFile);
    QCOMPARE(DatasetSpec::fromJson(spec->toJson()).value(), *spec);
    auto refused = loadDataset(*spec, std::nullopt, {3, 8, 8});
    QVERIFY(!refused);
    // Classes in order: cat's broken.png comes before dog's notes.txt.
    QVERIFY2(
        refused.error().startsWith(dir->filePath(u"cat/broken.png"_s) + u": not an image Qt can read ("_s),
        qPrintable(refused.error()));
    QVERIFY2(refused.error().contains(u"on_bad_file \"stop\""_s), qPrintable(refused.error()));
    QVERIFY(QFile::remove(dir->filePath(u"cat/broken.png"_s)));
    refused = loadDataset(*spec, std::nullopt, {3, 8, 8});
    QVERIFY(!refused);
    QVERIFY2(refused.error().startsWith(dir->filePath(u"dog/notes.txt"_s) + u": "_s),
             qPrintable(refused.error()));
}

void TestImageFolder::refusesClassesWithoutImages()
{
    auto dir = test::scratchDir();
    writeAnimals(*dir);
    QVERIFY(QDir().mkpath(dir->filePath(u"fox"_s)));
    auto empty = ImageFolder::read(dir->path(), shape(3, 8, 8));
    QVERIFY(!empty);
    QVERIFY2(empty.error().startsWith(dir->filePath(u"fox"_s) + u" is an empty class folder"_s),
             qPrintable(empty.error()));
    // A class whose only file is bad ends up empty too: refused even when skipping, naming what was left out.
    writeBytes(*dir, u"fox/broken.jpg"_s, randomBytes(64));
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(u"broken.jpg.*left out"_s));
    auto nothing = ImageFolder::read(dir->path(), shape(3, 8, 8));
    QVERIFY(!nothing);
    QVERIFY2(nothing.error().contains(dir->filePath(u"fox"_s) +
                                      u" holds no image Qt can read (1 files left out, "
                                      u"the first "_s +
                                      dir->filePath(u"fox/broken.jpg"_s)),
             qPrintable(nothing.error()));
    // No class folders at all; no folder at all.
    auto bare = test::scratchDir();
    auto none = ImageFolder::read(bare->path(), shape(3, 8, 8));
    QVERIFY(!none);
    QVERIFY2(none.error().contains(u"holds no class folders"_s), qPrintable(none.error()));
    auto missing = ImageFolder::read(bare->filePath(u"nowhere"_s), shape(3, 8, 8));
    QVERIFY(!missing);
    QVERIFY2(missing.error().contains(u"folder does not exist"_s), qPrintable(missing.error()));
}

void TestImageFolder::readsTrainAndTestFolders()
{
    auto dir = test::scratchDir();
    writeAnimals(*dir, u"train"_s);
    save(*dir, u"test/ant/1.png"_s, solid(8, 8, Qt::blue));
    save(*dir, u"test/cat/1.png"_s, solid(8, 8, Qt::gray));
    save(*dir, u"test/cat/2.png"_s, solid(8, 8, Qt::gray));
    save(*dir, u"test/dog/1.jpg"_s, solid(8, 8, Qt::red));
    auto spec = imagesSpec(dir->path());
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    auto split = loadDataset(*spec, std::nullopt, {3, 8, 8});
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.size(), qint64(6));
    QCOMPARE(split->test.size(), qint64(4));
    QCOMPARE(split->test.sampleShape(), (QList<qint64>{3, 8, 8}));
    QList<qint64> labels;
    for (qint64 i = 0; i < split->test.size(); ++i)
        labels << split->test.label(i);
    QCOMPARE(labels, (QList<qint64>{0, 1, 2, 1}));
    QVERIFY2(split->notes.value(0).contains(u"6 images in train/ and 4 in test/"_s),
             qPrintable(split->notes.value(0)));

    // A test split and test_fraction as well: which one is meant?
    auto both = imagesSpec(dir->path(), {{u"test_fraction"_s, 0.2}});
    QVERIFY(both);
    auto refused = loadDataset(*both, std::nullopt, {3, 8, 8});
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(u"holds its own test/ folder; remove dataset.test_fraction"_s),
             qPrintable(refused.error()));
}

void TestImageFolder::refusesMismatchedSplits_data()
{
    QTest::addColumn<QStringList>("files");
    QTest::addColumn<QString>("message");
    QTest::newRow("a test class train lacks")
        << QStringList{u"train/a/1.png"_s, u"train/b/1.png"_s, u"test/a/1.png"_s, u"test/b/1.png"_s,
                       u"test/c/1.png"_s}
        << u"test holds class folders that %1/train lacks: c; both splits need the same classes (%1/train has a, b)"_s;
    QTest::newRow("a train class test lacks")
        << QStringList{u"train/a/1.png"_s, u"train/b/1.png"_s, u"test/a/1.png"_s}
        << u"test lacks the class folders b that %1/train has"_s;
    QTest::newRow("test without train")
        << QStringList{u"a/1.png"_s, u"test/a/1.png"_s} << u"holds test/ but no train/"_s;
    QTest::newRow("classes beside train")
        << QStringList{u"train/a/1.png"_s, u"test/a/1.png"_s, u"b/1.png"_s, u"c/1.png"_s}
        << u"holds train/ and also b, c"_s;
    QTest::newRow("an empty test class")
        << QStringList{u"train/a/1.png"_s, u"test/a/"_s} << u"test/a is an empty class folder"_s;
}

void TestImageFolder::refusesMismatchedSplits()
{
    QFETCH(QStringList, files);
    QFETCH(QString, message);
    auto dir = test::scratchDir();
    for (const QString& file : files) {
        if (file.endsWith(u'/'))
            QVERIFY(QDir().mkpath(dir->filePath(file)));
        else
            save(*dir, file, solid(4, 4, Qt::white));
    }
    auto folder = ImageFolder::read(dir->path(), shape(1, 4, 4));
    QVERIFY(!folder);
    if (message.contains(u"%1"_s))
        message = message.arg(dir->path());
    QVERIFY2(folder.error().contains(message), qPrintable(folder.error()));
}

void TestImageFolder::holdsOutATestSetWithoutTestFolder()
{
    auto dir = test::scratchDir();
    for (int i = 0; i < 10; ++i) {
        save(*dir, u"train/dark/%1.png"_s.arg(i), solid(4, 4, QColor(i, i, i)));
        save(*dir, u"train/light/%1.png"_s.arg(i), solid(4, 4, QColor(200 + i, 200 + i, 200 + i)));
    }
    auto without = imagesSpec(dir->path());
    QVERIFY(without);
    auto refused = loadDataset(*without, std::nullopt, {1, 4, 4});
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(u"has no test/ folder to validate with"_s) &&
                 refused.error().contains(u"dataset.test_fraction"_s),
             qPrintable(refused.error()));

    auto spec = imagesSpec(dir->path(), {{u"test_fraction"_s, 0.25}, {u"split_seed"_s, 3}});
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    auto split = loadDataset(*spec, std::nullopt, {1, 4, 4});
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.size(), qint64(15));
    QCOMPARE(split->test.size(), qint64(5));
    QCOMPARE(split->notes.size(), 1); // the hold-out keeps the import's notes

    // limit_train's first samples hold both classes, since the classes are interleaved.
    save(*dir, u"test/dark/1.png"_s, solid(4, 4, Qt::black));
    save(*dir, u"test/light/1.png"_s, solid(4, 4, Qt::white));
    auto limited = loadDataset(*without, 2, {1, 4, 4});
    QVERIFY2(limited, qPrintable(limited ? QString() : limited.error()));
    QCOMPARE(limited->train.classCounts(2), (std::vector<qint64>{1, 1}));
}

void TestImageFolder::loadsThroughTheSpec()
{
    auto dir = test::scratchDir();
    writeAnimals(*dir);
    const QJsonObject normalize{{u"mean"_s, QJsonArray{0.5}}, {u"std"_s, QJsonArray{0.5}}};
    auto spec = imagesSpec(dir->path(), {{u"test_fraction"_s, 0.5}, {u"normalize"_s, normalize}});
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    QCOMPARE(spec->format, DatasetSpec::Format::Images);
    QCOMPARE(spec->normalizeMean, (QList<double>{0.5}));
    QCOMPARE(DatasetSpec::fromJson(spec->toJson()).value(), *spec);

    // The model's input_shape says what every image becomes.
    for (const QList<qint64>& bad :
         {QList<qint64>{}, QList<qint64>{784}, QList<qint64>{2, 8, 8}, QList<qint64>{3, 0, 8}}) {
        auto refused = loadDataset(*spec, std::nullopt, bad);
        QVERIFY(!refused);
        QVERIFY2(refused.error().contains(u"must be [C, H, W] with C 1 (grayscale) or 3 (RGB)"_s),
                 qPrintable(refused.error()));
    }
    auto split = loadDataset(*spec, std::nullopt, {1, 5, 7});
    QVERIFY2(split, qPrintable(split ? QString() : split.error()));
    QCOMPARE(split->train.sampleShape(), (QList<qint64>{1, 5, 7}));
    QCOMPARE(split->test.sampleShape(), (QList<qint64>{1, 5, 7}));
    // Normalised to [-1, 1]: (v / 255 - 0.5) / 0.5, in both sets.
    for (const Dataset* set : {&split->train, &split->test}) {
        QCOMPARE(set->sampleType(), DType::F32);
        for (const float v : set->bundle().values<float>(set->x()))
            QVERIFY2(v >= -1.0f && v <= 1.0f, qPrintable(QString::number(v)));
    }

    // Fields images does not take, and ones only it takes.
    QVERIFY(!imagesSpec(dir->path(), {{u"train"_s, u"a.csv"_s}}));
    QVERIFY(!imagesSpec(dir->path(), {{u"on_bad_file"_s, u"ignore"_s}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{u"format"_s, u"images"_s}}));
    QVERIFY(!DatasetSpec::fromJson(QJsonObject{{u"format"_s, u"csv"_s},
                                               {u"train"_s, u"a"_s},
                                               {u"test"_s, u"b"_s},
                                               {u"label"_s, u"y"_s},
                                               {u"on_bad_file"_s, u"skip"_s}}));
}

void TestImageFolder::normalizesPerChannel()
{
    auto dir = test::scratchDir();
    save(*dir, u"red/1.png"_s, solid(2, 2, QColor(255, 0, 51)));
    auto folder = ImageFolder::read(dir->path(), shape(3, 2, 2));
    QVERIFY2(folder, qPrintable(folder ? QString() : folder.error()));
    auto normalized = normalize(folder->split.train, {0.1, 0.2, 0.3}, {0.5, 0.25, 2.0});
    QVERIFY2(normalized, qPrintable(normalized ? QString() : normalized.error()));
    QCOMPARE(normalized->sampleType(), DType::F32);
    QCOMPARE(normalized->sampleShape(), (QList<qint64>{3, 2, 2}));
    QCOMPARE(normalized->label(0), qint64(0));
    // Pixels scaled to [0, 1] first: (1 - 0.1) / 0.5, (0 - 0.2) / 0.25, (0.2 - 0.3) / 2 for each of the 4
    // pixels.
    for (qint64 i = 0; i < 4; ++i) {
        QCOMPARE(value(*normalized, 0, i), 1.8f);
        QCOMPARE(value(*normalized, 0, 4 + i), -0.8f);
        QCOMPARE(value(*normalized, 0, 8 + i), float((51.0 / 255.0 - 0.3) / 2.0));
    }
    // One value for every channel.
    auto shared = normalize(folder->split.train, {0.5}, {0.5});
    QVERIFY(shared);
    QCOMPARE(value(*shared, 0, 0), 1.0f);
    QCOMPARE(value(*shared, 0, 4), -1.0f);
}

void TestImageFolder::normalizesFloatSamples()
{
    // A table's features are its channels: [F] samples, one mean and std per feature.
    TensorBundle bundle;
    QVERIFY(bundle.addValues<float>(u"x"_s, DType::F32, {2, 2}, std::vector<float>{1, 10, 3, 30}));
    QVERIFY(bundle.addValues<qint64>(u"y"_s, DType::I64, {2}, std::vector<qint64>{1, 0}));
    auto data = Dataset::fromBundle(std::move(bundle), u"table"_s);
    QVERIFY(data);
    auto normalized = normalize(*data, {2, 20}, {1, 10});
    QVERIFY2(normalized, qPrintable(normalized ? QString() : normalized.error()));
    QCOMPARE(value(*normalized, 0, 0), -1.0f);
    QCOMPARE(value(*normalized, 0, 1), -1.0f);
    QCOMPARE(value(*normalized, 1, 0), 1.0f);
    QCOMPARE(value(*normalized, 1, 1), 1.0f);
    QCOMPARE(normalized->label(0), qint64(1));
    QCOMPARE(normalized->label(1), qint64(0));
}

void TestImageFolder::refusesBadNormalizeSpecs_data()
{
    QTest::addColumn<QByteArray>("normalize");
    QTest::addColumn<QString>("message");
    QTest::newRow("std zero") << R"({"mean": [0.5], "std": [0]})"_ba
                              << u"dataset.normalize.std[0]: expected a number > 0, got 0"_s;
    QTest::newRow("std negative") << R"({"mean": [0.5, 0.5], "std": [1, -2]})"_ba
                                  << u"dataset.normalize.std[1]: expected a number > 0, got -2"_s;
    QTest::newRow("std missing") << R"({"mean": [0.5]})"_ba
                                 << u"dataset.normalize.std: required field is missing"_s;
    QTest::newRow("mean a number")
        << R"({"mean": 0.5, "std": [1]})"_ba
        << u"dataset.normalize.mean: expected a list of 1 to 100000 numbers, got 0.5"_s;
    QTest::newRow("mean empty") << R"({"mean": [], "std": [1]})"_ba
                                << u"dataset.normalize.mean: expected a list of 1 to 100000 numbers"_s;
    QTest::newRow("mean a word") << R"({"mean": ["half"], "std": [1]})"_ba
                                 << u"dataset.normalize.mean[0]: expected a number, got \"half\""_s;
    QTest::newRow("lengths differ") << R"({"mean": [0.1, 0.2, 0.3], "std": [1, 2]})"_ba
                                    << u"dataset.normalize.std: holds 2 values where mean holds 3"_s;
    QTest::newRow("typo") << R"({"mean": [0.5], "sd": [1]})"_ba
                          << uR"(dataset.normalize: unknown field "sd" (did you mean "std"?))"_s;
    QTest::newRow("not an object") << R"([0.5, 0.5])"_ba << u"dataset.normalize: expected an object"_s;
}

void TestImageFolder::refusesBadNormalizeSpecs()
{
    QFETCH(QByteArray, normalize);
    QFETCH(QString, message);
    QJsonObject json =
        test::jsonObject(R"({"format": "csv", "train": "a.csv", "test": "b.csv", "label": "y"})");
    const QJsonDocument document = QJsonDocument::fromJson(normalize);
    json.insert(u"normalize"_s,
                document.isObject() ? QJsonValue(document.object()) : QJsonValue(document.array()));
    auto spec = DatasetSpec::fromJson(json);
    QVERIFY(!spec);
    QVERIFY2(spec.error().startsWith(message), qPrintable(spec.error()));
}

void TestImageFolder::refusesNormalizeThatDoesNotFitTheSamples()
{
    auto dir = test::scratchDir();
    save(*dir, u"train/a/1.png"_s, solid(4, 4, Qt::white));
    save(*dir, u"test/a/1.png"_s, solid(4, 4, Qt::white));
    auto spec = imagesSpec(dir->path(), {{u"normalize"_s, QJsonObject{{u"mean"_s, QJsonArray{0.1, 0.2}},
                                                                      {u"std"_s, QJsonArray{0.5}}}}});
    QVERIFY2(spec, qPrintable(spec ? QString() : spec.error()));
    auto refused = loadDataset(*spec, std::nullopt, {3, 4, 4});
    QVERIFY(!refused);
    QCOMPARE(refused.error(),
             u"dataset.normalize.mean holds 2 values but the samples have 3 channels (sample shape "
             u"[3, 4, 4]); give 3 values, one per channel, or one for all"_s);
    QVERIFY(loadDataset(*spec, std::nullopt, {1, 4, 4}).ok() == false);
    auto fits = imagesSpec(dir->path(), {{u"normalize"_s, QJsonObject{{u"mean"_s, QJsonArray{0.1, 0.2, 0.3}},
                                                                      {u"std"_s, QJsonArray{0.5}}}}});
    QVERIFY(fits);
    QVERIFY(loadDataset(*fits, std::nullopt, {3, 4, 4}));
}

QTEST_GUILESS_MAIN(TestImageFolder)
#include "TestImageFolder.moc"
