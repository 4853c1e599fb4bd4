#pragma once
// Turns a submitted job spec into the files its subtasks need, once: the dataset is loaded and split into
// class-balanced shards, the model spec and the initial weights are written, and the test split is kept for
// validation. Everything lands in the blob store under its SHA-256. Runs off the state thread: importing
// Fashion-MNIST takes about a second.

#include "Result.h"
#include "ml/Model.h"
#include "ml/data/Dataset.h"
#include "spec/JobSpec.h"
#include "store/BlobStore.h"

#include <QJsonArray>
#include <QList>
#include <QStringList>

namespace gleaner::coordinator {

struct ShardRef
{
    int index = 0;
    QString sha256;
    qint64 bytes = 0;
    qint64 samples = 0;
};

struct ImportedJob
{
    QList<ShardRef> shards;
    BlobInfo model;          // the model spec as compact JSON, or a TorchScript job's archive
    // The spec's model as the job runs it: a TorchScript archive named by content ("sha256:..."), found in the
    // blob store.
    ModelSpec modelSpec;
    BlobInfo initialWeights; // safetensors
    BlobInfo testSet;        // safetensors (x, y), reloaded after a restart
    QStringList notes;       // what the dataset import has to say (DatasetSplit::notes), for the log
};

namespace JobImporter {

// Cheap checks at submit time: the dataset's files exist. The message names the missing file.
Status checkDatasetFiles(const DatasetSpec& dataset);

// The weights the job starts from: the model's seeded weights, or the spec's initial_weights file, checked against
// them (every tensor by name, shape and kind of type; every mismatch named at once; every value finite) and
// loaded into `net`.
Result<TensorBundle> startingWeights(const JobSpec& spec, ml::Model& net);

// At submit, before the job is accepted: a TorchScript model is loaded and checked (ml::Model::create refuses an
// archive that is not TorchScript, that calls an operator off the allowlist or gives logits of the wrong shape).
// Returns the model's tensors, parameters then buffers, by name, shape and type, for the submitter to see.
Result<QJsonArray> checkModel(const ModelSpec& model);

// Names the job's TorchScript archive by content and points the spec at the blob that holds it: what manifests
// carry and where the coordinator's own validations load it from. Zoo specs are returned as they are.
ModelSpec storedModel(const ModelSpec& model, const BlobInfo& blob, const BlobStore& blobs);
Result<ImportedJob> import(const JobSpec& spec, BlobStore& blobs, const QString& scratchDir);

// The model spec as the manifest and the model blob carry it.
QByteArray modelSpecBytes(const ModelSpec& model);

} // namespace JobImporter
} // namespace gleaner::coordinator
