#pragma once
// Reads and writes safetensors files (https://github.com/huggingface/safetensors), the one container Gleaner
// uses for weights, optimizer checkpoints, dataset shards and uploads. Files come from other machines, so the
// reader trusts nothing: every malformed file is refused with a message that names the problem and the
// tensor.
//
// Layout: an 8-byte little-endian length N, N bytes of UTF-8 JSON header, then the data buffer. The header
// maps each tensor name to {"dtype", "shape", "data_offsets": [BEGIN, END]} (offsets relative to the data
// buffer), plus an optional "__metadata__" object of string values.

#include "Result.h"
#include "tensor/TensorBundle.h"

#include <QByteArray>
#include <QString>

namespace gleaner::SafeTensors {

// The reference implementation's limit: a longer header is refused before it is parsed.
inline constexpr qint64 kMaxHeaderBytes = 100 * 1000 * 1000;

// Parses a whole file held in memory without copying it: the bundle shares `fileBytes` (implicitly shared
// QByteArray) and each entry's offset is absolute into it, so TensorBundle::buffer() is the file itself.
// Entries keep the order of the file's header (which is the order the bundle had when Gleaner wrote it),
// not the order of their bytes in the data buffer.
//
// Accepted beyond the reference reader, because Qt's JSON parser allows them: numbers written as whole-valued
// floats ("3.0", "1e2") and raw control characters inside strings. Unknown keys inside a tensor entry are
// ignored, as the reference does. Tensors are not required to be aligned; a bundle whose tensors are
// misaligned for their type must be read through data() rather than values<T>().
Result<TensorBundle> parse(QByteArray fileBytes);

// A file's header alone: its tensors with offsets absolute into the file, its metadata, and where the data
// buffer starts. Every check of parse() that the header can answer is made against `fileSize`, so a file
// whose header passes holds exactly the bytes its tensors claim.
struct Header
{
    QList<TensorEntry> entries;
    QMap<QString, QString> metadata;
    qint64 dataStart = 0;
};
// `fileStart` holds the file's first bytes, at least the length and the header it announces.
Result<Header> parseHeader(QByteArrayView fileStart, qint64 fileSize);
// Reads and parses the header of `path` without reading its tensors. Messages start with the path.
Result<Header> loadHeader(const QString& path);

// Reads `path` into one buffer (a single copy, from the kernel) and parses it. Messages start with the path.
Result<TensorBundle> load(const QString& path);

// Whether the writer can represent `bundle`: unique names that are valid Unicode and not "__metadata__",
// valid Unicode metadata, entries whose shape, byte size and offset agree with the buffer (a bundle made
// with TensorBundle::fromBuffer is trusted by TensorBundle, not here), and a header within kMaxHeaderBytes.
Status checkWritable(const TensorBundle& bundle);

// The file's bytes. The header is padded with spaces so that the data starts at a multiple of 8, and tensors
// are laid out by element size, largest first (stable), so each one is aligned for its type; the header lists
// them in the bundle's order. Returns an empty array (never a valid file) when checkWritable() fails.
QByteArray serialize(const TensorBundle& bundle);

// The header (with its 8-byte length) of a file holding tensors of these names, types and shapes (offset
// ignored, byteSize as the shape's) in this order, laid out as serialize() lays them out, and where each
// tensor's bytes start in the file. A writer that fills in the tensors at those offsets writes exactly the
// file serialize() would.
struct Layout
{
    QByteArray lengthAndHeader;
    QList<qint64> offsets; // per entry, absolute in the file
};
Result<Layout> layout(const QList<TensorEntry>& entries, const QMap<QString, QString>& metadata);

// Writes the same bytes as serialize() to `path` atomically (QSaveFile), streaming the header and then each
// tensor's bytes, so the file is never held twice in memory. Messages start with the path.
Status save(const QString& path, const TensorBundle& bundle);

} // namespace gleaner::SafeTensors
