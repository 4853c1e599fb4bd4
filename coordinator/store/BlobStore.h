#pragma once
// Content-addressed files under the data directory: blobs/ab/abcdef... named by the SHA-256 of their bytes.
// Shards, model specs, published weights and snapshots are all blobs, so a file's name is its integrity check,
// its ETag and its cache key on the agents. Writes are atomic (temporary file, fsync, rename); a blob is never
// changed once written. Safe to use from several threads.

#include "Result.h"

#include <QByteArray>
#include <QString>

namespace gleaner::coordinator {

struct BlobInfo
{
    QString sha256; // lowercase hex
    qint64 size = 0;
};

class BlobStore
{
public:
    explicit BlobStore(QString dir);

    Result<BlobInfo> put(const QByteArray& bytes);
    // Hashes `path` and moves it into the store (or deletes it when the blob is already there).
    Result<BlobInfo> adoptFile(const QString& path);

    bool contains(const QString& sha256) const;
    // The file of a blob; empty when `sha256` is not 64 lowercase hex digits (never a path outside the store).
    QString path(const QString& sha256) const;
    // The same relative to the store's folder ("ab/abcdef..."), for a server that serves that folder itself.
    QString relativePath(const QString& sha256) const;
    qint64 size(const QString& sha256) const; // -1 when absent

private:
    QString m_dir;
};

} // namespace gleaner::coordinator
