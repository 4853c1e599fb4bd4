#pragma once
// What one gleaner-sim run simulates: how many agents, how fast each is, what goes wrong (preemption, churn,
// network delay), which rule folds the updates, and the simulated clock's scale. Parsed from the command line
// with a message naming the bad option.

#include "Result.h"
#include "spec/JobSpec.h"
#include "spec/UploadSpec.h"

#include <QStringList>

#include <optional>
#include <vector>

namespace gleaner::coordinator::sim {

struct SimOptions
{
    QString jobPath;
    int agents = 4;
    QString speedsText = QStringLiteral("1"); // as given: "1,1,2", "lognormal:0.5", "uniform:0.5:2"
    std::optional<AggregationSpec> rule;      // replaces the job's rule when given (--rule JSON or NAME)
    bool ruleGivesEmaDecay = false;           // --rule names "ema_decay"; else the job's average is kept
    std::optional<UploadSpec> upload;         // replaces the job's upload encoding when given (--upload)
    std::optional<double> downloadDensity;    // replaces the job's download density when given (--download)
    int epochs = 0;                           // replaces the job's max_epochs when > 0
    std::optional<bool> speedAware;           // replaces the job's speed_aware when given
    quint64 seed = 1;
    double rate = 1000.0;            // samples per simulated second of an agent of speed 1
    double networkSeconds = 0.0;     // download + upload of one subtask, simulated seconds
    double jitter = 0.05;            // a subtask's time varies by up to this share, drawn per subtask
    double uplinkMbit = 0.0;         // an agent's uplink in Mbit/s: the upload's bytes take their time (0: none)
    double preemption = 0.0;         // probability that a subtask is lost at a random point
    // What a preempted agent does with its subtask (docs/clusters.md): hands it back with its checkpoint (the
    // agent's default: the next agent resumes at that step), hands it back bare (the next agent starts at once
    // from step 0), or keeps it (the lease expires at its deadline, the work is redone from step 0).
    enum class OnPreempt { HandBack, Bare, Keep };
    OnPreempt onPreempt = OnPreempt::HandBack;
    double churnSeconds = 0.0;       // mean simulated time an agent stays before it leaves (0: never leaves)
    double retrySeconds = 10.0;      // an agent without work asks again after this long (the coordinator's answer)
    int publishIntervalMs = 250;     // the coordinator's publish_interval_ms: new leases get weights at most this old
    bool waitForOwnUpdate = true;    // lease_wait_for_own_update_ms > 0: an agent's next lease holds its last result
    bool carryOptimizer = true;      // an agent starts each subtask with the optimizer state its last one ended with
    int validateEvery = 0;           // validate after every N folded updates (0: shards / 5); epoch ends always
    int threads = 1;                 // libtorch intra-op threads for training (validation: libtorch's default)
    bool baseline = false;           // plain single-process training of the same model and data instead
    bool ignoreTarget = false;       // run every epoch even after the job's target accuracy
    QString jsonPath;                // "-": stdout
    QString csvPath;
    bool quiet = false;

    static QString usage();
    // Parses the arguments after the program's name; an error names the option and what it expected.
    static Result<SimOptions> parse(const QStringList& arguments);
    // One speed per agent, drawn reproducibly from `speedsText` and `seed`.
    Result<std::vector<double>> resolveSpeeds() const;
};

} // namespace gleaner::coordinator::sim
