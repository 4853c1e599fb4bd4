#pragma once
// What the coordinator decides about a result that passed UpdateChecker (its bytes are sound), apart from where
// its file goes: whether it may count at all, whether it is folded into the server weights or compared with the
// first result of its workunit (a replica, a late result), how the rule folds it (UpdateContext: its base, its
// staleness, how many agents train the job), and what taking it changes in memory (the lease closes, the
// workunit is done, the agent's speed and the job's bound on steps learn from it, and the agent's next lease
// waits for the publication that holds it).
//
// The coordinator runs it between its checks of the caller and its database and files; gleaner-sim runs it on
// every simulated delivery, so both take results by exactly this code. Like the Scheduler it works on the jobs it
// is given and is not thread-safe (the coordinator's state thread).
//
// Taking a result is three steps: judge() (changes nothing), record() inside the caller's transaction (the
// scheduler's store), then accepted() once that transaction committed.

#include "Result.h"
#include "aggregation/AggregationRule.h"
#include "jobs/JobState.h"

#include <map>

namespace gleaner::coordinator {

class Scheduler;

class ResultIntake
{
public:
    ResultIntake(std::map<qint64, JobState>& jobs, Scheduler& scheduler);

    // What a result claims and what its check measured (UpdateChecker's ReceivedUpdate, without the tensors).
    struct Received
    {
        QString agentId;
        QString leaseId;
        qint64 baseVersion = 0;
        qint64 samples = 0;
        double trainSeconds = 0.0;
        double step = 0.0;     // ||result - base||
        double baseNorm = 0.0; // ||base||
        qint64 uploadBytes = 0; // the result's body as it came over the wire (0: not known)
    };

    struct Verdict
    {
        enum class Kind
        {
            Fold,    // the workunit's first result: folded into the server weights with `context`
            Compare, // the workunit has its first result: compared with it, never folded in twice
            Refuse,  // not taken (`status`, `reason`); `closesLease`: the result was invalid, the lease closes
                     // and the agent's record counts it; otherwise the request was wrong and nothing changes
            Unknown, // the lease is not in memory (finished, or never existed): the caller says which
        };
        Kind kind = Kind::Unknown;
        int status = 0;
        QString reason;
        bool closesLease = false;
        bool outOfBound = false; // Refuse: the result moved the weights further than the job's bound allows
        JobState* job = nullptr;
        Lease* lease = nullptr;
        Workunit* unit = nullptr;
        UpdateContext context; // Fold: epoch, base version, agents training the job (context.base is the caller's)
        qint64 staleness = 0;  // Fold: updates folded in since its base (what the 202 answer says)
    };

    Verdict judge(const Received& received);
    // Inside the caller's transaction: the lease closes as completed and its workunit is done (Fold, Compare).
    Status record(const Verdict& verdict);
    // After that transaction committed. `seq`: the update's number (Fold); `file`: where its weights are kept for
    // the comparison of later results of the workunit (empty: not kept). The verdict's lease is gone afterwards.
    void accepted(Verdict& verdict, const Received& received, qint64 seq, const QString& file);

    // The job's published weights changed (job.published): the waits of agents whose results they hold are over.
    static void published(JobState& job);
    // Whether the agent's last accepted result of a running job is not yet in that job's published weights: its
    // next lease should wait for the publication that holds it.
    bool waitsForOwnUpdate(const QString& agentId) const;

private:
    std::map<qint64, JobState>& m_jobs;
    Scheduler& m_scheduler;
};

} // namespace gleaner::coordinator
