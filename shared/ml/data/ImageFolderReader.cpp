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
        const size_t at = out.bytes.size();
        out.bytes.resize(at + size_t(sampleBytes()));
        if (auto problem = decode(path, out.bytes.data() + at)) {
            out.bytes.resize(at);
            return problem;
        }
        ++out.count;
        return std::nullopt;
    }

    // The image's pixels, planar [C, H, W], into sampleBytes() bytes at `target`, or why the file is not an image.
    std::optional<QString> decode(const QString& path, uchar* target) const
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
        return std::nullopt;
    }

private:
    Options m_options;
};

// Every class folder of one split (DIR/train or DIR itself, DIR/test) walked in sorted order: `take(label,
// entry, path)` decodes a file or says why it is bad; bad files are skipped or fatal, and a class left without
// images is an error. Returns each class's sorted entries.
template <typename Take>
Result<std::vector<QStringList>> walkSplit(const QString& splitDir, const QStringList& classes, const Options& options,
                                           QStringList& leftOut, Take&& take)
{
    std::vector<QStringList> all(size_t(classes.size()));
    for (qsizetype label = 0; label < classes.size(); ++label) {
        const QDir folder(QDir(splitDir).filePath(classes[label]));
        QStringList& entries = all[size_t(label)];
        entries = sorted(folder.entryList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot, QDir::NoSort));
        if (entries.isEmpty())
            return fail(
                u"%1 is an empty class folder; add the images of class \"%2\" or remove the folder"_s.arg(
                    folder.path(), classes[label]));
        qsizetype bad = 0, good = 0;
        QString firstBad;
        for (qsizetype entry = 0; entry < entries.size(); ++entry) {
            const QString path = folder.filePath(entries[entry]);
            std::optional<QString> problem =
                QFileInfo(path).isDir()
                    ? std::optional(u"is a folder; images lie directly in their class folder"_s)
                    : take(label, entry, path);
            if (!problem) {
                ++good;
                continue;
            }
            if (options.stopAtBadFile)
                return fail(
                    u"%1: %2; with dataset.on_bad_file \"stop\" one bad file stops the import: fix or remove "
                    u"it, or set \"on_bad_file\": \"skip\" to leave such files out"_s.arg(path, *problem));
            qCWarning(lcImages).noquote() << path << "left out of the dataset:" << *problem;
            leftOut << u"%1: %2"_s.arg(path, *problem);
            if (bad++ == 0)
                firstBad = leftOut.last();
        }
        if (good == 0)
            return fail(u"%1 holds no image Qt can read (%2 files left out, the first %3); every class needs "
                        u"at least "
                        u"one image"_s.arg(folder.path(), QString::number(bad), firstBad));
    }
    return all;
}

