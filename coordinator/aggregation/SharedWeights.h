#pragma once
// The server weights of running jobs in Redis, shared by every coordinator of one deployment: any of them
// folds an accepted update into them, and none loses another's.
//
// What a fold reads and writes is the job's whole fold state: the weights, the aggregation rule's state (a
// buffer, a momentum), the window of recent fold steps that bounds the next one (UpdateBound), and a version.
// Our rules are not element-wise: a fold is checked by the Euclidean length of its whole step, and a
// pseudo-gradient rule takes its outer step every K updates across all tensors. So the unit of concurrency is
// the job, not a chunk: a fold is an optimistic transaction on the job's version.
//
//   WATCH meta; read the version (and, unless this process already holds that version, the chunks);
//   fold locally; MULTI; write the chunks, the rule's state, the steps, version + 1, and append the update's
//   sequence number to the job's fold order; EXEC.
//
// EXEC fails when any other fold committed in between (it changed meta): this process then reads the new
// version and folds again on top of it. Every committed fold therefore started from the version just before
// it, and the fold order in Redis is the exact order the weights went through: folding the recorded order
// from the first version gives the weights in Redis, bit for bit (tests/coordinator/TestSharedWeights proves
// it with several processes folding at once, and shows that a read-modify-write without the version check
// loses updates). A sequence number already in the order is not folded again: a coordinator that crashed
// after EXEC and retries finds its update folded.
//
// The weights are stored in chunks (kChunkBytes) of their safetensors file, so no single value holds up
// Redis's one thread for long. A process keeps the last state it read or wrote, keyed by the job's generation
// (new at every put()) and version: while it is the only one folding a job, a fold reads nothing but the
// meta.
//
// Durable copies stay the coordinator's own snapshots (read() gives a consistent state to write), so Redis
// may run without persistence; with persistence it also survives its own restart.
//
// Not thread-safe: one instance per connection, one thread at a time.

#include "aggregation/AggregationRule.h"
#include "store/RedisConnection.h"
#include "tensor/TensorBundle.h"

#include <QString>

#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace gleaner::coordinator {

struct SharedFoldState
{
    TensorBundle weights;
    TensorBundle ruleState;    // AggregationRule::saveState(); empty for stateless rules
    std::vector<double> steps; // UpdateBound::window()
    qint64 version = 0;
};

class SharedWeights
{
public:
    static constexpr qint64 kChunkBytes = 4 << 20;
    // The largest weights (or rule state) file a job's meta may describe: well above any model a volunteer
    // trains.
    static constexpr qint64 kMaxFileBytes = qint64(16) << 30;
    // Reads and puts that found the version moved under them this often give up and say so.
    static constexpr int kMaxAttempts = 64;
    // A fold that lost this many races in a row takes the job's fold lock (SET NX with an expiry) and then
    // commits for certain: the others wait while it is held, and their transactions watch it. So a slow
    // coordinator is never starved by fast ones, and without contention no lock is taken at all.
    static constexpr int kRacesBeforeLock = 32;
    static constexpr int kLockMs = 10'000; // a holder that died frees it after this
    // fold() gives up after this long (its caller keeps the update and tries later).
    static constexpr int kFoldGiveUpMs = 60'000;

    struct Folded
    {
        qint64 version = 0; // the version this fold made (or, alreadyFolded, the one it made before)
        int attempts = 1;   // 1 + the folds that committed in between (and the waits for a fold lock)
        bool alreadyFolded = false;
        QString refused; // the fold's own check refused the update; nothing was written
    };
    // Changes `state` in place (its version is the one it folds onto); a failure refuses the update.
    using Step = std::function<Status(SharedFoldState& state)>;

    // `prefix` names the deployment's keys ("gleaner" gives gleaner:{job:7}:meta, ...), so two deployments
    // may share one Redis.
    SharedWeights(RedisConnection& redis, QString prefix = QStringLiteral("gleaner"));

