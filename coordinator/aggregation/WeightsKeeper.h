#pragma once
// The server weights of every active job, on a thread of their own. Accepted updates are folded in one at a
// time in the order they were received (the aggregation rule decides how), the result is published as a
// weights file for new leases at most once per publish interval, and snapshotted to disk every N updates or T
// seconds, so that a restart replays only the updates received after the last snapshot.
//
// A fold is checked before its result replaces the server copy: every value finite, and the step it made (the
// distance between the copy before and after) within the job's UpdateBound of recent steps. A fold that fails
// leaves the server copy and its version as they were and is reported to its listener
// (FoldReports::foldRefused), which marks the update, counts it against its agent and shows it to the admin:
// never a silent drop.
//
// With a Redis named in the config (shareThrough), the server copy of record is the one in Redis that every
// coordinator of the deployment folds into (SharedWeights): each fold is an optimistic transaction there, and
// the copy in memory follows it (and, before a publication, a validation or a snapshot, whatever other
// coordinators folded). At load, Redis keeps a job it holds at the snapshot's version or later; otherwise the
// snapshot is put there. The replay of updates received after the snapshot then folds exactly those Redis
// does not hold yet (a fold is recorded with its update's sequence number, and one already recorded is not
// folded again). An update that cannot reach Redis waits, in order, and is folded when Redis answers again
// (the next fold, publication or snapshot tries); it is not lost, and a restart replays it too.
//
// Rules that fold pseudo-gradients (AggregationRule::needsBase) get the weights each update trained from: the
// keeper holds the weights it published recently in memory and reads older ones from the blob store, where
// the coordinator keeps every base an unsnapshotted update needs. Such a rule's state is written with every
// snapshot (its own blob) and read back at a restart, before the replay.

#include "aggregation/AggregationRule.h"
#include "aggregation/SharedWeights.h"
#include "aggregation/PublishedWeights.h"
#include "aggregation/UpdateBound.h"
#include "aggregation/WeightsListener.h"
#include "spec/DownloadSpec.h"
#include "store/BlobStore.h"
#include "tensor/TensorBundle.h"
#include "util/Clock.h"
#include "util/SerialExecutor.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace gleaner::coordinator {

struct CoordinatorConfig;
class ValidationRunner;
namespace metrics {
class CoordinatorMetrics;
}

struct ReplayedUpdate
{
    qint64 seq = 0;
    QString file;
    UpdateContext context;
    QString baseSha; // the weights the update trained from (its lease's), for rules that need them
    bool appliedBefore = false; // folded in before the restart: its result was checked then, and is again folded
                                // in exactly as it was (the bound on steps is learnt anew and must not refuse it)
};

class WeightsKeeper
{
public:
    // Published versions an agent may hold and still get a patch from (sparse downloads).
    static constexpr size_t kPatchSources = 8;

    // Reports go to `listener`; `config`'s snapshot intervals are read at each fold; validations run on
    // `validation`'s thread. Every reference outlives the keeper.
    WeightsKeeper(WeightsListener& listener, BlobStore& blobs, const Clock& clock, const CoordinatorConfig& config,
                  metrics::CoordinatorMetrics& metrics, ValidationRunner& validation);
    ~WeightsKeeper();

    SerialExecutor& executor() { return m_thread; }
    // Folds go through Redis from now on (see above), with the deployment's keys under `prefix`. Before any
    // load().
    void shareThrough(std::unique_ptr<RedisConnection> redis, const QString& prefix);
    // One of several coordinators of a deployment: its published files carry `name` (metadata
    // gleaner.publisher), so that no two coordinators publish the same blob. Before any load().
    void setPublisher(const QString& name);
    // Whether this coordinator writes snapshots: among several, only the housekeeper does (its snapshot holds
    // what every coordinator folded, read from Redis). Thread-safe; true unless told otherwise.
    void keepSnapshots(bool keep) { m_keepsSnapshots = keep; }

    // One checked fold: `rule` folds `update` into a copy-on-write twin of `weights`, which replaces them only
    // when every value is finite and the step it made is within `steps` (which learns it). `checked`: the update
    // was folded in before a restart and is folded in again without the step bound. (Also what bench_assimilate
    // measures.)
    // The rule folds with a copy of itself, which replaces it only when the fold passes: a refused update leaves
    // neither the weights nor the rule's state changed.
    static Status fold(TensorBundle& weights, std::unique_ptr<AggregationRule>& rule, UpdateBound& steps,
                       const TensorBundle& update, const UpdateContext& context, bool checked);

