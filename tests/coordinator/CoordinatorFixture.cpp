#include "CoordinatorFixture.h"

#include "PostgresServer.h"
#include "RedisServer.h"
#include "TestSupport.h"
#include "codec/UpdateCodec.h"
#include "crypto/SignedEnvelope.h"
#include "format/SafeTensors.h"
#include "ml/Trainer.h"
#include "spec/AugmentSpec.h"
#include "spec/ModelSpec.h"
#include "spec/OptimizerSpec.h"
#include "store/Database.h"
#include "store/RedisConnection.h"
#include "util/Durability.h"

#include <QJsonArray>

#include <QDir>
#include <QJsonDocument>
#include <QTest>

#include <random>

namespace gleaner::test {
namespace {

ml::Dataset synthetic(qint64 count, quint32 seed)
{
    std::mt19937 rng(seed);
    QByteArray pixels(count * 64, '\0');
    std::vector<qint64> labels(static_cast<size_t>(count));
    for (qint64 i = 0; i < count; ++i) {
        const int label = int(rng() % 4);
        labels[size_t(i)] = label;
        for (int p = 0; p < 64; ++p)
            pixels[i * 64 + p] = char(quint8(((p / 16) == label ? 150 : 0) + rng() % 100));
    }
    return *ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("synthetic"));
}

} // namespace

void writeSyntheticDataset(const QString& dir, qint64 trainCount, qint64 testCount)
{
    QDir().mkpath(dir);
    QVERIFY(SafeTensors::save(dir + QStringLiteral("/train.safetensors"), synthetic(trainCount, 1).bundle()).ok());
    QVERIFY(SafeTensors::save(dir + QStringLiteral("/test.safetensors"), synthetic(testCount, 2).bundle()).ok());
}

TensorBundle shifted(const TensorBundle& weights, float by)
{
    TensorBundle client = weights;
    for (const auto& entry : client.entries())
        if (entry.dtype == DType::F32)
            for (float& v : client.mutableValues<float>(entry))
                v += by;
    return client;
}

QByteArray tinyJobSpec(const QString& dir, int shards, int maxEpochs, double target, int deadlineSeconds,
                       const QString& extra)
{
    return QStringLiteral(R"({"name": "tiny", "dataset": {"format": "safetensors", "train": "%1/train.safetensors",
        "test": "%1/test.safetensors"}, "model": {"arch": "mlp", "input_shape": [1, 8, 8], "num_classes": 4,
        "hidden": [16]}, "shards": %2, "local_epochs": 1, "batch_size": 16, "optimizer": {"name": "adam", "lr": 0.01},
        "target_accuracy": %3, "max_epochs": %4, "deadline_seconds": %5, "seed": 7 %6})")
        .arg(dir)
        .arg(shards)
        .arg(target)
        .arg(maxEpochs)
        .arg(deadlineSeconds)
        .arg(extra)
        .toUtf8();
}

namespace {

// With GLEANER_TEST_POSTGRES=1 in the environment (the *_postgres tests of ctest), every fixture's coordinator
// keeps its state in a database of its own on one PostgreSQL server that this test process starts. Empty URL and
// `error` when the variable is not set; empty URL and the reason when no database could be made.
QString postgresDatabaseForFixture(QString& error)
{
    if (qEnvironmentVariableIsEmpty("GLEANER_TEST_POSTGRES"))
        return {};
    static PostgresServer server;
    static const QString started = [] {
        const QString missing = PostgresServer::missing();
        // With a password, as local-postgres.sh sets a server up: the coordinator reads it from the file the
        // URL names.
        return missing.isEmpty() ? server.start(/*password=*/true) : missing;
    }();
    if (!started.isEmpty()) {
        error = started;
        return {};
    }
    static int databases = 0;
    const QString name = QStringLiteral("fixture%1").arg(++databases);
    if (const QString created = server.createDatabase(name); !created.isEmpty()) {
        error = created;
        return {};
    }
    return server.url(name);
}

// With GLEANER_TEST_REDIS=1, every fixture's coordinator keeps its jobs' weights in one Redis that this test
// process starts (each fixture's database names a deployment of its own, so their keys never meet).
QString redisForFixture(QString& error)
{
    if (qEnvironmentVariableIsEmpty("GLEANER_TEST_REDIS"))
        return {};
    static RedisServer server;
    static const QString started = [] {
        const QString missing = RedisServer::missing();
        // With a password, as local-redis.sh sets a server up: the coordinator reads it from the file the URL
        // names.
        return missing.isEmpty() ? server.start(/*appendOnly=*/false, /*password=*/true) : missing;
    }();
    if (!started.isEmpty()) {
        error = started;
        return {};
    }
    return server.url();
}

} // namespace

