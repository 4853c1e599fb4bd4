#pragma once
// A TensorBundle is an ordered set of named tensors over one contiguous byte buffer, plus string metadata:
// the in-memory image of a safetensors file. Model weights, optimizer checkpoints, dataset shards and uploads
// are all TensorBundles, so one reader / writer and one set of checks serve every file Gleaner moves.
//
// A bundle read from a file shares the file's bytes (QByteArray is implicitly shared): tensors are views into
// it, nothing is copied. A bundle built in memory keeps each tensor 64-byte aligned in its own buffer. A
// bundle may also view memory it does not own (a mapped file, QByteArray::fromRawData) and keep its owner
// alive (keepAlive): writing to it copies first, as for a shared buffer.

#include "Result.h"
#include "tensor/DType.h"

#include <QByteArray>
#include <QList>
#include <QMap>
#include <QString>

#include <cstring>
#include <memory>
#include <span>

namespace gleaner {

struct TensorEntry
{
    QString name;
    DType dtype = DType::F32;
    QList<qint64> shape;
    qint64 offset = 0;   // into TensorBundle::buffer()
    qint64 byteSize = 0; // elementCount() * dtypeSize(dtype)

    qint64 elementCount() const;
};

// "[3, 4]": for messages.
QString shapeToString(const QList<qint64>& shape);

// Product of the dimensions, or nullopt when a dimension is negative or the product overflows qint64.
std::optional<qint64> shapeElementCount(const QList<qint64>& shape);

class TensorBundle
{
public:
    TensorBundle() = default;

    // Adopts `buffer` without copying it; `entries` must lie inside it (the safetensors reader checks that
    // before it calls this).
    static TensorBundle fromBuffer(QByteArray buffer, QList<TensorEntry> entries,
                                   QMap<QString, QString> metadata = {});

    // Appends a tensor, copying `bytes` (which may lie in this bundle's own buffer). Refuses a duplicate name
    // or a byte count that is not the shape's.
    Status add(const QString& name, DType dtype, const QList<qint64>& shape, QByteArrayView bytes);
    // Appends a zero-filled tensor and returns its bytes to fill in; nullptr on a duplicate name or bad
    // shape. The pointer is valid until the next tensor is added (the buffer may move).
    char* addZeroed(const QString& name, DType dtype, const QList<qint64>& shape);

    template <typename T>
    Status addValues(const QString& name, DType dtype, const QList<qint64>& shape, std::span<const T> values)
    {
        return add(
            name, dtype, shape,
            QByteArrayView(reinterpret_cast<const char*>(values.data()), qsizetype(values.size_bytes())));
    }

    bool isEmpty() const { return m_entries.isEmpty(); }
    qsizetype size() const { return m_entries.size(); }
    const QList<TensorEntry>& entries() const { return m_entries; }
    const TensorEntry* find(QStringView name) const;
    bool contains(QStringView name) const { return find(name) != nullptr; }

    QByteArrayView data(const TensorEntry& entry) const;
    // Detaches the buffer first when it is shared, so writing never changes another bundle.
    char* mutableData(const TensorEntry& entry);

    // Typed read-only view; T's size must be the entry's element size. Entries built in memory are aligned;
    // a view into a file read from disk is aligned as long as its writer ordered tensors by element size,
    // as Gleaner's writer and the reference writer do.
    template <typename T> std::span<const T> values(const TensorEntry& entry) const
    {
        Q_ASSERT(sizeof(T) == size_t(dtypeSize(entry.dtype)));
        Q_ASSERT(quintptr(m_buffer.constData() + entry.offset) % alignof(T) == 0);
        return {reinterpret_cast<const T*>(m_buffer.constData() + entry.offset),
                size_t(entry.byteSize / qint64(sizeof(T)))};
    }
    template <typename T> std::span<T> mutableValues(const TensorEntry& entry)
    {
        return {reinterpret_cast<T*>(mutableData(entry)), size_t(entry.byteSize / qint64(sizeof(T)))};
    }

    // Sum of the tensors' bytes (not counting alignment padding).
    qint64 tensorBytes() const;
    qint64 parameterCount() const;

    // A copy of it is valid while this bundle (or a copy of it) lives, when it views memory kept by
    // keepAlive.
    const QByteArray& buffer() const { return m_buffer; }
    // `owner` keeps the memory that buffer() views (raw data) alive for as long as this bundle and its copies
    // need it: until they are gone, or until writing to the bundle gave it its own copy.
    void keepAlive(std::shared_ptr<const void> owner) { m_owner = std::move(owner); }
    const QMap<QString, QString>& metadata() const { return m_metadata; }
    QMap<QString, QString>& metadata() { return m_metadata; }
    void setMetadata(const QString& key, const QString& value) { m_metadata.insert(key, value); }

    // Bytes of a tensor of this type and shape; nullopt when the shape is invalid or the size overflows.
    static std::optional<qint64> byteSizeFor(DType dtype, const QList<qint64>& shape);

private:
    char* append(const QString& name, DType dtype, const QList<qint64>& shape, qint64 byteSize);

    QByteArray m_buffer;
    QList<TensorEntry> m_entries;
    QMap<QString, QString> m_metadata;
    std::shared_ptr<const void> m_owner; // what keeps m_buffer's raw data (keepAlive)
};

} // namespace gleaner
