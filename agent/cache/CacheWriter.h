#pragma once
// One download into the cache. The network layer appends the body as it arrives (from libcurl's write
// callback); the SHA-256 is computed as bytes are written, so commit() needs no second read of a 50 GB shard.
// A download cut short (network, crash, shutdown) leaves <cache>/partial/<sha256>.part; the next beginWrite()
// for that hash hashes what is there and reports resumeOffset(), so the caller asks for the rest with
// "Range: bytes=<resumeOffset>-".
//
// A caller that would rather hand libcurl a FILE* may write to partialPath() itself (opened for append);
// commit() hashes whatever is in the file beyond what append() saw. Do not mix both in one writer.
//
// A writer belongs to one thread at a time and must not outlive its FileCache. Destroying it without commit()
// keeps the partial file for a later resume; discard() deletes it.

#include "Result.h"
#include "cache/CacheIndex.h"
#include "crypto/Sha256.h"

#include <QByteArrayView>
#include <QFile>
#include <QList>
#include <QString>

#include <memory>

namespace gleaner::agent {

class FileCache;

struct EvictedFile
{
    QString sha256;
    qint64 size = 0;
    CacheRole role = CacheRole::Unknown;
};

// What an eviction pass did, for the agent's log ("evicted 3 files, 2.1 GB; 4.9 of 5 GB used").
struct EvictionReport
{
    QList<EvictedFile> evicted;
    qint64 usedBytes = 0;
    qint64 capBytes = 0;
    // Pinned files alone exceed the cap: nothing more may be evicted until a subtask finishes.
    bool overCap() const { return usedBytes > capBytes; }
};

struct CommitResult
{
    QString path; // where the verified file now lives
    EvictionReport eviction;
};

class CacheWriter
{
public:
    ~CacheWriter();
    CacheWriter(const CacheWriter&) = delete;
    CacheWriter& operator=(const CacheWriter&) = delete;

    const QString& sha256() const { return m_sha256; }
    qint64 expectedSize() const { return m_expectedSize; }
    CacheRole role() const { return m_role; }
    const QString& partialPath() const { return m_partialPath; }
    // Bytes already in the partial file when this writer was made: where a resumed download starts.
    qint64 resumeOffset() const { return m_resumeOffset; }
    // Bytes in the partial file so far, through append().
    qint64 bytesWritten() const { return m_written; }

    // Refuses (and deletes the partial file) when the data would exceed the expected size: the server sends
    // something other than the manifest's file.
    Status append(QByteArrayView data);
    // Checks size and SHA-256, moves the file into place atomically and records it in the index; then
    // evicts to the cap. A short file is an incomplete download: it stays, and this writer may append the
    // rest and commit again. A wrong hash or a longer file is deleted and ends the writer, as does success.
    Result<CommitResult> commit();
    // Deletes the partial file: the caller gives up on this download.
    void discard();

private:
    friend class FileCache;
    CacheWriter(FileCache* cache, QString sha256, qint64 expectedSize, CacheRole role, QString partialPath);
    Status start();
    Status failAndDelete(QString message);
    void release();

    FileCache* m_cache;
    QString m_sha256;
    qint64 m_expectedSize;
    CacheRole m_role;
    QString m_partialPath;
    QFile m_file;
    Sha256 m_hasher;
    qint64 m_resumeOffset = 0;
    qint64 m_written = 0;
    bool m_finished = false;
};

} // namespace gleaner::agent
