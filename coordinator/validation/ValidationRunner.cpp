#include "validation/ValidationRunner.h"

#include "format/SafeTensors.h"
#include "ml/Evaluator.h"

namespace gleaner::coordinator {

void ValidationRunner::setTestSet(qint64 jobId, const QString& path, const ModelSpec& model)
{
    m_thread.post([this, jobId, path, model] { m_jobs[jobId] = JobData{path, model, std::nullopt, std::nullopt}; });
}

void ValidationRunner::forget(qint64 jobId)
{
    m_thread.post([this, jobId] { m_jobs.erase(jobId); });
}

void ValidationRunner::evaluate(qint64 jobId, TensorBundle weights, std::function<void(Outcome)> done)
{
    m_thread.post([this, jobId, weights = std::move(weights), done = std::move(done)] {
        Outcome outcome;
        auto it = m_jobs.find(jobId);
        if (it == m_jobs.end()) {
            outcome.error = QStringLiteral("no test split is known for job %1").arg(jobId);
            done(outcome);
            return;
        }
        JobData& job = it->second;
        if (!job.dataset) {
            auto bundle = SafeTensors::load(job.path);
            auto dataset = bundle ? ml::Dataset::fromBundle(std::move(*bundle), job.path)
                                  : Result<ml::Dataset>(fail(bundle.error()));
            if (!dataset) {
                outcome.error = dataset.error();
                done(outcome);
                return;
            }
            job.dataset = std::move(*dataset);
        }
        if (!job.net) {
            auto net = ml::Model::create(job.model, 0);
            if (!net) {
                outcome.error = net.error();
                done(outcome);
                return;
            }
            job.net = std::move(*net);
        }
        // setWeights checks every tensor before the first copy: a refused bundle leaves the model as it was.
        if (auto loaded = job.net->setWeights(weights); !loaded) {
            outcome.error = loaded.error();
            done(outcome);
            return;
        }
        auto evaluation = ml::Evaluator::evaluate(*job.net, *job.dataset);
        if (!evaluation) {
            outcome.error = evaluation.error();
        } else {
            outcome.ok = true;
            outcome.accuracy = evaluation->accuracy;
            outcome.loss = evaluation->meanLoss;
        }
        done(outcome);
    });
}

} // namespace gleaner::coordinator
