#include "tensor/TensorBundle.h"

#include <QStringList>

#include <limits>

namespace gleaner {
namespace {
constexpr qint64 kAlignment = 64;
}

qint64 TensorEntry::elementCount() const
{
    return shapeElementCount(shape).value_or(0);
}

QString shapeToString(const QList<qint64>& shape)
{
    QStringList parts;
    for (qint64 dim : shape)
        parts << QString::number(dim);
    return u'[' + parts.join(u", ") + u']';
}

std::optional<qint64> shapeElementCount(const QList<qint64>& shape)
{
    qint64 count = 1;
    for (qint64 dim : shape) {
        if (dim < 0)
            return std::nullopt;
        if (dim != 0 && count > std::numeric_limits<qint64>::max() / dim)
            return std::nullopt;
        count *= dim;
    }
    return count;
}

TensorBundle TensorBundle::fromBuffer(QByteArray buffer, QList<TensorEntry> entries,
                                      QMap<QString, QString> metadata)
{
    TensorBundle bundle;
    bundle.m_buffer = std::move(buffer);
    bundle.m_entries = std::move(entries);
    bundle.m_metadata = std::move(metadata);
    return bundle;
}

char* TensorBundle::append(const QString& name, DType dtype, const QList<qint64>& shape, qint64 byteSize)
{
    const qint64 offset = (qint64(m_buffer.size()) + kAlignment - 1) / kAlignment * kAlignment;
    m_buffer.resize(qsizetype(offset + byteSize), '\0');
    m_entries.append(TensorEntry{name, dtype, shape, offset, byteSize});
    return m_buffer.data() + offset;
}

std::optional<qint64> TensorBundle::byteSizeFor(DType dtype, const QList<qint64>& shape)
{
    const auto count = shapeElementCount(shape);
    if (!count || *count > std::numeric_limits<qint64>::max() / dtypeSize(dtype))
        return std::nullopt;
    return *count * dtypeSize(dtype);
}

Status TensorBundle::add(const QString& name, DType dtype, const QList<qint64>& shape, QByteArrayView bytes)
{
    if (contains(name))
        return fail(QStringLiteral("tensor \"%1\" is already in the bundle").arg(name));
    if (name == u"__metadata__")
        return fail(QStringLiteral(
            "\"__metadata__\" is reserved by the safetensors format; name the tensor otherwise"));
    const auto size = byteSizeFor(dtype, shape);
    if (!size)
        return fail(QStringLiteral("tensor \"%1\": shape %2 is invalid or too large")
                        .arg(name, shapeToString(shape)));
    const qint64 expected = *size;
    if (expected != bytes.size())
        return fail(QStringLiteral("tensor \"%1\": shape %2 of %3 needs %4 bytes, got %5")
                        .arg(name, shapeToString(shape), dtypeName(dtype))
                        .arg(expected)
                        .arg(bytes.size()));
    // `bytes` may point into this bundle's own buffer (copying a tensor under a new name), which append()
    // may reallocate before the copy: take the bytes out first then.
    const auto begin = quintptr(m_buffer.constData());
    const auto source = quintptr(bytes.data());
    QByteArray own;
    if (expected > 0 && source >= begin && source < begin + quintptr(m_buffer.size())) {
        own = bytes.toByteArray();
        bytes = own;
    }
    char* target = append(name, dtype, shape, expected);
    if (expected > 0)
        std::memcpy(target, bytes.data(), size_t(expected));
    return {};
}

char* TensorBundle::addZeroed(const QString& name, DType dtype, const QList<qint64>& shape)
{
    const auto size = byteSizeFor(dtype, shape);
    if (!size || contains(name) || name == u"__metadata__")
        return nullptr;
    return append(name, dtype, shape, *size);
}

const TensorEntry* TensorBundle::find(QStringView name) const
{
    for (const auto& entry : m_entries)
        if (entry.name == name)
            return &entry;
    return nullptr;
}

QByteArrayView TensorBundle::data(const TensorEntry& entry) const
{
    return QByteArrayView(m_buffer.constData() + entry.offset, qsizetype(entry.byteSize));
}

char* TensorBundle::mutableData(const TensorEntry& entry)
{
    char* at = m_buffer.data() + entry.offset; // QByteArray::data() detaches a shared or raw buffer
    m_owner.reset();                           // the bytes are this bundle's own now
    return at;
}

qint64 TensorBundle::tensorBytes() const
{
    qint64 total = 0;
    for (const auto& entry : m_entries)
        total += entry.byteSize;
    return total;
}

qint64 TensorBundle::parameterCount() const
{
    qint64 total = 0;
    for (const auto& entry : m_entries)
        total += entry.elementCount();
    return total;
}

} // namespace gleaner
