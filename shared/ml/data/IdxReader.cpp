#include "ml/data/IdxReader.h"

#include <QFile>
#include <QFileInfo>

#include <zlib.h>

#include <algorithm>

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

Result<IdxArray> parse(const QByteArray& bytes, const QString& what)
{
    if (bytes.size() < 4)
        return fail(
            QStringLiteral("%1: %2 bytes is too short for an IDX header").arg(what).arg(bytes.size()));
    const auto* header = reinterpret_cast<const unsigned char*>(bytes.constData());
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
    const qint64 headerBytes = 4 + 4 * qint64(dims);
    if (bytes.size() < headerBytes)
        return fail(QStringLiteral("%1: truncated IDX header").arg(what));

    IdxArray array;
    for (int i = 0; i < dims; ++i)
        array.shape.append(qint64(bigEndian32(bytes.constData() + 4 + 4 * i)));
    const auto count = shapeElementCount(array.shape);
    if (!count)
        return fail(QStringLiteral("%1: IDX shape %2 is too large").arg(what, shapeToString(array.shape)));
    const qint64 available = bytes.size() - headerBytes;
    if (available != *count)
        return fail(QStringLiteral("%1: IDX shape %2 needs %3 bytes of data, the file has %4%5")
                        .arg(what, shapeToString(array.shape))
                        .arg(*count)
                        .arg(available)
                        .arg(available < *count ? QStringLiteral(" (truncated?)") : QString()));
    array.data = bytes.mid(qsizetype(headerBytes));
    return array;
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

} // namespace gleaner::ml::Idx
