#pragma once
// A labelled dataset held as a TensorBundle with two tensors, the layout of Gleaner's dataset shards:
//   "x": the samples, U8 (raw pixels, scaled to [0, 1] at training time) or F32, shape [N, ...sample shape]
//   "y": the labels, I64, shape [N]
// A shard file is exactly this bundle saved as safetensors, so it opens in Python as well.

#include "Result.h"
#include "tensor/TensorBundle.h"

#include <QList>
#include <QStringList>

#include <vector>

namespace gleaner::ml {

class Dataset
{
public:
    // Labels lie in 0..kLabelLimit-1: ModelSpec's largest num_classes is 100000.
    static constexpr qint64 kLabelLimit = 100000;

    Dataset() = default;

    // Checks the layout above and that every label lies in 0..kLabelLimit-1. Integer labels of any width are
    // converted to I64; `what` names the source in messages ("train shard 3").
    static Result<Dataset> fromBundle(TensorBundle bundle, const QString& what);
    // The checks fromBundle() makes of the tensors' types and shapes, for a reader that has only a file's
    // header (a null entry is a missing tensor).
    static Status checkLayout(const TensorEntry* x, const TensorEntry* y, const QString& what);
    // The labels held in `raw` as values of `type`, checked as fromBundle() checks them.
    static Result<std::vector<qint64>> labelsFrom(DType type, QByteArrayView raw, const QString& what);
    // Builds from raw U8 samples and labels, which must agree in count.
    static Result<Dataset> fromBytes(QByteArrayView samples, const QList<qint64>& sampleShape,
                                     const std::vector<qint64>& labels, const QString& what);

    qint64 size() const { return m_size; }
    bool isEmpty() const { return m_size == 0; }
    // The shape of one sample, e.g. [1, 28, 28].
    QList<qint64> sampleShape() const;
    DType sampleType() const { return x().dtype; }
    qint64 sampleBytes() const;

    const TensorBundle& bundle() const { return m_bundle; }
    TensorBundle& bundle() { return m_bundle; }
    const TensorEntry& x() const { return m_bundle.entries().at(m_xIndex); }
    const TensorEntry& y() const { return m_bundle.entries().at(m_yIndex); }
    qint64 label(qint64 index) const { return m_bundle.values<qint64>(y())[size_t(index)]; }
    // The largest label + 1 (0 for an empty set).
    qint64 labelBound() const;
    // Samples per label 0..numClasses-1; labels outside that range are not counted.
    std::vector<qint64> classCounts(qint64 numClasses) const;

    // A new dataset holding the given samples, in that order (copies them).
    Dataset select(const std::vector<qint64>& indices) const;
    // The first `count` samples (all when count >= size()).
    Dataset head(qint64 count) const;

private:
    TensorBundle m_bundle;
    qsizetype m_xIndex = 0;
    qsizetype m_yIndex = 1;
    qint64 m_size = 0;
};

struct DatasetSplit
{
    Dataset train;
    Dataset test; // kept apart for validation; never sharded to agents
    // What the import should tell whoever submitted the job, one sentence each: the classes an image folder
    // held and in which order they became labels, the files it left out. (The initializer lets
    // DatasetSplit{train, test} leave it out.)
    QStringList notes = {};
};

} // namespace gleaner::ml
