#include "ml/data/Dataset.h"

#include <cstring>
#include <limits>

namespace gleaner::ml {

Status Dataset::checkLayout(const TensorEntry* x, const TensorEntry* y, const QString& what)
{
    if (!x || !y)
        return fail(
            QStringLiteral("%1: a dataset needs tensors \"x\" (samples) and \"y\" (labels)").arg(what));
    if (x->dtype != DType::U8 && x->dtype != DType::F32)
        return fail(QStringLiteral("%1: \"x\" must be U8 or F32, not %2").arg(what, dtypeName(x->dtype)));
    if (x->shape.size() < 2)
        return fail(
            QStringLiteral("%1: \"x\" must have a sample dimension and at least one more, got shape %2")
                .arg(what, shapeToString(x->shape)));
    if (y->shape.size() != 1 || y->shape[0] != x->shape[0])
        return fail(QStringLiteral("%1: \"y\" must have shape [%2] to label every sample, got %3")
                        .arg(what)
                        .arg(x->shape[0])
                        .arg(shapeToString(y->shape)));
    return {};
}

Result<std::vector<qint64>> Dataset::labelsFrom(DType type, QByteArrayView raw, const QString& what)
{
    const int width = dtypeSize(type);
    const qint64 count = raw.size() / width;
    std::vector<qint64> labels(size_t(count), 0);
    // Files from other writers may hold misaligned tensors: read through memcpy, not typed pointers.
    const auto read = [&](auto zero) {
        using T = decltype(zero);
        for (qint64 i = 0; i < count; ++i) {
            T value;
            std::memcpy(&value, raw.data() + i * qint64(sizeof(T)), sizeof(T));
            labels[size_t(i)] = qint64(value);
        }
    };
    switch (type) {
    case DType::I64:
        read(qint64{});
        break;
    case DType::I32:
        read(qint32{});
        break;
    case DType::U8:
        read(quint8{});
        break;
    case DType::I8:
        read(qint8{});
        break;
    case DType::I16:
        read(qint16{});
        break;
    default:
        return fail(QStringLiteral("%1: \"y\" must hold integer class labels, not %2")
                        .arg(what, dtypeName(type)));
    }
    for (qint64 i = 0; i < count; ++i) {
        const qint64 label = labels[size_t(i)];
        if (label < 0)
            return fail(QStringLiteral("%1: label %2 of sample %3 is negative").arg(what).arg(label).arg(i));
        if (label >= kLabelLimit)
            return fail(QStringLiteral("%1: label %2 of sample %3 is outside 0..%4; class labels must be "
                                       "0..num_classes-1")
                            .arg(what)
                            .arg(label)
                            .arg(i)
                            .arg(kLabelLimit - 1));
    }
    return labels;
}

Result<Dataset> Dataset::fromBundle(TensorBundle bundle, const QString& what)
{
    const TensorEntry* x = bundle.find(u"x");
    const TensorEntry* y = bundle.find(u"y");
    if (Status layout = checkLayout(x, y, what); !layout)
        return fail(layout.error());
    const qint64 count = x->shape[0];
    const char* raw = bundle.data(*y).data();
    auto read = labelsFrom(y->dtype, bundle.data(*y), what);
    if (!read)
        return fail(read.error());
    const std::vector<qint64>& labels = *read;

    Dataset dataset;
    dataset.m_size = count;
    if (y->dtype == DType::I64 && bundle.size() == 2 && quintptr(raw) % alignof(qint64) == 0) {
        // Already in shard layout: adopt the bundle as it is, without copying the samples.
        dataset.m_xIndex = qsizetype(x - bundle.entries().constData());
        dataset.m_yIndex = qsizetype(y - bundle.entries().constData());
        dataset.m_bundle = std::move(bundle);
        return dataset;
    }

    // Rebuild a bundle holding exactly x and y (I64), keeping the metadata: extra tensors are not carried.
    TensorBundle clean;
    clean.metadata() = bundle.metadata();
    if (auto status = clean.add(QStringLiteral("x"), x->dtype, x->shape, bundle.data(*x)); !status)
        return fail(what + u": " + status.error());
    if (auto status = clean.addValues<qint64>(QStringLiteral("y"), DType::I64, {count}, labels); !status)
        return fail(what + u": " + status.error());

    dataset.m_bundle = std::move(clean);
    return dataset;
}

Result<Dataset> Dataset::fromBytes(QByteArrayView samples, const QList<qint64>& sampleShape,
                                   const std::vector<qint64>& labels, const QString& what)
{
    QList<qint64> shape{qint64(labels.size())};
    shape += sampleShape;
    TensorBundle bundle;
    if (auto status = bundle.add(QStringLiteral("x"), DType::U8, shape, samples); !status)
        return fail(what + u": " + status.error());
    if (auto status =
            bundle.addValues<qint64>(QStringLiteral("y"), DType::I64, {qint64(labels.size())}, labels);
        !status)
        return fail(what + u": " + status.error());
    return fromBundle(std::move(bundle), what);
}

QList<qint64> Dataset::sampleShape() const
{
    if (m_bundle.isEmpty())
        return {};
    return x().shape.mid(1);
}

qint64 Dataset::sampleBytes() const
{
    return m_size == 0 ? 0 : x().byteSize / m_size;
}

qint64 Dataset::labelBound() const
{
    // fromBundle() keeps labels below kLabelLimit, but bundle() is writable: no label may overflow the bound.
    qint64 bound = 0;
    if (m_bundle.isEmpty())
        return 0;
    for (qint64 label : m_bundle.values<qint64>(y()))
        if (label >= bound)
            bound = label < std::numeric_limits<qint64>::max() ? label + 1 : label;
    return bound;
}

std::vector<qint64> Dataset::classCounts(qint64 numClasses) const
{
    std::vector<qint64> counts(size_t(std::max<qint64>(numClasses, 0)), 0);
    for (qint64 i = 0; i < m_size; ++i) {
        const qint64 label = this->label(i);
        if (label >= 0 && label < numClasses)
            ++counts[size_t(label)];
    }
    return counts;
}

Dataset Dataset::select(const std::vector<qint64>& indices) const
{
    const qint64 stride = sampleBytes();
    QList<qint64> shape = x().shape;
    shape[0] = qint64(indices.size());

    TensorBundle out;
    out.metadata() = m_bundle.metadata();
    // Both tensors first: adding one may move the buffer, so pointers are taken afterwards.
    out.addZeroed(QStringLiteral("x"), x().dtype, shape);
    out.addZeroed(QStringLiteral("y"), DType::I64, {qint64(indices.size())});
    char* target = out.mutableData(out.entries().at(0));
    char* labels = out.mutableData(out.entries().at(1));
    const char* source = m_bundle.data(x()).data();
    auto* labelTarget = reinterpret_cast<qint64*>(labels);
    for (size_t i = 0; i < indices.size(); ++i) {
        const qint64 index = indices[i];
        Q_ASSERT(index >= 0 && index < m_size);
        if (stride > 0)
            std::memcpy(target + qint64(i) * stride, source + index * stride, size_t(stride));
        labelTarget[i] = label(index);
    }

    Dataset dataset;
    dataset.m_bundle = std::move(out);
    dataset.m_size = qint64(indices.size());
    return dataset;
}

Dataset Dataset::head(qint64 count) const
{
    if (count >= m_size)
        return *this;
    std::vector<qint64> indices(size_t(std::max<qint64>(count, 0)));
    for (size_t i = 0; i < indices.size(); ++i)
        indices[i] = qint64(i);
    return select(indices);
}

} // namespace gleaner::ml
