#pragma once
// A leased subtask's manifest, checked the way docs/protocol.md section 7.5 orders it: the signature is
// verified over the exact bytes with the coordinator key pinned at enrollment before anything is parsed, then
// the fields the agent acts on are read and matched against who the agent is (its id, the lease it asked
// about, the coordinator it talks to). Nothing of a manifest that fails a step is used. Run before every
// worker start, not only when the lease arrives: the stored bytes could have been altered on this disk in
// between.

#include "Result.h"
#include "crypto/Ed25519.h"

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

struct TaskManifest
{
    QString leaseId;
    qint64 jobId = 0;
    QString jobName;
    qint64 workunitId = 0;
    int epoch = 0;
    int shard = 0;
    qint64 samples = 0;
    qint64 baseVersion = 0;
    qint64 issuedMs = 0;
    qint64 deadlineMs = 0;     // the first deadline; progress reports move the lease's deadline later
    QList<ManifestFile> files; // model, weights, shard, in that order

    const ManifestFile* file(QStringView role) const;
};

struct ManifestExpectation
{
    QString agentId;
    QString leaseId;
    QString coordinatorUrl; // https://host:port, as in agent.json
};

// `signature` is the base64 text as leased. Every error says which step failed and names the lease.
Result<TaskManifest> checkManifest(const VerifyKey& pinnedKey, const QByteArray& manifest,
                                   const QByteArray& signature, const ManifestExpectation& expected);

} // namespace gleaner::agent