// One split decoded into memory.
Result<Dataset> readSplit(const QString& splitDir, const QStringList& classes, const Options& options,
                          QStringList& leftOut)
{
    const Decoder decoder(options);
    std::vector<ClassPixels> pixels(size_t(classes.size()));
    auto walked = walkSplit(splitDir, classes, options, leftOut, [&](qsizetype label, qsizetype, const QString& path) {
        return decoder.append(path, pixels[size_t(label)]);
    });
    if (!walked)
        return fail(walked.error());

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

namespace {

// The folder's layout, checked: its classes, whether it has a test split, and where each split lies.
Status survey(const QString& dir, Folder& folder, QString& trainDir, QString& testDir)
{
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

    trainDir = split ? QDir(dir).filePath(u"train"_s) : dir;
    folder.classes = subfolders(trainDir);
    if (folder.classes.isEmpty())
        return fail(u"%1 holds no class folders; put the images of each class in a folder named after it "
                    u"(%1/cat/1.png, %1/dog/1.png)"_s.arg(trainDir));
    if (folder.classes.size() > Dataset::kLabelLimit)
        return fail(u"%1 holds %2 class folders, more than the %3 classes a model may have"_s.arg(
            trainDir, QString::number(folder.classes.size()), QString::number(Dataset::kLabelLimit)));
    folder.hasTestSplit = split && top.contains(u"test"_s);
    testDir = QDir(dir).filePath(u"test"_s);
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

    return {};
}

// The training split read twice: decoded once when opened, to know which files are images and so every label,
// then again one image at a time by readSamples(), in the interleaved order of the in-memory read.
class FolderSource final : public SampleSource
{
public:
    FolderSource(QString splitDir, QStringList classes, const Options& options)
        : m_splitDir(std::move(splitDir)), m_classes(std::move(classes)), m_options(options)
    {
        m_sampleShape = {options.channels, options.height, options.width};
        m_sampleType = DType::U8;
    }

    Status survey(QStringList& leftOut)
    {
        const Decoder decoder(m_options);
        std::vector<uchar> scratch(size_t(decoder.sampleBytes()));
        m_good.assign(size_t(m_classes.size()), {});
        auto walked = walkSplit(m_splitDir, m_classes, m_options, leftOut,
                                [&](qsizetype label, qsizetype entry, const QString& path) {
                                    auto problem = decoder.decode(path, scratch.data());
                                    if (!problem)
                                        m_good[size_t(label)].push_back(qint32(entry));
                                    return problem;
                                });
        if (!walked)
            return fail(walked.error());
        m_entries = std::move(*walked);
        forEachInOrder([&](size_t label, qsizetype) { m_labels.push_back(qint64(label)); });
        return {};
    }

    Status readSamples(const Sink& sink) override
    {
        const Decoder decoder(m_options);
        std::vector<uchar> pixels(size_t(decoder.sampleBytes()));
        qint64 index = 0;
        Status status;
        forEachInOrder([&](size_t label, qsizetype entry) {
            if (!status)
                return;
            const QString path = QDir(QDir(m_splitDir).filePath(m_classes[qsizetype(label)])).filePath(m_entries[label][entry]);
            if (auto problem = decoder.decode(path, pixels.data())) {
                status = fail(u"%1: %2; it changed while the folder was imported: import it again"_s.arg(path, *problem));
                return;
            }
            status = sink(index++, QByteArrayView(reinterpret_cast<const char*>(pixels.data()), qsizetype(pixels.size())));
        });
        return status;
    }

private:
    // Image i of every class, then image i + 1: each class's good entries in file order, interleaved.
    template <typename Each>
    void forEachInOrder(Each&& each) const
    {
        size_t longest = 0;
        for (const auto& good : m_good)
            longest = std::max(longest, good.size());
        for (size_t i = 0; i < longest; ++i)
            for (size_t label = 0; label < m_good.size(); ++label)
                if (i < m_good[label].size())
                    each(label, qsizetype(m_good[label][i]));
    }

    QString m_splitDir;
    QStringList m_classes;
    Options m_options;
    std::vector<QStringList> m_entries;     // each class's sorted entries
    std::vector<std::vector<qint32>> m_good; // which of them decoded
};

} // namespace

Result<Folder> read(const QString& dir, const Options& options)
{
    Q_ASSERT(options.channels == 1 || options.channels == 3);
    Folder folder;
    QString trainDir, testDir;
    if (Status surveyed = survey(dir, folder, trainDir, testDir); !surveyed)
        return fail(surveyed.error());
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

Result<std::unique_ptr<SampleSource>> openSource(const QString& dir, const Options& options, Folder& folder)
{
    Q_ASSERT(options.channels == 1 || options.channels == 3);
    QString trainDir, testDir;
    if (Status surveyed = survey(dir, folder, trainDir, testDir); !surveyed)
        return fail(surveyed.error());
    auto source = std::make_unique<FolderSource>(trainDir, folder.classes, options);
    if (Status surveyed = source->survey(folder.leftOut); !surveyed)
        return fail(surveyed.error());
    if (folder.hasTestSplit) {
        auto test = readSplit(testDir, folder.classes, options, folder.leftOut);
        if (!test)
            return fail(test.error());
        folder.split.test = std::move(*test);
    }
    return std::unique_ptr<SampleSource>(std::move(source));
}

} // namespace gleaner::ml::ImageFolder