    // When put() writes over a job that Redis holds already.
    enum class Put
    {
        IfAbsent, // never
        IfOlder,  // when Redis holds an older version than the one put (a coordinator restoring its snapshot)
        Always,
    };
    // Puts a job's fold state into Redis, with an empty fold order: true when written, false when the job was
    // there and left as it is (`when`). Decided under WATCH: a fold or put by another coordinator between the
    // look and the write makes it look again.
    Result<bool> put(qint64 jobId, const SharedFoldState& state, Put when);
    // A consistent copy of the job's fold state (for a snapshot, a publication, a validation); nullopt when
    // the job is not in Redis.
    Result<std::optional<SharedFoldState>> read(qint64 jobId);
    // Folds update `seq` in with `step`, as described above.
    Result<Folded> fold(qint64 jobId, qint64 seq, const Step& step);
    // fold() with the job's aggregation rule, bounded as WeightsKeeper::fold bounds it. context.base must be
    // set for rules that need it; context.serverVersion is the version folded onto.
    Result<Folded> foldUpdate(qint64 jobId, qint64 seq, const AggregationSpec& rule,
                              const TensorBundle& update, UpdateContext context, bool checked = false);
    // What this process holds of the job: after its own fold, exactly what that fold committed (no round trip);
    // null when it holds nothing. Valid until the next call on this instance.
    const SharedFoldState* held(qint64 jobId) const;
    // The version update `seq` made, when it was folded since the last put(); nullopt when it was not.
    Result<std::optional<qint64>> foldedAt(qint64 jobId, qint64 seq);
    // The sequence numbers folded since the last put(), in the order they were folded (version put + 1, + 2,
    // ...).
    Result<std::vector<qint64>> foldOrder(qint64 jobId);
    Status remove(qint64 jobId);

    // Optimistic transactions this instance had to repeat because another fold committed first.
    qint64 conflicts() const { return m_conflicts; }

private:
    struct Cached
    {
        QByteArray generation;
        SharedFoldState state;
        // The files as Redis holds them (they share their bytes with the state's bundles until a fold
        // writes): a fold writes only the chunks it changed. A pseudo-gradient rule leaves the weights and
        // its momentum alone between outer steps, so most folds write its buffer alone.
        QByteArray weightFile;
        QByteArray stateFile;
        // The rule as the last fold of this process left it (foldUpdate), when `state` is that fold's result:
        // the next fold clones it instead of loading its state again (for a Nesterov rule, twice the
        // weights).
        std::unique_ptr<AggregationRule> rule;
        AggregationSpec ruleSpec;
    };
    QByteArray key(qint64 jobId, const char* what) const;
    QByteArray chunkKey(qint64 jobId, char kind, int index) const;
    // Reads the chunks the meta names into the cache (the caller has WATCHed meta).
    Status load(qint64 jobId, const std::map<QByteArray, QByteArray>& meta);
    // The commands that write `state` (chunks, steps, version) and drop chunks beyond it.
    // Writes into `written` the files it wrote, for the cache. `previous`: what Redis holds now (the cache of
    // the version WATCHed), whose unchanged chunks are not sent again; null to write every chunk.
    void queueState(qint64 jobId, const SharedFoldState& state,
                    const std::map<QByteArray, QByteArray>* oldMeta, const QByteArray& generation,
                    const Cached* previous, Cached& written);
    // WATCHes the job's meta (and its fold lock, whose holder goes to `lockHolder` when asked) and reads it.
    Result<std::map<QByteArray, QByteArray>> watchMeta(qint64 jobId, QByteArray* lockHolder = nullptr);
    void releaseLock(qint64 jobId, const QByteArray& token);

    RedisConnection& m_redis;
    QByteArray m_prefix;
    std::map<qint64, Cached> m_cache;
    // Left by foldUpdate's step for the cache, once its fold commits.
    std::unique_ptr<AggregationRule> m_foldedRule;
    AggregationSpec m_foldedSpec;
    qint64 m_conflicts = 0;
};

} // namespace gleaner::coordinator
