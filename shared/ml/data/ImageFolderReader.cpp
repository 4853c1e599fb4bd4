#include "ml/data/ImageFolderReader.h"

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QImageReader>
#include <QLoggingCategory>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

using namespace Qt::StringLiterals;

namespace gleaner::ml::ImageFolder {
namespace {

Q_LOGGING_CATEGORY(lcImages, "gleaner.ml.data")

// Class names quoted in messages: enough to recognise a folder, never a wall of text.
constexpr qsizetype kNamesShown = 20;

QString nameList(const QStringList& names)
{
    QStringList shown = names.first(std::min(names.size(), kNamesShown));
    if (names.size() > kNamesShown)
        shown << u"and %1 more"_s.arg(names.size() - kNamesShown);
    return shown.join(u", "_s);
}

// Sorted by UTF-16 code units, not by locale: the same folder gives the same labels on every machine.
QStringList sorted(QStringList names)
{
    std::sort(names.begin(), names.end());
    return names;
}

QStringList subfolders(const QString& path)
{
    return sorted(QDir(path).entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::NoSort));
}

// One decoded class: its samples one after the other, C * H * W bytes each.
struct ClassPixels
{
    std::vector<uchar> bytes;
    qint64 count = 0;
};

class Decoder
{
public:
    explicit Decoder(const Options& options) : m_options(options) {}

    qint64 sampleBytes() const { return m_options.channels * m_options.height * m_options.width; }

    // Appends the image's pixels, planar [C, H, W], or says why the file is not an image.
    std::optional<QString> append(const QString& path, ClassPixels& out) const
    {
        QImageReader reader(path);
        reader.setAutoTransform(true); // a camera's EXIF orientation, as image viewers show the photo
        QImage image;
        if (!reader.read(&image))
            return u"not an image Qt can read (%1)"_s.arg(reader.errorString());
        const int width = int(m_options.width), height = int(m_options.height);
        image =
            image.scaled(width, height, Qt::IgnoreAspectRatio, Qt::SmoothTransformation)
                .convertToFormat(m_options.channels == 1 ? QImage::Format_Grayscale8 : QImage::Format_RGB888);
        if (image.isNull() || image.width() != width || image.height() != height)
            return u"could not be converted to %1x%2 pixels (out of memory?)"_s.arg(width).arg(height);

        const size_t at = out.bytes.size();
        out.bytes.resize(at + size_t(sampleBytes()));
        uchar* target = out.bytes.data() + at;
        const qint64 plane = qint64(width) * height;
        for (int y = 0; y < height; ++y) {
            const uchar* line = image.constScanLine(y);
            uchar* row = target + qint64(y) * width;
            if (m_options.channels == 1) {
                std::memcpy(row, line, size_t(width));
                continue;
            }
            for (int x = 0; x < width; ++x)
                for (int c = 0; c < 3; ++c)
                    row[c * plane + x] = line[3 * x + c];
        }
        ++out.count;
        return std::nullopt;
    }

private:
    Options m_options;
};

// One split (DIR/train or DIR itself, DIR/test): every class folder decoded, bad files skipped or fatal.
Result<Dataset> readSplit(const QString& splitDir, const QStringList& classes, const Options& options,
                          QStringList& leftOut)
{
    const Decoder decoder(options);
    std::vector<ClassPixels> pixels(size_t(classes.size()));
    for (qsizetype label = 0; label < classes.size(); ++label) {
        const QDir folder(QDir(splitDir).filePath(classes[label]));
        QStringList entries =
            sorted(folder.entryList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot, QDir::NoSort));
        if (entries.isEmpty())
            return fail(
                u"%1 is an empty class folder; add the images of class \"%2\" or remove the folder"_s.arg(
                    folder.path(), classes[label]));
        qsizetype bad = 0;
        QString firstBad;
        for (const QString& name : std::as_const(entries)) {
            const QString path = folder.filePath(name);
            std::optional<QString> problem =
                QFileInfo(path).isDir()
                    ? std::optional(u"is a folder; images lie directly in their class folder"_s)
                    : decoder.append(path, pixels[size_t(label)]);
            if (!problem)
                continue;
            if (options.stopAtBadFile)
                return fail(
                    u"%1: %2; with dataset.on_bad_file \"stop\" one bad file stops the import: fix or remove "
                    u"it, or set \"on_bad_file\": \"skip\" to leave such files out"_s.arg(path, *problem));
            qCWarning(lcImages).noquote() << path << "left out of the dataset:" << *problem;
            leftOut << u"%1: %2"_s.arg(path, *problem);
            if (bad++ == 0)
                firstBad = leftOut.last();
        }
        if (pixels[size_t(label)].count == 0)
            return fail(u"%1 holds no image Qt can read (%2 files left out, the first %3); every class needs "
                        u"at least "
                        u"one image"_s.arg(folder.path(), QString::number(bad), firstBad));
    }

