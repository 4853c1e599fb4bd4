#include "format/ByteStream.h"

#include <zlib.h>

#include <algorithm>

namespace gleaner {

Result<std::unique_ptr<ByteStream>> ByteStream::open(const QString& path, qint64 offset, qint64 length, Coding coding)
{
    std::unique_ptr<ByteStream> stream(new ByteStream);
    stream->m_file.setFileName(path);
    // Unbuffered: the stream's own chunk is the only buffer.
    if (!stream->m_file.open(QIODevice::ReadOnly | QIODevice::Unbuffered))
        return fail(QStringLiteral("%1: cannot open: %2").arg(path, stream->m_file.errorString()));
    const qint64 size = stream->m_file.size();
    if (offset < 0 || offset > size || (length >= 0 && length > size - offset))
        return fail(QStringLiteral("%1: bytes [%2, +%3) lie outside the %4-byte file").arg(path).arg(offset).arg(length).arg(size));
    if (!stream->m_file.seek(offset))
        return fail(QStringLiteral("%1: cannot seek to byte %2: %3").arg(path).arg(offset).arg(stream->m_file.errorString()));
    stream->m_left = length >= 0 ? length : size - offset;
    stream->m_coding = coding;
    stream->m_crc = quint32(::crc32(0L, Z_NULL, 0));
    if (coding != Coding::Plain) {
        stream->m_zlib = std::make_unique<z_stream>();
        *stream->m_zlib = z_stream{};
        if (inflateInit2(stream->m_zlib.get(), coding == Coding::Gzip ? 16 + MAX_WBITS : -MAX_WBITS) != Z_OK) {
            stream->m_zlib.reset();
            return fail(QStringLiteral("%1: cannot start zlib").arg(path));
        }
    }
    return stream;
}

ByteStream::~ByteStream()
{
    if (m_zlib)
        inflateEnd(m_zlib.get());
}

Result<qint64> ByteStream::read(char* out, qint64 size)
{
    auto got = m_coding == Coding::Plain ? readPlain(out, size) : readInflated(out, size);
    if (!got)
        return got;
    for (qint64 done = 0; done < *got;) {
        const qint64 chunk = std::min<qint64>(*got - done, 1 << 30);
        m_crc = quint32(::crc32(m_crc, reinterpret_cast<const Bytef*>(out + done), uInt(chunk)));
        done += chunk;
    }
    m_produced += *got;
    return got;
}

Result<qint64> ByteStream::skip(qint64 size)
{
    QByteArray scratch(qsizetype(std::min(size, kChunkBytes)), Qt::Uninitialized);
    qint64 skipped = 0;
    while (skipped < size) {
        auto got = read(scratch.data(), std::min<qint64>(size - skipped, scratch.size()));
        if (!got)
            return got;
        if (*got == 0)
            break;
        skipped += *got;
    }
    return skipped;
}

Result<qint64> ByteStream::readPlain(char* out, qint64 size)
{
    qint64 done = 0;
    while (done < size && m_left > 0) {
        const qint64 got = m_file.read(out + done, std::min(size - done, m_left));
        if (got < 0)
            return fail(QStringLiteral("read failed: %1").arg(m_file.errorString()));
        if (got == 0)
            return fail(QStringLiteral("the file ended early; was it changed while it was read?"));
        done += got;
        m_left -= got;
    }
    m_ended = m_left == 0;
    return done;
}

Result<qint64> ByteStream::readInflated(char* out, qint64 size)
{
    z_stream& z = *m_zlib;
    qint64 done = 0;
    while (done < size && !m_ended) {
        if (z.avail_in == 0 && m_left > 0) {
            m_input.resize(qsizetype(std::min(m_left, kChunkBytes)));
            const qint64 got = m_file.read(m_input.data(), m_input.size());
            if (got <= 0)
                return fail(got < 0 ? QStringLiteral("read failed: %1").arg(m_file.errorString())
                                    : QStringLiteral("the file ended early; was it changed while it was read?"));
            m_left -= got;
            z.next_in = reinterpret_cast<Bytef*>(m_input.data());
            z.avail_in = uInt(got);
        }
        const uInt room = uInt(std::min<qint64>(size - done, 1 << 30));
        z.next_out = reinterpret_cast<Bytef*>(out + done);
        z.avail_out = room;
        const int rc = inflate(&z, Z_NO_FLUSH);
        done += room - z.avail_out;
        if (rc == Z_STREAM_END) {
            m_ended = true;
        } else if (rc == Z_BUF_ERROR && z.avail_in == 0 && m_left == 0) {
            return fail(QStringLiteral("the compressed data ends early (truncated file)"));
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return fail(QString::fromLatin1(z.msg ? z.msg : "corrupt data"));
        }
    }
    return done;
}

} // namespace gleaner
