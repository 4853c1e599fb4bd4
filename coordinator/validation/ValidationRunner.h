#pragma once
// Evaluates server weights on a job's held-out test split, on a thread of its own so that neither the API nor
// aggregation waits for it. The test split is loaded from the blob store once per job.

#include "util/SerialExecutor.h"
#include "ml/Model.h"
#include "ml/data/Dataset.h"
#include "spec/ModelSpec.h"
#include "tensor/TensorBundle.h"

#include <QString>

#include <functional>
#include <map>
#include <optional>

namespace gleaner::coordinator {

class ValidationRunner
{
public:
    struct Outcome
    {
        bool ok = false;
        QString error;
        double accuracy = 0.0;
        double loss = 0.0;
    };

    ValidationRunner() = default;
    void setTestSet(qint64 jobId, const QString& path, const ModelSpec& model);
    void evaluate(qint64 jobId, TensorBundle weights, std::function<void(Outcome)> done);
    // Frees a finished job's test split once the evaluations queued before this call have run.
    void forget(qint64 jobId);
    SerialExecutor& executor() { return m_thread; }

private:
    struct JobData
    {
        QString path;
        ModelSpec model;
        std::optional<ml::Dataset> dataset; // loaded on first use
        // Built on first use and kept: a TorchScript program is loaded and checked once per job, not at every
        // validation.
        std::optional<ml::Model> net;
    };
    std::map<qint64, JobData> m_jobs; // validation thread only
    SerialExecutor m_thread;
};

} // namespace gleaner::coordinator