bool CoordinatorFixture::onRedis()
{
    return !qEnvironmentVariableIsEmpty("GLEANER_TEST_REDIS");
}

bool CoordinatorFixture::onPostgres()
{
    return !qEnvironmentVariableIsEmpty("GLEANER_TEST_POSTGRES");
}

bool CoordinatorFixture::setUp(bool openEnrollment)
{
    scratch = scratchDir();
    dir = coordinator::DataDirectory(scratch->filePath(QStringLiteral("data")));
    QString postgresError;
    config.database = postgresDatabaseForFixture(postgresError);
    if (!postgresError.isEmpty()) {
        qWarning() << postgresError;
        return false;
    }
    QString redisError;
    if (const QString redis = redisForFixture(redisError); !redis.isEmpty())
        config.redis = redis; // else what the test set, if anything
    if (!redisError.isEmpty()) {
        qWarning() << redisError;
        return false;
    }
    config.openEnrollment = openEnrollment;
    config.listenPort = 0;
    config.snapshotEveryUpdates = 1000;
    config.publishIntervalMs = 0;
    auto created = coordinator::initializeDataDirectory(dir, config);
    if (!created) {
        qWarning() << created.error();
        return false;
    }
    init = *created;
    return reopen();
}

bool CoordinatorFixture::reopen()
{
    core.reset();
    auto opened = coordinator::Coordinator::open(dir, config, clock);
    if (!opened) {
        qWarning() << opened.error();
        return false;
    }
    core = std::move(*opened);
    return true;
}

QString CoordinatorFixture::forgetSharedWeights()
{
    if (config.redis.isEmpty())
        return {};
    auto db = coordinator::Database::open(dir.databaseLocation(config));
    if (!db)
        return db.error();
    auto id = (*db)->deploymentId();
    if (!id)
        return id.error();
    auto redis = coordinator::RedisConnection::open(config.redis);
    if (!redis)
        return redis.error();
    auto keys = (*redis)->command({"KEYS", "gleaner:" + id->toUtf8() + ":*"});
    if (!keys)
        return keys.error();
    for (const coordinator::RedisReply& key : keys->elements)
        if (auto deleted = (*redis)->command({"DEL", key.text}); !deleted)
            return deleted.error();
    return {};
}

TensorBundle CoordinatorFixture::serverWeights(qint64 jobId)
{
    core->drain();
    std::promise<coordinator::HttpResponse> promise;
    core->state().post([&] {
        core->weightsExport().serve(jobId, [&](coordinator::HttpResponse r) { promise.set_value(r); });
    });
    const coordinator::HttpResponse exported = promise.get_future().get();
    auto bundle = SafeTensors::load(exported.filePath);
    return bundle ? *bundle : TensorBundle();
}

QJsonObject CoordinatorFixture::call(const std::function<coordinator::HttpResponse()>& work, int* status)
{
    const coordinator::HttpResponse response = core->state().call(work);
    if (status)
        *status = response.status;
    return QJsonDocument::fromJson(response.body).object();
}

QJsonObject CoordinatorFixture::enroll(const QString& name)
{
    QJsonObject request{{QStringLiteral("name"), name}, {QStringLiteral("platform"), QStringLiteral("test")}};
    return call([&] { return core->enrollment().enroll(request); });
}

qint64 CoordinatorFixture::submit(const QByteArray& spec)
{
    int status = 0;
    const QJsonObject reply = call([&] { return core->jobs().submit(spec); }, &status);
    if (status != 201) {
        qWarning() << "submit refused:" << reply;
        return -1;
    }
    const qint64 id = reply.value(QStringLiteral("id")).toInteger();
    for (int i = 0; i < 200; ++i) {
        core->drain();
        const QJsonObject job = call([&] { return core->jobs().status(id); });
        if (job.value(QStringLiteral("state")).toString() != u"created")
            return id;
        QTest::qWait(20);
    }
    return -1;
}

