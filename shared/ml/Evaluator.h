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
    static Result<Evaluation> evaluate(Model& model, const Dataset& data, int batchSize = 256);
    // Builds the model on `device` and loads `weights` first.
    static Result<Evaluation> evaluate(const ModelSpec& spec, const TensorBundle& weights,
                                       const Dataset& data, int batchSize = 256,
                                       const QString& device = QStringLiteral("cpu"));
};

} // namespace gleaner::ml
