#pragma once
// The in-memory picture of a job that the state thread keeps: its spec, where it stands, its workunits and
// leases. The database mirrors every change, so the picture is rebuilt from it after a restart.

#include "aggregation/PublishedWeights.h"
#include "aggregation/UpdateBound.h"
#include "jobs/JobImporter.h"
#include "jobs/JobWidth.h"
#include "spec/JobSpec.h"
#include "store/JobTallies.h"
#include "tensor/TensorBundle.h"

#include <QHash>
#include <QString>

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace gleaner::coordinator {

enum class JobStatus { Created, Running, Paused, Completed, Failed, Cancelled };
QString jobStatusName(JobStatus status);
std::optional<JobStatus> jobStatusFromName(QStringView name);

struct Workunit
{
    enum class State { Pending, Leased, Done };
    qint64 id = 0;
    int epoch = 1;
    int shard = 0;
    State state = State::Pending;
    int issued = 0;           // times leased
    QStringList openLeases;   // leases that may still deliver
    // The first result received, the one folded in. Later results of the workunit (replicas, a late result of
    // an expired lease) are compared with it, not folded in.
    struct FirstResult
    {
        qint64 seq = 0;
        QString agentId;
        qint64 baseVersion = -1;
        double step = 0.0;
        QString file; // relative to the data directory; empty once a snapshot made it unneeded
    };
    std::optional<FirstResult> first;
    // Where the next lease of the workunit starts: a checkpoint its last agent handed back when it left
    // (protocol 6.8). The lease that resumes it trains from the same base weights, sized the same, so the result
    // is the one an agent that never left would have delivered. Cleared once the workunit is done.
    struct ResumePoint
    {
        QString fromLease;  // the lease that handed it back
        QString sha256;     // the checkpoint blob
        qint64 size = 0;
        qint64 step = 0;    // mini-batches it holds, of the subtask's
        qint64 baseVersion = 0;
        QString weightsSha; // the base weights it trained from
        qint64 steps = 0;   // the subtask's size in mini-batches (0: whole local epochs)
        // The agent that handed it back: a result trained on from it that the checks refuse counts against this
        // agent, not the one that resumed (AgentStanding).
        QString fromAgent;
    };
    std::optional<ResumePoint> resume;
};

struct Lease
{
    // Open and Expired leases may still deliver and live in memory; the closed ones (Completed, Refused, Failed:
    // the agent gave it back, protocol 6.7; HandedBack: the agent left and handed the work back, 6.8) live on in
    // the database and the admission cache only.
    enum class State { Open, Expired, Completed, Refused, Failed, HandedBack };
    QString id;
    qint64 jobId = 0;
    qint64 workunitId = 0;
    QString agentId;
    qint64 issuedMs = 0;
    qint64 deadlineMs = 0;
    State state = State::Open;
    qint64 baseVersion = 0;
    QString weightsSha;
    QString nonce; // signed into the manifest and stored with the lease
    qint64 steps = 0; // mini-batches the subtask was sized to (speed-aware jobs); 0: whole local epochs
    QString checkpointSha; // the handed-back checkpoint it resumes from (Workunit::ResumePoint); empty: none
    qint64 resumeStep = 0; // the mini-batch that checkpoint reached
    // Progress (memory only: a restart forgets the step, and the lease counts as having moved at the restart).
    qint64 lastStep = -1;   // the highest step a progress report gave
    qint64 lastMoveMs = 0;  // when that step arrived (issuedMs before the first)
};
QString leaseStateName(Lease::State state);
std::optional<Lease::State> leaseStateFromName(QStringView name);
// What every later request for a lease closed this way is answered (409), also after a restart and at another
// coordinator of the deployment.
QString closedLeaseMessage(const QString& leaseId, Lease::State state);

// The data-order seed of a workunit's training, as its manifest says: each workunit trains in its own order,
// reproducibly.
inline quint64 workunitSeed(const JobSpec& spec, qint64 workunitId)
{
    return (spec.seed + quint64(workunitId) * 1000003ULL) % (1ULL << 53);
}

struct ValidationPoint
{
    int epoch = 0;
    bool epochEnd = true; // false: an intermediate point (validate_every_updates)
    qint64 version = 0;
    qint64 updates = 0;
    double accuracy = 0.0;
    double loss = 0.0;
    qint64 atMs = 0;
};

struct JobState
{
    qint64 id = 0;
    JobSpec spec;
    JobStatus status = JobStatus::Created;
    QString reason;              // why it failed / completed / was cancelled
    // Another coordinator of the deployment ended the job (the database says so, as its lock showed): it
    // takes no more work here, and the coordinator ends it in memory as soon as no transaction is under way.
    std::optional<std::pair<JobStatus, QString>> endedElsewhere;
    // The database says the job is paused (as its last lock showed): it takes no work here until a lock shows
    // it running again, even before the coordinator's next look at the jobs.
    bool pausedElsewhere = false;
    qint64 createdMs = 0;
    int epoch = 0;               // highest epoch whose workunits exist (1-based; 0 before the import)
    ImportedJob files;
    TensorBundle schema;         // initial weights: names, shapes and dtypes every result must match
    qint64 maxUploadBytes = 0;
    std::map<qint64, Workunit> workunits; // by id
    // Updates received and not folded, bytes up and down: the deployment's, as the database holds them
    // (JobTallies), with what this coordinator took since its last look.
    JobCounts counts;
    qint64 updatesApplied = 0;   // = server weights version
    // updates received when the last intermediate validation was asked for (validate_every_updates)
    qint64 intermediateValidatedAt = 0;
    UpdateBound updateBound;     // how far an upload may move the weights from its base (learnt from accepted ones)
    PublishedWeights published;
    std::vector<PublishedWeights> retired; // earlier weights files, deleted once no open lease needs them
    QString snapshotSha;                   // the latest snapshot's blob, never deleted as a retired file
    QString snapshotRuleSha;               // the aggregation rule's state in that snapshot (empty: none)
    // Rules that fold pseudo-gradients: the weights each received update trained from, by update seq, kept on
    // disk until a snapshot holds the update (a replay after a restart needs them).
    std::map<qint64, QString> basesInFlight;
    // An agent's latest accepted update that the published weights do not hold yet, by agent (memory only):
    // its next lease waits for the publication that holds it (LeasePacer::whenCurrent).
    std::map<QString, qint64> unpublishedOf;
    // While a publication that parked leases asked for is on its way: the last update it will hold (memory
    // only; 0: none on its way). The leases parked meanwhile whose updates it holds wait for it rather than
    // each asking for one of their own; the others ask for the next one together when it reports
    // (LeasePacer).
    qint64 publicationAskedThrough = 0;
    std::vector<ValidationPoint> history;
    std::set<int> validatedEpochs;  // epochs whose end-of-epoch validation is recorded
    std::set<int> validating;       // end-of-epoch validations in flight
    int validatedEpoch = 0;         // every epoch up to this one is validated
    JobWidth width;                 // the agents it can use at once, as measured

    bool epochComplete(int e) const;
    // The most agents that may be at work on it at once: the admin's max_agents and, unless the spec says
    // "cap_at_width": false, for the rules that measure it, the measured useful agents (JobWidth::kMinAgents
    // before the first measurement); the smaller of them. nullopt: no cap.
    std::optional<int> agentCap() const;
    int pendingIn(int e) const;
};

} // namespace gleaner::coordinator
