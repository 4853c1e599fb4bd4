#include "ml/data/IdxReader.h"

#include "format/ByteStream.h"

#include <QFile>
#include <QFileInfo>

#include <zlib.h>

#include <algorithm>
#include <limits>

namespace gleaner::ml::Idx {
namespace {

// The largest file we inflate: Fashion-MNIST's training images are 47 MB, ImageNet-scale IDX does not exist.
constexpr qint64 kMaxInflatedBytes = qint64(4) << 30;
constexpr qsizetype kInitialInflateBytes = qsizetype(64) << 10;
constexpr qsizetype kMaxInitialInflateBytes = qsizetype(64) << 20;

quint32 bigEndian32(const char* p)
{
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    return (quint32(u[0]) << 24) | (quint32(u[1]) << 16) | (quint32(u[2]) << 8) | quint32(u[3]);
}

Result<QByteArray> inflateGzip(const QByteArray& compressed, const QString& what)
{
    z_stream stream{};
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK)
        return fail(QStringLiteral("%1: cannot start the gzip decoder").arg(what));
    QByteArray out;
    // A first guess of 4x the compressed size, between 64 KiB and 64 MiB: a large (or hostile) file must not
    // reserve gigabytes before a byte is inflated. The buffer doubles as needed, up to kMaxInflatedBytes.
    out.resize(std::clamp<qsizetype>(compressed.size() * 4, kInitialInflateBytes, kMaxInitialInflateBytes));
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.constData()));
    stream.avail_in = uInt(compressed.size());
    qint64 produced = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        if (produced == out.size()) {
            if (out.size() >= kMaxInflatedBytes) {
                inflateEnd(&stream);
                return fail(
                    QStringLiteral("%1: inflates to more than %2 bytes; not an IDX file Gleaner can import")
                        .arg(what)
                        .arg(kMaxInflatedBytes));
            }
            out.resize(qsizetype(std::min<qint64>(out.size() * 2, kMaxInflatedBytes)));
        }
        stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
        stream.avail_out = uInt(std::min<qint64>(out.size() - produced, 1 << 30));
        const uInt before = stream.avail_out;
        rc = inflate(&stream, Z_NO_FLUSH);
        produced += before - stream.avail_out;
        if (rc == Z_STREAM_END)
            break;
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && stream.avail_in > 0)) {
            const QString reason = rc == Z_BUF_ERROR
                                       ? QStringLiteral("the compressed data ends early (truncated file)")
                                       : QString::fromLatin1(stream.msg ? stream.msg : "corrupt data");
            inflateEnd(&stream);
            return fail(QStringLiteral("%1: gzip: %2").arg(what, reason));
        }
    }
    inflateEnd(&stream);
    out.truncate(qsizetype(produced));
    return out;
}

} // namespace

Result<IdxHeader> parseHeader(QByteArrayView start, qint64 totalBytes, const QString& what)
{
    if (totalBytes < 4)
        return fail(
            QStringLiteral("%1: %2 bytes is too short for an IDX header").arg(what).arg(totalBytes));
    const auto* header = reinterpret_cast<const unsigned char*>(start.data());
    if (header[0] != 0 || header[1] != 0)
        return fail(QStringLiteral("%1: not an IDX file (the first two bytes must be zero)").arg(what));
    if (header[2] != 0x08)
        return fail(
            QStringLiteral("%1: IDX element type 0x%2 is not supported; Gleaner imports unsigned-byte "
                           "(0x08) IDX files")
                .arg(what)
                .arg(int(header[2]), 2, 16, QLatin1Char('0')));
    const int dims = header[3];
    if (dims < 1 || dims > 4)
        return fail(QStringLiteral("%1: IDX file has %2 dimensions; expected 1 to 4").arg(what).arg(dims));
    IdxHeader parsed;
    parsed.headerBytes = 4 + 4 * qint64(dims);
    if (totalBytes < parsed.headerBytes || start.size() < parsed.headerBytes)
        return fail(QStringLiteral("%1: truncated IDX header").arg(what));
    for (int i = 0; i < dims; ++i)
        parsed.shape.append(qint64(bigEndian32(start.data() + 4 + 4 * i)));
    const auto count = shapeElementCount(parsed.shape);
    if (!count)
        return fail(QStringLiteral("%1: IDX shape %2 is too large").arg(what, shapeToString(parsed.shape)));
    parsed.dataBytes = *count;
    return parsed;
}

