#pragma once
// Which running job an agent that asks for work should train, when several could use it: the policy that
// sends agents where they help. Pollux (Qiao et al., OSDI 2021) allocates a cluster's GPUs to maximise the
// jobs' total goodput, throughput times statistical efficiency; this is its greedy form for agents that
// arrive one request at a time.
//
// A job trained by n agents at once, averaging their changes each round, progresses at a rate proportional to
// its statistical efficiency n / (n + B), with B its gradient noise scale in updates (NoiseScale): one agent
// buys 1 / (1 + B) of what infinitely many would, and each added one less. The agent goes to the job where
// one more agent adds the most, weighted by the job's priority:
//   gain = priority * ((n + 1) / (n + 1 + B) - n / (n + B)) = priority * B / ((n + B) (n + 1 + B))
// A job not measured yet counts with B = kAssumedNoiseScale (four: where the default job stopped gaining in
// the lab before it measured its width); a job whose cap is reached (JobState::agentCap) takes no more
// agents. Equal gains go to the older job.

#include <QtGlobal>

#include <optional>
#include <vector>

namespace gleaner::coordinator {

struct JobState;
class Scheduler;

namespace JobAllocation {

struct Candidate
{
    qint64 jobId = 0;
    double priority = 1.0;
    int agents = 0; // agents other than the asking one at work on it (Scheduler::agentsAtWork)
    std::optional<double> noiseScale; // measured, in updates
    std::optional<int> cap;           // the most agents it may have at once

    bool atCap() const { return cap && agents >= *cap; } // takes no more agents
};

inline constexpr double kAssumedNoiseScale = 4.0;

// What one more agent adds to the job (0 when its cap is reached).
double gain(const Candidate& job);
// The jobs that can take the agent, the most helped first.
std::vector<qint64> order(std::vector<Candidate> jobs);
// The candidate a running job is for `agentId` now.
Candidate candidateOf(const JobState& job, const Scheduler& scheduler, const QString& agentId);

} // namespace JobAllocation
} // namespace gleaner::coordinator
