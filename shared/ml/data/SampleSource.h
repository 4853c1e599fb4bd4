#pragma once
// A training file read in two passes, so that a dataset larger than memory can be sharded: opening it reads
// what the shard plan needs (the sample count, shape and type, and every label) and checks the file as far as
// that can be done without its samples; readSamples() then hands the samples over one at a time, in file order,
// through a bounded buffer. Every format's reader provides one (Idx::openSource, NumPy::openNpzSource ...), with
// the same messages for a malformed file as its in-memory reader.

#include "Result.h"
#include "tensor/TensorBundle.h"

#include <QByteArrayView>
#include <QList>
#include <QString>

#include <functional>
#include <vector>

namespace gleaner::ml {

class SampleSource
{
public:
    // Receives sample `index` (0, 1, 2 ... in file order), sampleBytes() bytes of sampleType(); the view is
    // valid during the call only. An error stops the reading and is returned.
    using Sink = std::function<Status(qint64 index, QByteArrayView sample)>;

    virtual ~SampleSource() = default;

    qint64 size() const { return qint64(m_labels.size()); }
    const std::vector<qint64>& labels() const { return m_labels; }
    // The shape of one sample, e.g. [1, 28, 28].
    const QList<qint64>& sampleShape() const { return m_sampleShape; }
    DType sampleType() const { return m_sampleType; } // U8 or F32, as a shard holds them
    qint64 sampleBytes() const { return TensorBundle::byteSizeFor(m_sampleType, m_sampleShape).value_or(0); }

    // Reads the samples; also refuses what only they show (data that ends early, a damaged archive member, a
    // field that is not a number). May be called once.
    virtual Status readSamples(const Sink& sink) = 0;

protected:
    std::vector<qint64> m_labels;
    QList<qint64> m_sampleShape;
    DType m_sampleType = DType::U8;
};

} // namespace gleaner::ml