Status checkDataBytes(const IdxHeader& header, qint64 available, const QString& what)
{
    if (available != header.dataBytes)
        return fail(QStringLiteral("%1: IDX shape %2 needs %3 bytes of data, the file has %4%5")
                        .arg(what, shapeToString(header.shape))
                        .arg(header.dataBytes)
                        .arg(available)
                        .arg(available < header.dataBytes ? QStringLiteral(" (truncated?)") : QString()));
    return {};
}

Result<IdxArray> parse(const QByteArray& bytes, const QString& what)
{
    auto header = parseHeader(bytes, bytes.size(), what);
    if (!header)
        return fail(header.error());
    if (Status data = checkDataBytes(*header, bytes.size() - header->headerBytes, what); !data)
        return fail(data.error());
    return IdxArray{header->shape, bytes.mid(qsizetype(header->headerBytes))};
}

Result<IdxArray> read(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot open: %2").arg(path, file.errorString()));
    QByteArray bytes = file.readAll();
    if (file.error() != QFileDevice::NoError)
        return fail(QStringLiteral("%1: cannot read: %2").arg(path, file.errorString()));
    if (bytes.size() >= 2 && quint8(bytes[0]) == 0x1f && quint8(bytes[1]) == 0x8b) {
        auto inflated = inflateGzip(bytes, path);
        if (!inflated)
            return fail(inflated.error());
        bytes = std::move(*inflated);
    }
    return parse(bytes, path);
}

Result<Dataset> importPair(const QString& imagesPath, const QString& labelsPath)
{
    auto images = read(imagesPath);
    if (!images)
        return fail(images.error());
    auto labels = read(labelsPath);
    if (!labels)
        return fail(labels.error());
    if (images->shape.size() != 3)
        return fail(QStringLiteral("%1: expected images of shape [N, height, width], got %2")
                        .arg(imagesPath, shapeToString(images->shape)));
    if (labels->shape.size() != 1)
        return fail(QStringLiteral("%1: expected labels of shape [N], got %2")
                        .arg(labelsPath, shapeToString(labels->shape)));
    if (labels->shape[0] != images->shape[0])
        return fail(QStringLiteral("%1 holds %2 images but %3 holds %4 labels; they must pair one to one")
                        .arg(imagesPath)
                        .arg(images->shape[0])
                        .arg(labelsPath)
                        .arg(labels->shape[0]));
    std::vector<qint64> y(size_t(labels->shape[0]));
    for (size_t i = 0; i < y.size(); ++i)
        y[i] = quint8(labels->data[qsizetype(i)]);
    return Dataset::fromBytes(images->data, {1, images->shape[1], images->shape[2]}, y,
                              QFileInfo(imagesPath).fileName());
}

namespace {

// An IDX image file read as it is needed: its header when opened, its samples in readSamples().
class IdxSource final : public SampleSource
{
public:
    IdxSource(QString path, ByteStream::Coding coding, IdxHeader header)
        : m_path(std::move(path)), m_coding(coding), m_header(std::move(header))
    {
    }

