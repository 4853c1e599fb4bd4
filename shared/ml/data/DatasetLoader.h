#pragma once
// Loads the training and test sets a job spec names, whatever their format, into Gleaner's dataset layout.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "spec/JobSpec.h"

#include <QList>

#include <optional>

namespace gleaner::ml {

// Splits `all` into a training set and a test set of `fraction` of its samples, chosen by a permutation seeded
// with `seed`; each keeps the file's order.
Result<DatasetSplit> holdOut(Dataset all, double fraction, quint64 seed, const QString& what);

// `limitTrain` keeps the first N training samples (the test set is kept whole). With the spec's test_fraction
// the test set is held out of the training file first (holdOut); the spec's normalize applies last, to both sets.
// `inputShape` is the model's input_shape: format "images" decodes every image to it ([C, H, W], C 1 or 3); the
// other formats bring their own sample shape, which the importer compares with it.
Result<DatasetSplit> loadDataset(const DatasetSpec& spec, std::optional<qint64> limitTrain = std::nullopt,
                                 const QList<qint64>& inputShape = {});

} // namespace gleaner::ml
