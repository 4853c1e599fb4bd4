#pragma once
// A job's training set sharded without holding it in memory: the coordinator's import of datasets of any size.
//
// open() is the first pass: it reads the training file's labels (and its sample count, shape and type), checks
// the file as far as that can be done without its samples, works out the test_fraction hold-out and limit_train,
// and loads the test set, which is kept whole. writeShards() is the second pass: it deals the training samples
// to shards exactly as Shards::write() deals an in-memory set (the plan depends on the labels alone), creates
// every shard file with its header and labels, and streams the samples in file order, each normalised on the
// way and written at its place. The shards are byte for byte those of loadDataset() + Shards::write() for the
// same spec and seed, and every malformed file is refused with the same message; a failed import leaves no
// shard file behind.
//
// Memory is the labels and an index per training sample, one read buffer (about a megabyte) and the test set,
// whatever the training file's size.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "ml/data/Normalization.h"
#include "ml/data/SampleSource.h"
#include "ml/data/ShardWriter.h"
#include "spec/JobSpec.h"

#include <QList>
#include <QStringList>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace gleaner::ml {

class TrainingImport
{
public:
    // As loadDataset(spec, limitTrain, inputShape), but the training samples are not read yet.
    static Result<TrainingImport> open(const DatasetSpec& spec, std::optional<qint64> limitTrain = std::nullopt,
                                       const QList<qint64>& inputShape = {});

    qint64 trainSize() const { return qint64(m_train.size()); }
    // The shape of one training sample, e.g. [1, 28, 28].
    QList<qint64> sampleShape() const { return m_source->sampleShape(); }
    // What the shards' samples take together (F32 once normalised).
    qint64 trainBytes() const;
    // The largest label + 1 of the training samples kept, and of the test set.
    qint64 trainLabelBound() const;
    qint64 testLabelBound() const;
    // Sentences for the submitter (an image folder's classes, the files it left out).
    const QStringList& notes() const { return m_notes; }

    // Writes shard-00000-of-N.safetensors ... into `dir`, as Shards::write(train, shards, seed, dir) would.
    // May be called once. `progress`, when given, hears the training samples written so far and their total,
    // after each sample: the caller decides how often to say so.
    Result<QList<ShardFile>> writeShards(int shards, quint64 seed, const QString& dir,
                                         const std::function<void(qint64 done, qint64 total)>& progress = {});

    // The test set, normalised. Held out of the training file (test_fraction), it is complete only once
    // writeShards() has read the samples.
    const Dataset& test() const { return m_test; }

private:
    std::unique_ptr<SampleSource> m_source;
    std::vector<qint64> m_train;   // file indices of the training samples kept, ascending
    std::vector<qint64> m_heldOut; // file indices of the test samples held out of the file, ascending
    Dataset m_test;
    std::optional<Normalizer> m_normalizer;
    QList<double> m_mean, m_std; // the spec's normalize, for a held-out test set
    QStringList m_notes;
};

} // namespace gleaner::ml