std::vector<LeasedTask> CoordinatorFixture::lease(const QString& agentId, int maxTasks, QJsonObject* reply)
{
    core->drain();
    const QJsonObject answer = call([&] {
        return core->leases().lease(agentId, QJsonObject{{QStringLiteral("max_tasks"), maxTasks}});
    });
    if (reply)
        *reply = answer;
    std::vector<LeasedTask> tasks;
    auto key = VerifyKey::fromPem(init.signingPublicKeyPem);
    for (const auto& value : answer.value(QStringLiteral("tasks")).toArray()) {
        const QJsonObject task = value.toObject();
        auto envelope = SignedEnvelope::fromJson(task);
        auto manifest = envelope ? SignedEnvelope::verify(*key, *envelope) : Result<QJsonObject>(fail(envelope.error()));
        if (!manifest)
            qWarning() << manifest.error();
        tasks.push_back({task.value(QStringLiteral("lease_id")).toString(), manifest ? *manifest : QJsonObject()});
    }
    return tasks;
}

QString CoordinatorFixture::leaseNonce(const QString& leaseId)
{
    auto expected = core->state().call([&] { return core->results().expectationsFor(leaseId); });
    return expected ? expected->nonce : QString();
}

TensorBundle CoordinatorFixture::leaseBase(const QString& leaseId)
{
    auto expected = core->state().call([&] { return core->results().expectationsFor(leaseId); });
    if (!expected)
        return {};
    auto weights = SafeTensors::load(expected->baseWeightsPath);
    return weights ? *weights : TensorBundle();
}

TensorBundle CoordinatorFixture::withResultMetadata(const QString& leaseId, const TensorBundle& weights,
                                                qint64 baseVersion, qint64 samples)
{
    TensorBundle result = weights;
    // A nonce the caller set (a test of a wrong one) stays; otherwise the lease's, as the worker copies it.
    const QString nonce = weights.metadata().value(QStringLiteral("gleaner.nonce"), leaseNonce(leaseId));
    result.metadata().clear();
    result.setMetadata(QStringLiteral("gleaner.nonce"), nonce);
    result.setMetadata(QStringLiteral("gleaner.base_version"), QString::number(baseVersion));
    result.setMetadata(QStringLiteral("gleaner.samples"), QString::number(samples));
    result.setMetadata(QStringLiteral("gleaner.loss"), QStringLiteral("0.5"));
    return result;
}

int CoordinatorFixture::upload(const QString& agentId, const QString& leaseId, const TensorBundle& weights,
                               qint64 baseVersion, QString* error, qint64 samples, QJsonObject* reply)
{
    return uploadBytes(agentId, leaseId, SafeTensors::serialize(withResultMetadata(leaseId, weights, baseVersion, samples)),
                       error, reply);
}

int CoordinatorFixture::uploadEncoded(const QString& agentId, const QString& leaseId, const TensorBundle& weights,
                                      qint64 baseVersion, const UploadSpec& spec, QString* error)
{
    auto encoded = UpdateCodec::encode(withResultMetadata(leaseId, weights, baseVersion), leaseBase(leaseId), spec,
                                       nullptr);
    if (!encoded)
        return -1;
    return uploadBytes(agentId, leaseId, UpdateCodec::pack(*encoded, spec.zstd), error);
}

QString CoordinatorFixture::writeUpload(const QByteArray& body)
{
    const QString file = dir.uploadsDir() + QStringLiteral("/test-%1.safetensors").arg(++m_files);
    QFile out(file);
    if (!out.open(QIODevice::WriteOnly) || out.write(body) != body.size())
        return {};
    return file;
}

coordinator::HttpResponse CoordinatorFixture::resultOfUpload(const QString& agentId, const QString& leaseId,
                                                             const QString& file)
{
    auto expected = core->results().expectationsFor(leaseId);
    if (!expected)
        return core->leaseNotInMemory(agentId, leaseId);
    // The checker thread's steps, run here on the state thread: nothing else runs meanwhile.
    auto base = m_bases.get(expected->baseWeightsSha, expected->baseWeightsPath);
    if (!base)
        return coordinator::HttpResponse::error(503, base.error());
    auto update = coordinator::UpdateChecker::check(file, *expected, **base);
    if (!update)
        return core->results().refuse(agentId, leaseId, update.error());
    if (auto kept = Durability::syncFile(file); !kept)
        return coordinator::HttpResponse::error(500, kept.error());
    return core->results().receive(agentId, leaseId, file, std::move(*update));
}

