#pragma once
// The agent's cache index: which content-addressed files the cache holds, their size, role and last use (for
// LRU eviction), and which subtasks pin them. SQLite in WAL mode through Qt SQL, in <cache>/index.db.
//
// Not thread-safe: FileCache owns one and serialises every call with its mutex, so the one connection may be
// used from whichever thread holds that mutex. Qt's SQLite driver opens connections with SQLITE_OPEN_NOMUTEX
// (SQLite's multi-thread mode), which allows exactly that: any thread, never two at once. Nothing here uses
// QSqlDatabase::database(), the per-thread lookup that Qt's thread rule is about.
//
// Pins are rows (sha256, owner), not a bare counter: pinning is idempotent per owner (a lease id), so a
// runner that re-pins its subtasks after a crash does not double-count, and releaseOwner() drops every pin of
// a subtask that finished or was abandoned, so a forgotten unpin cannot keep a file forever. A pin may name a
// file that is not cached yet: the runner pins a subtask's files before downloading them.

#include "Result.h"
#include "store/SqlDatabase.h"

#include <QList>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QString>
#include <QStringList>
#include <QVariant>

#include <memory>
#include <optional>

namespace gleaner::agent {

enum class CacheRole
{
    Model,
    Weights,
    Shard,
    Checkpoint, // handed back by another agent, for the lease that resumes it (protocol 6.8)
    Unknown
};

// "model", "weights", "shard", "checkpoint", "unknown": the spelling in the index and in logs.
QString cacheRoleName(CacheRole role);
std::optional<CacheRole> cacheRoleFromName(const QString& name);

struct CacheEntry
{
    QString sha256;
    qint64 size = 0;
    CacheRole role = CacheRole::Unknown;
    qint64 addedMs = 0;
    qint64 lastUsedMs = 0;
    int pins = 0; // how many owners pin it; filled by the queries, ignored by insert()
};

class CacheIndex final : public SqlDatabase
{
public:
    static Result<std::unique_ptr<CacheIndex>> open(const QString& path);

    // Adds or replaces the row of entry.sha256; its pins are kept.
    Status insert(const CacheEntry& entry);
    Status remove(const QString& sha256);
    // False when the index has no such file.
    Result<bool> touch(const QString& sha256, qint64 nowMs);
    Result<std::optional<CacheEntry>> find(const QString& sha256);
    // Most recently used first (ties by hash), so a truncated list keeps the hottest files.
    Result<QList<CacheEntry>> entries(std::optional<CacheRole> role = std::nullopt);
    // Unpinned files, least recently used first: the order eviction takes them in.
    Result<QList<CacheEntry>> evictionCandidates();
    Result<qint64> usedBytes();

    Status pin(const QString& sha256, const QString& owner);
    Status unpin(const QString& sha256, const QString& owner);
    // Drops every pin of `owner`; returns how many there were.
    Result<int> releaseOwner(const QString& owner);
    Result<QStringList> pinOwners();

private:
    CacheIndex() = default;
    Result<QList<CacheEntry>> selectEntries(const QString& where, const QString& order,
                                            const QVariantList& values);
};

} // namespace gleaner::agent