    // Interleaved by class, each class in file order: image i of every class, then image i + 1.
    qint64 total = 0;
    for (const ClassPixels& one : pixels)
        total += one.count;
    const qint64 sampleBytes = decoder.sampleBytes();
    TensorBundle bundle;
    // Both tensors first: adding one may move the buffer, so the pointers are taken afterwards.
    bundle.addZeroed(u"x"_s, DType::U8, {total, options.channels, options.height, options.width});
    bundle.addZeroed(u"y"_s, DType::I64, {total});
    uchar* x = reinterpret_cast<uchar*>(bundle.mutableData(bundle.entries().at(0)));
    auto* y = reinterpret_cast<qint64*>(bundle.mutableData(bundle.entries().at(1)));
    qint64 written = 0;
    for (qint64 index = 0; written < total; ++index) {
        for (size_t label = 0; label < pixels.size(); ++label) {
            if (index >= pixels[label].count)
                continue;
            std::memcpy(x + written * sampleBytes, pixels[label].bytes.data() + index * sampleBytes,
                        size_t(sampleBytes));
            y[written++] = qint64(label);
        }
    }
    return Dataset::fromBundle(std::move(bundle), splitDir);
}

} // namespace

Result<Folder> read(const QString& dir, const Options& options)
{
    Q_ASSERT(options.channels == 1 || options.channels == 3);
    if (!QFileInfo(dir).isDir())
        return fail(
            u"%1: folder does not exist; dataset.dir names a folder that holds one folder of images per "
            u"class (%1/cat/1.png), or train/ and test/ folders that do"_s.arg(dir));
    const QStringList top = subfolders(dir);
    const bool split = top.contains(u"train"_s);
    if (!split && top.contains(u"test"_s))
        return fail(
            u"%1 holds test/ but no train/; put the training images in %1/train/<class>/ beside it"_s.arg(
                dir));
    if (split) {
        QStringList others = top;
        others.removeAll(u"train"_s);
        others.removeAll(u"test"_s);
        if (!others.isEmpty())
            return fail(
                u"%1 holds train/ and also %2; with a train/ folder every class folder lies inside train/ "
                u"and test/"_s.arg(dir, nameList(others)));
    }

    Folder folder;
    const QString trainDir = split ? QDir(dir).filePath(u"train"_s) : dir;
    folder.classes = subfolders(trainDir);
    if (folder.classes.isEmpty())
        return fail(u"%1 holds no class folders; put the images of each class in a folder named after it "
                    u"(%1/cat/1.png, %1/dog/1.png)"_s.arg(trainDir));
    if (folder.classes.size() > Dataset::kLabelLimit)
        return fail(u"%1 holds %2 class folders, more than the %3 classes a model may have"_s.arg(
            trainDir, QString::number(folder.classes.size()), QString::number(Dataset::kLabelLimit)));
    folder.hasTestSplit = split && top.contains(u"test"_s);
    const QString testDir = QDir(dir).filePath(u"test"_s);
    if (folder.hasTestSplit) {
        const QStringList testClasses = subfolders(testDir);
        QStringList unknown, missing;
        for (const QString& name : testClasses)
            if (!folder.classes.contains(name))
                unknown << name;
        for (const QString& name : std::as_const(folder.classes))
            if (!testClasses.contains(name))
                missing << name;
        if (!unknown.isEmpty())
            return fail(
                u"%1 holds class folders that %2 lacks: %3; both splits need the same classes (%2 has %4)"_s
                    .arg(testDir, trainDir, nameList(unknown), nameList(folder.classes)));
        if (!missing.isEmpty())
            return fail(u"%1 lacks the class folders %2 that %3 has; both splits need the same classes"_s.arg(
                testDir, nameList(missing), trainDir));
    }

    auto train = readSplit(trainDir, folder.classes, options, folder.leftOut);
    if (!train)
        return fail(train.error());
    folder.split.train = std::move(*train);
    if (folder.hasTestSplit) {
        auto test = readSplit(testDir, folder.classes, options, folder.leftOut);
        if (!test)
            return fail(test.error());
        folder.split.test = std::move(*test);
    }
    return folder;
}

} // namespace gleaner::ml::ImageFolder