int CoordinatorFixture::uploadBytes(const QString& agentId, const QString& leaseId, const QByteArray& body,
                                    QString* error, QJsonObject* reply)
{
    const QString file = writeUpload(body);
    if (file.isEmpty())
        return -1;
    int status = 0;
    const QJsonObject answer = call([&] { return resultOfUpload(agentId, leaseId, file); }, &status);
    if (error)
        *error = answer.value(QStringLiteral("error")).toString();
    if (reply)
        *reply = answer;
    core->drain();
    return status;
}

int CoordinatorFixture::handBack(const QString& agentId, const QString& leaseId, const QByteArray& checkpoint,
                                 QJsonObject* reply)
{
    const QString file = dir.uploadsDir() + QStringLiteral("/checkpoint-%1.safetensors").arg(++m_files);
    QFile out(file);
    if (!out.open(QIODevice::WriteOnly) || out.write(checkpoint) != checkpoint.size())
        return -1;
    out.close();
    int status = 0;
    const QJsonObject answer = call(
        [&] {
            if (checkpoint.isEmpty())
                return core->handBacks().handBack(agentId, leaseId, std::nullopt, std::nullopt, {});
            auto expected = core->handBacks().checkpointExpectationsFor(leaseId);
            if (!expected)
                return core->handBacks().handBack(agentId, leaseId, std::nullopt, std::nullopt, {});
            // The checker thread's steps, run here on the state thread: nothing else runs meanwhile.
            auto base = m_bases.get(expected->baseWeightsSha, expected->baseWeightsPath);
            if (!base)
                return coordinator::HttpResponse::error(503, base.error());
            auto checked = coordinator::CheckpointChecker::check(file, *expected, **base, m_shardHashes);
            if (!checked)
                return core->handBacks().handBack(agentId, leaseId, std::nullopt, std::nullopt,
                                                  checked.error(), true);
            auto blob = core->blobs().adoptFile(file);
            if (!blob)
                return coordinator::HttpResponse::error(500, blob.error());
            return core->handBacks().handBack(agentId, leaseId, *blob, *checked, {});
        },
        &status);
    QFile::remove(file);
    if (reply)
        *reply = answer;
    return status;
}

QByteArray CoordinatorFixture::checkpointOf(const LeasedTask& task, qint64 steps)
{
    const QJsonObject hyper = task.manifest.value(QStringLiteral("hyperparameters")).toObject();
    ml::TrainRequest request;
    request.model = *ModelSpec::fromJson(task.manifest.value(QStringLiteral("model")).toObject());
    request.optimizer = *OptimizerSpec::fromJson(hyper.value(QStringLiteral("optimizer")).toObject());
    request.localEpochs = hyper.value(QStringLiteral("local_epochs")).toInt();
    request.batchSize = hyper.value(QStringLiteral("batch_size")).toInt();
    request.steps = hyper.value(QStringLiteral("steps")).toInteger(0);
    request.seed = quint64(hyper.value(QStringLiteral("seed")).toInteger());
    if (hyper.contains(QStringLiteral("augment")))
        request.augment = *AugmentSpec::fromJson(hyper.value(QStringLiteral("augment")).toObject());
    request.threads = 1;
    request.checkpointPath = scratch->filePath(QStringLiteral("checkpoint-%1.safetensors").arg(++m_files));
    request.checkpointIntervalSeconds = 0;
    QString shardSha;
    for (const auto& value : task.manifest.value(QStringLiteral("files")).toArray())
        if (value.toObject().value(QStringLiteral("role")).toString() == u"shard")
            shardSha = value.toObject().value(QStringLiteral("sha256")).toString();
    auto shard = ml::Dataset::fromBundle(*SafeTensors::load(core->blobs().path(shardSha)), QStringLiteral("shard"));
    if (!shard)
        return {};
    ml::TrainHooks hooks;
    hooks.betweenBatches = [steps](const ml::TrainProgress& p) {
        return p.step >= steps ? ml::TrainControl::CheckpointAndStop : ml::TrainControl::Continue;
    };
    auto stopped = ml::Trainer::train(request, leaseBase(task.leaseId), *shard, hooks);
    if (!stopped || stopped->status != ml::TrainOutcome::Status::Stopped)
        return {};
    QFile file(request.checkpointPath);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

} // namespace gleaner::test
