#pragma once
// A coordinator in a scratch data directory with a ManualClock, and a tiny learnable job on a synthetic
// safetensors dataset, for tests of the core and of the HTTP API.

#include "config/Initializer.h"
#include "core/Coordinator.h"
#include "ml/data/Dataset.h"
#include "spec/UploadSpec.h"
#include "tensor/TensorBundle.h"

#include <QTemporaryDir>

#include <memory>

namespace gleaner::test {

// Writes train.safetensors and test.safetensors (8x8 U8 images, 4 classes) into `dir`.
void writeSyntheticDataset(const QString& dir, qint64 trainCount = 256, qint64 testCount = 128);

// `weights` with every F32 value moved by `by`: an upload whose change is known exactly.
TensorBundle shifted(const TensorBundle& weights, float by);

// A job spec (JSON text) over that dataset: mlp 64-16-4, `shards` shards, adam.
QByteArray tinyJobSpec(const QString& dir, int shards = 4, int maxEpochs = 3, double target = 0.99,
                       int deadlineSeconds = 60, const QString& extra = {});

// A task of a lease reply, its manifest verified with the coordinator's key.
struct LeasedTask
{
    QString leaseId;
    QJsonObject manifest;
};

struct CoordinatorFixture
{
    std::unique_ptr<QTemporaryDir> scratch;
    coordinator::DataDirectory dir{QString()};
    coordinator::CoordinatorConfig config;
    coordinator::InitResult init;
    ManualClock clock;
    std::unique_ptr<coordinator::Coordinator> core;

    // Whether this test process runs its coordinators on PostgreSQL (GLEANER_TEST_POSTGRES set: each fixture
    // gets a fresh database on a server the process starts) rather than on gleaner.db.
    static bool onPostgres();
    // Whether its coordinators keep their jobs' weights in Redis (GLEANER_TEST_REDIS set: one Redis per
    // process).
    static bool onRedis();
    // Initialises the data directory and opens the coordinator; `open` false leaves it closed.
    bool setUp(bool openEnrollment = true);
    bool reopen();
    // [state] helpers, run on the state thread and waited for.
    QJsonObject enroll(const QString& name = QStringLiteral("agent"));
    qint64 submit(const QByteArray& spec); // waits until the job runs
    QJsonObject call(const std::function<coordinator::HttpResponse()>& work, int* status = nullptr);
    // Leases up to `maxTasks` tasks for the agent (after everything queued is done), as an agent would.
    std::vector<LeasedTask> lease(const QString& agentId, int maxTasks = 1, QJsonObject* reply = nullptr);
    // With the weights in Redis (config.redis): deletes every key of this fixture's deployment there, as a
    // Redis restarted without persistence has none. Empty when done (or nothing to do), else why not.
    QString forgetSharedWeights();
    // The job's server weights after everything queued, as `job export` writes them (empty when there are
    // none).
    TensorBundle serverWeights(qint64 jobId);
    // The weights a lease handed out (empty when the lease is unknown).
    TensorBundle leaseBase(const QString& leaseId);
    // The nonce signed into the lease's manifest, which a result must carry back (empty for an unknown lease).
    QString leaseNonce(const QString& leaseId);
    // An upload through the same steps as ApiHandler: expectations, UpdateChecker, result or refusal. `weights`
    // get the protocol's metadata; returns the answer's status and its error text in `error`.
    int upload(const QString& agentId, const QString& leaseId, const TensorBundle& weights, qint64 baseVersion,
               QString* error = nullptr, qint64 samples = 10, QJsonObject* reply = nullptr);
    // The same upload as a worker writes it for a job whose "upload" is `spec`: the update against the lease's
    // weights, encoded (and compressed) by UpdateCodec.
    int uploadEncoded(const QString& agentId, const QString& leaseId, const TensorBundle& weights,
                      qint64 baseVersion, const UploadSpec& spec, QString* error = nullptr);
    // An upload of exactly these bytes.
    int uploadBytes(const QString& agentId, const QString& leaseId, const QByteArray& body, QString* error = nullptr,
                    QJsonObject* reply = nullptr);
    // The two halves of uploadBytes, for a test that interleaves uploads with other requests on the state
    // thread: the body written where an upload lands (empty when it cannot be), and the steps taken with it
    // (expectations, UpdateChecker, result), on the calling thread, which must be the state thread. Nothing
    // is drained: the fold may still be queued on the weights thread.
    QString writeUpload(const QByteArray& body);
    coordinator::HttpResponse resultOfUpload(const QString& agentId, const QString& leaseId,
                                             const QString& file);
    // A hand-back through the same steps as ApiHandler (protocol 6.8): with `checkpoint` bytes (empty: none),
    // expectations, CheckpointChecker, the blob store, then the hand-back itself.
    int handBack(const QString& agentId, const QString& leaseId, const QByteArray& checkpoint,
                 QJsonObject* reply = nullptr);
    // A genuine checkpoint of the lease's subtask, as its worker writes it when stopped after `steps` mini-batches.
    QByteArray checkpointOf(const LeasedTask& task, qint64 steps);
    // `weights` with the protocol's metadata for the lease, as the worker writes them.
    TensorBundle withResultMetadata(const QString& leaseId, const TensorBundle& weights, qint64 baseVersion,
                                    qint64 samples = 10);

private:
    coordinator::BaseWeightsCache m_bases;
    coordinator::CheckpointChecker::ShardHashes m_shardHashes;
    int m_files = 0;
};

} // namespace gleaner::test
