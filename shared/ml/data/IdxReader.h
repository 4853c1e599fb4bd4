#pragma once
// Reader for the IDX format of the MNIST family (Fashion-MNIST among them), plain or gzip-compressed.
// Only unsigned-byte IDX files (type 0x08) are accepted: that is what every MNIST-style image and label file
// is.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "ml/data/SampleSource.h"

#include <QByteArray>
#include <QList>

#include <memory>

namespace gleaner::ml {

struct IdxArray
{
    QList<qint64> shape; // e.g. [60000, 28, 28] for images, [60000] for labels
    QByteArray data;     // product(shape) bytes
};

struct IdxHeader
{
    QList<qint64> shape;
    qint64 headerBytes = 0; // where the data starts
    qint64 dataBytes = 0;   // product(shape)
};

namespace Idx {

// The header at the start of an IDX file of `totalBytes` (inflated) bytes, with parse()'s messages.
Result<IdxHeader> parseHeader(QByteArrayView start, qint64 totalBytes, const QString& what);
// Whether `available` bytes after the header are exactly the shape's.
Status checkDataBytes(const IdxHeader& header, qint64 available, const QString& what);

// Reads one IDX file; a gzip file (by its magic bytes, whatever its name) is inflated on the fly.
Result<IdxArray> read(const QString& path);
// Parses IDX bytes already in memory (not compressed).
Result<IdxArray> parse(const QByteArray& bytes, const QString& what);
// Pairs an image file ([N, H, W]) with a label file ([N]) into a dataset with x of shape [N, 1, H, W].
Result<Dataset> importPair(const QString& imagesPath, const QString& labelsPath);
// The same pair as a source for the streamed import: the labels are read when it opens, the images (plain or
// gzip) only by readSamples().
Result<std::unique_ptr<SampleSource>> openSource(const QString& imagesPath, const QString& labelsPath);

} // namespace Idx
} // namespace gleaner::ml
