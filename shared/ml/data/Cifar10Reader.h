#pragma once
// Reader for the CIFAR-10 "binary version": data_batch_1.bin .. data_batch_5.bin (training) and
// test_batch.bin, each a sequence of 3073-byte records (one label byte, then 3x32x32 pixels, channel-major).

#include "Result.h"
#include "ml/data/Dataset.h"
#include "ml/data/SampleSource.h"

#include <memory>

namespace gleaner::ml::Cifar10 {

constexpr qint64 kRecordBytes = 1 + 3 * 32 * 32;

// Reads the records of the given batch files, in order, into one dataset with x of shape [N, 3, 32, 32].
Result<Dataset> readBatches(const QStringList& paths);
// The training batches of a CIFAR-10 binary folder as a source for the streamed import: the label byte of every
// record is read when it opens, the pixels by readSamples().
Result<std::unique_ptr<SampleSource>> openTrainingSource(const QString& dir);
// The test set of a CIFAR-10 binary folder (test_batch.bin).
Result<Dataset> readTestBatch(const QString& dir);
// The training and test sets of a CIFAR-10 binary folder.
Result<DatasetSplit> importDirectory(const QString& dir);

} // namespace gleaner::ml::Cifar10