    Status readSamples(const Sink& sink) override
    {
        auto stream = ByteStream::open(m_path, 0, -1, m_coding);
        if (!stream)
            return fail(stream.error());
        ByteStream& in = **stream;
        const auto problem = [&](const QString& why) { return fail(QStringLiteral("%1: gzip: %2").arg(m_path, why)); };
        if (auto skipped = in.skip(m_header.headerBytes); !skipped)
            return problem(skipped.error());
        const qint64 stride = sampleBytes();
        if (stride == 0) { // images of no pixels: nothing to read but the check of the length
            for (qint64 index = 0; index < size(); ++index)
                if (Status taken = sink(index, {}); !taken)
                    return taken;
        }
        const qint64 perChunk = std::max<qint64>(1, ByteStream::kChunkBytes / std::max<qint64>(stride, 1));
        QByteArray chunk(qsizetype(perChunk * stride), Qt::Uninitialized);
        qint64 index = 0;
        qint64 available = 0;
        while (stride > 0 && index < size()) {
            const qint64 want = std::min(perChunk, size() - index) * stride;
            auto got = in.read(chunk.data(), want);
            if (!got)
                return problem(got.error());
            available += *got;
            if (*got < want)
                break; // too short: named below, with the whole count
            for (qint64 k = 0; k * stride < want; ++k, ++index)
                if (Status taken = sink(index, QByteArrayView(chunk.constData() + k * stride, stride)); !taken)
                    return taken;
        }
        auto rest = in.skip(std::numeric_limits<qint64>::max());
        if (!rest)
            return problem(rest.error());
        return checkDataBytes(m_header, available + *rest, m_path);
    }

    void setLabels(std::vector<qint64> labels, QList<qint64> sampleShape)
    {
        m_labels = std::move(labels);
        m_sampleShape = std::move(sampleShape);
        m_sampleType = DType::U8;
    }

private:
    QString m_path;
    ByteStream::Coding m_coding;
    IdxHeader m_header;
};

} // namespace

Result<std::unique_ptr<SampleSource>> openSource(const QString& imagesPath, const QString& labelsPath)
{
    QFile file(imagesPath);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot open: %2").arg(imagesPath, file.errorString()));
    const QByteArray magic = file.read(2);
    const bool gzip = magic.size() == 2 && quint8(magic[0]) == 0x1f && quint8(magic[1]) == 0x8b;
    const qint64 fileSize = file.size();
    file.close();
    const auto coding = gzip ? ByteStream::Coding::Gzip : ByteStream::Coding::Plain;
    auto stream = ByteStream::open(imagesPath, 0, -1, coding);
    if (!stream)
        return fail(stream.error());
    // The header's at most 4 + 4 * 4 bytes; of a gzip file the total is known only once it is all inflated
    // (readSamples() checks it then).
    QByteArray start(20, Qt::Uninitialized);
    auto got = (*stream)->read(start.data(), start.size());
    if (!got)
        return fail(QStringLiteral("%1: gzip: %2").arg(imagesPath, got.error()));
    start.truncate(qsizetype(*got));
    const qint64 total = !gzip ? fileSize : (*stream)->atEnd() ? *got : std::numeric_limits<qint64>::max();
    auto header = parseHeader(start, total, imagesPath);
    if (!header)
        return fail(header.error());
    if (!gzip)
        if (Status data = checkDataBytes(*header, fileSize - header->headerBytes, imagesPath); !data)
            return fail(data.error());

    auto labels = read(labelsPath);
    if (!labels)
        return fail(labels.error());
    if (header->shape.size() != 3)
        return fail(QStringLiteral("%1: expected images of shape [N, height, width], got %2")
                        .arg(imagesPath, shapeToString(header->shape)));
    if (labels->shape.size() != 1)
        return fail(QStringLiteral("%1: expected labels of shape [N], got %2")
                        .arg(labelsPath, shapeToString(labels->shape)));
    if (labels->shape[0] != header->shape[0])
        return fail(QStringLiteral("%1 holds %2 images but %3 holds %4 labels; they must pair one to one")
                        .arg(imagesPath)
                        .arg(header->shape[0])
                        .arg(labelsPath)
                        .arg(labels->shape[0]));
    auto y = Dataset::labelsFrom(DType::U8, labels->data, QFileInfo(imagesPath).fileName());
    if (!y)
        return fail(y.error());
    auto source = std::make_unique<IdxSource>(imagesPath, coding, *header);
    source->setLabels(std::move(*y), {1, header->shape[1], header->shape[2]});
    return std::unique_ptr<SampleSource>(std::move(source));
}

} // namespace gleaner::ml::Idx
