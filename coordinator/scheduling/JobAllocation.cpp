#include "scheduling/JobAllocation.h"

#include "jobs/JobState.h"
#include "scheduling/Scheduler.h"

#include <algorithm>

namespace gleaner::coordinator::JobAllocation {

double gain(const Candidate& job)
{
    if (job.atCap())
        return 0.0;
    const double b = std::max(1e-9, job.noiseScale.value_or(kAssumedNoiseScale));
    const double n = std::max(0, job.agents);
    return job.priority * b / ((n + b) * (n + 1 + b));
}

std::vector<qint64> order(std::vector<Candidate> jobs)
{
    std::erase_if(jobs, [](const Candidate& job) { return job.atCap(); });
    std::stable_sort(jobs.begin(), jobs.end(), [](const Candidate& a, const Candidate& b) {
        const double ga = gain(a);
        const double gb = gain(b);
        return ga != gb ? ga > gb : a.jobId < b.jobId;
    });
    std::vector<qint64> ids;
    ids.reserve(jobs.size());
    for (const Candidate& job : jobs)
        ids.push_back(job.jobId);
    return ids;
}

Candidate candidateOf(const JobState& job, const Scheduler& scheduler, const QString& agentId)
{
    return Candidate{job.id, job.spec.priority, scheduler.agentsAtWork(job, agentId), job.width.noiseScale,
                     job.agentCap()};
}

} // namespace gleaner::coordinator::JobAllocation