    // Takes charge of a job's weights at `version` and its rule's state as the snapshot left it (`ruleState`,
    // empty for none), then folds in `replay` (read from disk) in order.
    void load(qint64 jobId, TensorBundle weights, qint64 version, const AggregationSpec& rule, TensorBundle ruleState,
              std::vector<ReplayedUpdate> replay, const DownloadSpec& download = {});
    // What a publication hands out: the server copy itself, or with a sparse download, `published` moved toward
    // it in the `density` share of each F32 tensor's values where the two differ most (every other tensor
    // whole). Deterministic; also what gleaner-sim publishes.
    static void track(TensorBundle& published, const TensorBundle& server, const DownloadSpec& download);
    // `baseSha`: the published weights the update's lease handed out.
    void apply(qint64 jobId, qint64 seq, TensorBundle update, UpdateContext context, QString baseSha);
    // How far the folds are behind the intake: the updates handed to apply() that are neither folded in nor
    // refused yet (queued behind other work on this thread, or waiting for Redis), and the bytes of weights
    // they hold in memory until then. Any thread; the lease path holds new leases back while it is above
    // config fold_backlog_mb.
    struct Backlog
    {
        qint64 updates = 0;
        qint64 bytes = 0;
    };
    Backlog backlog() const;
    // Folds updates that another coordinator of the deployment received and did not fold (it stopped or was
    // killed first), read from disk like a restart's replay; one that Redis holds folded already is only
    // reported applied, and one this process has waiting is left to it.
    void replay(qint64 jobId, std::vector<ReplayedUpdate> updates);
    // Publishes the weights for new leases (a file only when their version moved) and always reports back
    // (FoldReports::published), also when it cannot: `forParked` comes back with the report.
    void publish(qint64 jobId, bool forParked = false);
    // Evaluates the weights as they stand after everything queued before this call; `epochEnd` marks the
    // validation of epoch `epoch`'s end (false: an intermediate point).
    void validate(qint64 jobId, int epoch, bool epochEnd);
    // Writes a snapshot when `force` or when the job's snapshot interval has passed.
    void snapshot(qint64 jobId, bool force);
    void exportWeights(qint64 jobId, std::function<void(Result<BlobInfo>)> done);
    void unload(qint64 jobId);

private:
    // Counts one update of apply() in the backlog for as long as it lives: in the task that folds it, then in
    // the queue of those waiting for Redis. Whatever way the update leaves (folded, refused, its job
    // unloaded, the thread stopped), it leaves the backlog with it.
    class Waiting
    {
    public:
        Waiting(WeightsKeeper& keeper, qint64 bytes);
        ~Waiting();
        Waiting(const Waiting&) = delete;
        Waiting& operator=(const Waiting&) = delete;

