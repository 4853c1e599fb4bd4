#pragma once
// Loads the training and test sets a job spec names, whatever their format, into Gleaner's dataset layout.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "spec/JobSpec.h"

#include <optional>

namespace gleaner::ml {

// `limitTrain` keeps the first N training samples (the test set is kept whole). With the spec's test_fraction
// the test set is held out of the training file first (holdOut).
// Splits `all` into a training set and a test set of `fraction` of its samples, chosen by a permutation seeded
// with `seed`; each keeps the file's order.
Result<DatasetSplit> holdOut(Dataset all, double fraction, quint64 seed, const QString& what);

Result<DatasetSplit> loadDataset(const DatasetSpec& spec, std::optional<qint64> limitTrain = std::nullopt);

} // namespace gleaner::ml
