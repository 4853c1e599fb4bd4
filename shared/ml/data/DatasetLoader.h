#pragma once
// Loads the training and test sets a job spec names, whatever their format, into Gleaner's dataset layout.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "spec/JobSpec.h"

#include <optional>

namespace gleaner::ml {

// `limitTrain` keeps the first N training samples (the test set is kept whole).
Result<DatasetSplit> loadDataset(const DatasetSpec& spec, std::optional<qint64> limitTrain = std::nullopt);

} // namespace gleaner::ml
