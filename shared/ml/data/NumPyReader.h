#pragma once
// Reader for NumPy's own files: `.npy` (one array) and `.npz` (a ZIP archive of `.npy` members, as np.savez and
// np.savez_compressed write them). Our own reader, not NumPy's: a `.npy` may hold Python objects that only pickle
// can restore, and Gleaner never loads pickle, so such a file is refused by name like every other malformed one.
//
// Accepted: format versions 1.0, 2.0 and 3.0; little-endian or byte-sized element types (bool, u1, i1, i2, u2,
// f2, i4, u4, f4, f8, i8, u8); C order (Fortran order only for arrays of at most one dimension, where it is the
// same thing); any shape, including 0-d. The data must be exactly the shape's bytes. `.npz` members are stored or
// deflated, ZIP64 included, and their CRC-32 is checked.

#include "Result.h"
#include "ml/data/SampleSource.h"
#include "tensor/TensorBundle.h"

#include <QByteArray>
#include <QString>

#include <memory>

namespace gleaner::ml::NumPy {

// numpy writes headers of a few hundred bytes; a longer one is refused before it is parsed.
inline constexpr qint64 kMaxHeaderBytes = 64 * 1024;

// What an `.npy` header says: the array's type and shape, and where its data starts.
struct NpyHeader
{
    DType dtype = DType::U8;
    QList<qint64> shape;
    qint64 dataStart = 0;
};
// The header at the start (`start`, at least the header's bytes) of an `.npy` of `totalBytes` bytes, checked as
// parseNpyInto() checks it, the data's length included.
Result<NpyHeader> parseNpyHeader(QByteArrayView start, qint64 totalBytes, const QString& what);

// Parses one `.npy` held in memory and appends it to `bundle` as `name`. `what` starts every message.
Status parseNpyInto(TensorBundle& bundle, const QString& name, QByteArrayView bytes, const QString& what);
// Reads an `.npy` file as a bundle of one tensor named `name`.
Result<TensorBundle> loadNpy(const QString& path, const QString& name);
// Reads an `.npz` file: each member `K.npy` becomes tensor K, in the archive's order. `maxBytes` bounds what
// its members inflate to, together.
Result<TensorBundle> loadNpz(const QString& path, qint64 maxBytes = qint64(16) << 30);
// The same for an archive held in memory.
Result<TensorBundle> parseNpz(QByteArrayView archive, const QString& what, qint64 maxBytes = qint64(16) << 30);

// Arrays `xName` (samples) and `yName` (labels) of a `.npz` as a source for the streamed import: the archive is
// mapped, every member's header checked and the labels read when it opens; the samples, stored or deflated, are
// read by readSamples(), which checks their CRC-32 at the end. float64 samples come as float32, as loadDataset
// gives them; messages are those of loadNpz() and loadDataset().
Result<std::unique_ptr<SampleSource>> openNpzSource(const QString& path, const QString& xName, const QString& yName);
// Only the arrays `xName` and `yName` of a `.npz` (every member's header is still checked), for a test set kept
// in an archive beside a training set larger than memory.
Result<TensorBundle> loadNpzArrays(const QString& path, const QString& xName, const QString& yName);

} // namespace gleaner::ml::NumPy
