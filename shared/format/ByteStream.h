#pragma once
// Reads a stretch of a file front to back through a bounded buffer, inflating it on the way when it is gzip or
// raw deflate (a ZIP member): how the dataset import reads training files larger than memory. Only the buffer
// (kChunkBytes) and zlib's window are held, whatever the file's size; nothing is memory-mapped, so the pages
// read never count as the process's own memory.

#include "Result.h"

#include <QFile>
#include <QString>

#include <memory>

typedef struct z_stream_s z_stream;

namespace gleaner {

class ByteStream
{
public:
    enum class Coding { Plain, Gzip, Deflate };
    static constexpr qint64 kChunkBytes = qint64(1) << 20;

    // `length` bytes of `path` from `offset` (-1: to the end of the file). Messages start with the path.
    static Result<std::unique_ptr<ByteStream>> open(const QString& path, qint64 offset, qint64 length, Coding coding);
    ~ByteStream();
    ByteStream(const ByteStream&) = delete;
    ByteStream& operator=(const ByteStream&) = delete;

    // Fills `out` with up to `size` bytes; fewer only where the data ends. Errors name why, without the path
    // (the caller knows what the stretch is): "the compressed data ends early (truncated file)", zlib's word.
    Result<qint64> read(char* out, qint64 size);
    // Reads and drops up to `size` bytes; returns how many there were.
    Result<qint64> skip(qint64 size);
    // Whether the data has ended (all of a plain stretch read, or the compressed stream's end reached).
    bool atEnd() const { return m_ended; }
    // Bytes produced so far, and their CRC-32 (what a ZIP member's directory entry holds).
    qint64 produced() const { return m_produced; }
    quint32 crc32() const { return m_crc; }

private:
    ByteStream() = default;
    Result<qint64> readPlain(char* out, qint64 size);
    Result<qint64> readInflated(char* out, qint64 size);

    QFile m_file;
    Coding m_coding = Coding::Plain;
    qint64 m_left = 0; // bytes of the stretch not yet read from the file
    QByteArray m_input;
    std::unique_ptr<z_stream> m_zlib;
    bool m_ended = false;
    qint64 m_produced = 0;
    quint32 m_crc = 0;
};

} // namespace gleaner
