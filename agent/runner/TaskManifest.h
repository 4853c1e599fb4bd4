#pragma once
// A leased subtask's manifest, checked the way docs/protocol.md section 7.5 orders it: the signature is
// verified over the exact bytes with the coordinator key pinned at enrollment before anything is parsed, then
// the fields the agent acts on are read and matched against who the agent is (its id, the lease it asked
// about, the coordinator it talks to). Nothing of a manifest that fails a step is used. Run before every
// worker start, not only when the lease arrives: the stored bytes could have been altered on this disk in
// between.

#include "Result.h"
#include "crypto/Ed25519.h"
#include "util/LeaseId.h"

#include <QByteArray>
#include <QList>
#include <QString>

namespace gleaner::agent {

struct ManifestFile
{
    QString role; // "model", "weights", "shard"
    QString sha256;
    qint64 size = 0;
};

// A patch the manifest offers: it turns the earlier weights file `fromSha256`, which this agent may still hold
// in its cache, into the lease's weights file (docs/protocol.md, section 8.5).
struct ManifestPatch
{
    QString fromSha256;
    QString sha256;
    qint64 size = 0;
};

struct TaskManifest
{
    explicit TaskManifest(LeaseId id) : leaseId(std::move(id)) {}

    LeaseId leaseId; // the expected id, which the signed lease_id equals
    qint64 jobId = 0;
    QString jobName;
    qint64 workunitId = 0;
    int epoch = 0;
    int shard = 0;
    qint64 samples = 0;
    qint64 baseVersion = 0;
    qint64 issuedMs = 0;
    qint64 deadlineMs = 0;     // the first deadline; progress reports move the lease's deadline later
    QString nonce;             // fresh per lease; the result carries it back (gleaner.nonce)
    // model, weights, shard, in that order; then "checkpoint" when the manifest resumes a handed-back subtask
    QList<ManifestFile> files;
    // The model is a TorchScript archive: the "model" file, which the manifest's model names by the same hash.
    bool scriptModel = false;
    QList<ManifestPatch> weightsPatches; // optional: patches to the weights from earlier published files
    // Optional (protocol 6.8): the subtask was handed back part-way by lease `resumeFromLease`; the worker resumes
    // from its checkpoint (files' "checkpoint") at mini-batch `resumeStep`.
    qint64 resumeStep = 0;
    QString resumeFromLease;

    const ManifestFile* file(QStringView role) const;
};

struct ManifestExpectation
{
    QString agentId;
    LeaseId leaseId;
    QString coordinatorUrl; // https://host:port, as in agent.json
};

// `signature` is the base64 text as leased. Every error says which step failed and names the lease.
Result<TaskManifest> checkManifest(const VerifyKey& pinnedKey, const QByteArray& manifest,
                                   const QByteArray& signature, const ManifestExpectation& expected);

// How far the coordinator's clock may be from this machine's before a new manifest's times are refused.
inline constexpr qint64 kManifestClockSlackMs = 5 * 60 * 1000;
// The most weights patches a manifest may offer.
inline constexpr qsizetype kManifestMaxPatches = 16;
// The longest first lease the protocol allows (a job's deadline_seconds is at most 604 800).
inline constexpr qint64 kManifestMaxLeaseMs = 604'800LL * 1000;

// For a manifest that has just been leased (not one resumed after a restart: progress reports have moved its
// lease's deadline since): refuses one whose deadline has passed or that was issued in the future, each
// beyond kManifestClockSlackMs, and one whose deadline is not within kManifestMaxLeaseMs after its issue. So
// an old signed manifest replayed by someone between the agent and its coordinator is not run again; the
// SubtaskStore refuses a lease id it already holds in any state.
Status checkManifestFresh(const TaskManifest& manifest, qint64 nowMs);

} // namespace gleaner::agent