    private:
        WeightsKeeper& m_keeper;
        qint64 m_bytes;
    };
    // `update` counted in the backlog until the returned entry goes.
    std::shared_ptr<const Waiting> countWaiting(const TensorBundle& update);
    struct PendingUpdate
    {
        qint64 seq = 0;
        TensorBundle update;
        UpdateContext context;
        QString baseSha;
        bool checked = false;
        std::optional<std::chrono::steady_clock::time_point> received; // a live update (not a replay)
        std::shared_ptr<const Waiting> waiting;                        // its count in the backlog
    };
    struct JobWeights
    {
        TensorBundle weights;
        qint64 version = 0;
        qint64 lastSeq = 0;
        int noiseRounds = 0; // the rule's measured rounds last reported (widthMeasured)
        qint64 snapshotVersion = 0;
        qint64 snapshotMs = 0;
        qint64 publishedVersion = -1;
        std::unique_ptr<AggregationRule> rule;
        UpdateBound steps; // how far recent folds moved the server copy
        std::map<QString, TensorBundle> recent; // recently published weights by SHA-256 (rules that need bases)
        std::vector<QString> recentOrder;       // oldest first
        DownloadSpec download;
        TensorBundle published; // what the last publication handed out (sparse downloads; else the server copy)
        std::deque<std::pair<QString, QByteArray>> publishedFiles; // the last few published files, for patches
        // Shared through Redis only:
        AggregationSpec spec;
        bool joined = false;               // the job's copy in Redis is known (read or put at load)
        std::deque<PendingUpdate> pending; // received, not yet folded in Redis (oldest first)
        bool unreachable = false;          // Redis failed the last try (reported once per outage)
        // Once the weights are Redis's (adopt), so is the rule's state: kept as Redis gave it, for snapshots,
        // and `rule` is a fresh one that only answers needsBase() (loading a Nesterov rule's state would copy
        // twice the weights on every fold).
        bool ruleFromShared = false;
        TensorBundle sharedRuleState;
    };
    static constexpr size_t kRecentBases = 8;
    // `checked`: the update was folded in before a restart; it is folded in again without the step bound.
    void applyNow(qint64 jobId, JobWeights& job, qint64 seq, const TensorBundle& update,
                  UpdateContext context, const QString& baseSha, bool checked = false,
                  std::optional<std::chrono::steady_clock::time_point> received = std::nullopt,
                  std::shared_ptr<const Waiting> waiting = nullptr);
    // Reads `replay` from disk and folds it in, in order (load() and replay()).
    void replayNow(qint64 jobId, JobWeights& job, const std::vector<ReplayedUpdate>& replay);
    // Shared through Redis: folds the pending updates in order; false when Redis failed (they keep waiting).
    bool foldPending(qint64 jobId, JobWeights& job);
    bool foldPendingNow(qint64 jobId, JobWeights& job);
    // Reads the job's copy in Redis, or puts this one there when Redis holds none as recent (at load).
    bool joinShared(qint64 jobId, JobWeights& job);
    // Brings the copy in memory up to Redis's (what other coordinators folded) before it is used.
    void syncShared(qint64 jobId, JobWeights& job);
    void adopt(JobWeights& job, const SharedFoldState& state);
    // The rule's state that goes with the weights in memory.
    static TensorBundle ruleState(const JobWeights& job);
    // What validation and export take: the average of the server weights when the job keeps one (its
    // "ema_decay"), else the server copy itself.
    static TensorBundle modelWeights(qint64 jobId, const JobWeights& job);
    void reportUnreachable(qint64 jobId, JobWeights& job, const QString& why);
    // The published weights with this SHA-256, from memory or the blob store.
    Result<TensorBundle> baseWeights(JobWeights& job, const QString& sha);
    void remember(JobWeights& job, const QString& sha, const TensorBundle& weights);
    // Reports a received update that is not folded in (see above); `agentsFault` false when the coordinator lost
    // it (its file could not be read back at a restart).
    void refused(qint64 jobId, JobWeights& job, qint64 seq, const QString& reason, bool agentsFault = true);
    // Reports the rule's noise scale when a round ended since the last report.
    void reportWidth(qint64 jobId, JobWeights& job, const NoiseScale* noise, qint64 version);
    void validateNow(qint64 jobId, const JobWeights& job, int epoch, bool epochEnd);
    // The weights as a safetensors blob, stamped with their version (publish, snapshot and export all need
    // it). `publication`: a file for leases, which carries this coordinator's name when it has one
    // (setPublisher).
    Result<BlobInfo> writeBlob(JobWeights& job, bool publication = false);
    // A publication of a sparse download: the published copy, its file and the patches to it from the last few.
    Result<PublishedWeights> publishSparse(qint64 jobId, JobWeights& job);

    WeightsListener& m_listener;
    BlobStore& m_blobs;
    const Clock& m_clock;
    const CoordinatorConfig& m_config;
    metrics::CoordinatorMetrics& m_metrics;
    ValidationRunner& m_validation;
    std::atomic<qint64> m_backlogUpdates{0}; // backlog(); before what may hold a Waiting
    std::atomic<qint64> m_backlogBytes{0};
    std::map<qint64, JobWeights> m_jobs;      // weights thread only
    std::unique_ptr<RedisConnection> m_redis; // weights thread only, when shared
    std::unique_ptr<SharedWeights> m_shared;
    QString m_publisher; // weights thread only
    std::atomic<bool> m_keepsSnapshots{true};
    SerialExecutor m_thread; // last: runs tasks that use the members above
};

} // namespace gleaner::coordinator
