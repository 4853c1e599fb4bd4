#pragma once
// The agent's file cache: model specs, weights and dataset shards, content-addressed by SHA-256 under
// <dir>/<first two hex digits>/<sha256>, checked as they are written (CacheWriter), indexed in <dir>/index.db
// (CacheIndex) and evicted least-recently-used first when they exceed the disk cap. The hashes it holds go
// with every lease request, so the coordinator sends an agent the shards it already has (sticky files).
//
// Pins: files of a subtask in progress are never evicted. Pins are persisted in the index, keyed by owner
// (the lease id), so they survive a crash; pinning is idempotent, so the runner may also re-pin on start. On
// start the runner should releaseOwner() every owner in pinOwners() it no longer runs, or those files stay
// pinned.
//
// The cap counts committed files only; partial downloads (bounded by the downloads in progress) are not in
// it.
//
// Thread-safe: one mutex serialises the index and the file moves, so writers on several threads may commit.

#include "Result.h"
#include "cache/CacheIndex.h"
#include "cache/CacheWriter.h"
#include "util/Clock.h"

#include <QMutex>
#include <QSet>
#include <QString>
#include <QStringList>

#include <memory>
#include <optional>

namespace gleaner::agent {

// What open() found and repaired, for the log.
struct CacheStartupReport
{
    int indexedStrays = 0;   // files on disk the index did not know, hashed and kept
    int deletedStrays = 0;   // files on disk whose content did not match their name, or odd names
    int droppedRows = 0;     // index rows whose file was gone or had the wrong size
    int removedPartials = 0; // partial downloads older than kStalePartialMs, or of files already cached
    EvictionReport eviction; // the cap may have been lowered since the last run
};

class FileCache
{
public:
    // A partial download untouched this long is abandoned: its lease is long gone.
    static constexpr qint64 kStalePartialMs = 7LL * 24 * 3600 * 1000;

    static Result<std::unique_ptr<FileCache>> open(const QString& dir, qint64 capBytes, const Clock& clock);
    ~FileCache();
    FileCache(const FileCache&) = delete;
    FileCache& operator=(const FileCache&) = delete;

    // Refuses a malformed hash, a file already cached (use path()), and a second writer of the same hash.
    Result<std::unique_ptr<CacheWriter>> beginWrite(const QString& sha256, qint64 expectedSize,
                                                    CacheRole role);

    // Indexed and present on disk with the indexed size (a cheap stat; verify() re-hashes).
    bool contains(const QString& sha256) const;
    // The cached file's path; empty when the hash is malformed or not cached, so the result is never outside
    // the cache folder.
    QString path(const QString& sha256) const;
    // Marks the file used now (LRU); false when it is not cached.
    bool touch(const QString& sha256);
    // Forgets a cached file and deletes it (a weights patch, once applied); a pinned one stays.
    void remove(const QString& sha256);

    Status pin(const QString& sha256, const QString& owner);
    Status unpin(const QString& sha256, const QString& owner);
    Result<int> releaseOwner(const QString& owner);
    QStringList pinOwners() const;

    // The hashes to send as "cached" in a lease request, most recently used first.
    QStringList heldHashes(std::optional<CacheRole> role = std::nullopt) const;
    QList<CacheEntry> entries() const;
    qint64 usedBytes() const;
    qint64 capBytes() const;
    // Evicts at once when the new cap is lower.
    EvictionReport setCap(qint64 bytes);

    // Re-hashes a cached file. A file altered on disk is removed from the cache (it is downloaded again) and
    // the error names both hashes.
    Status verify(const QString& sha256);

    const QString& directory() const { return m_dir; }
    const CacheStartupReport& startupReport() const { return m_startup; }

private:
    friend class CacheWriter;
    FileCache(QString dir, qint64 capBytes, const Clock& clock, std::unique_ptr<CacheIndex> index);
    QString filePath(const QString& sha256) const;
    QString partialPathFor(const QString& sha256) const;
    Status reconcile();
    void reconcileIndexedFiles();
    void reconcileStrays();
    void reconcilePartials();
    // Called by CacheWriter::commit() with a verified partial file.
    Result<CommitResult> finishCommit(CacheWriter& writer);
    void releaseWriter(const QString& sha256);
    EvictionReport evictLocked();
    void dropLocked(const QString& sha256);

    QString m_dir;
    qint64 m_cap;
    const Clock& m_clock;
    mutable QMutex m_mutex;
    std::unique_ptr<CacheIndex> m_index;
    QSet<QString> m_writing;
    CacheStartupReport m_startup;
};

} // namespace gleaner::agent
