#pragma once
// Accuracy and mean loss of weights on a labelled dataset, in batches, without gradients: what the
// coordinator validates the server weights with after it folds in updates.

#include "Result.h"
#include "ml/Model.h"
#include "ml/data/Dataset.h"

namespace gleaner::ml {

struct Evaluation
{
    double accuracy = 0.0; // fraction in [0, 1]
    double meanLoss = 0.0; // cross-entropy per sample
    qint64 samples = 0;
    qint64 correct = 0;
};

class Evaluator
{
public:
    // Refuses, before computing anything, an empty dataset and one whose samples or labels do not fit the
    // model (the checks the Trainer applies to a shard). The model is left in the train/eval mode it had.
    // Errors, libtorch's included, come back as values; safe on any thread.
    static Result<Evaluation> evaluate(Model& model, const Dataset& data, int batchSize = 256);
    // Builds the model on `device` and loads `weights` first.
    static Result<Evaluation> evaluate(const ModelSpec& spec, const TensorBundle& weights,
                                       const Dataset& data, int batchSize = 256,
                                       const QString& device = QStringLiteral("cpu"));
};

} // namespace gleaner::ml
