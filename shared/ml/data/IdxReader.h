#pragma once
// Reader for the IDX format of the MNIST family (Fashion-MNIST among them), plain or gzip-compressed.
// Only unsigned-byte IDX files (type 0x08) are accepted: that is what every MNIST-style image and label file
// is.

#include "Result.h"
#include "ml/data/Dataset.h"

#include <QByteArray>
#include <QList>

namespace gleaner::ml {

struct IdxArray
{
    QList<qint64> shape; // e.g. [60000, 28, 28] for images, [60000] for labels
    QByteArray data;     // product(shape) bytes
};

namespace Idx {

// Reads one IDX file; a gzip file (by its magic bytes, whatever its name) is inflated on the fly.
Result<IdxArray> read(const QString& path);
// Parses IDX bytes already in memory (not compressed).
Result<IdxArray> parse(const QByteArray& bytes, const QString& what);
// Pairs an image file ([N, H, W]) with a label file ([N]) into a dataset with x of shape [N, 1, H, W].
Result<Dataset> importPair(const QString& imagesPath, const QString& labelsPath);

} // namespace Idx
} // namespace gleaner::ml
