#include "cache/CacheIndex.h"


namespace gleaner::agent {
namespace {

// Bumped with every schema change; a cache written by another version is refused rather than misread.
constexpr int kSchemaVersion = 1;

const char* const kSchema[] = {
    "CREATE TABLE files (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, role TEXT NOT NULL,"
    " added_ms INTEGER NOT NULL, last_used_ms INTEGER NOT NULL)",
    "CREATE INDEX files_by_use ON files (last_used_ms)",
    // No foreign key to files: a subtask pins its files before they are downloaded, and eviction of an
    // unpinned file never touches pins.
    "CREATE TABLE pins (sha256 TEXT NOT NULL, owner TEXT NOT NULL, PRIMARY KEY (sha256, owner))",
};

const QString kSelectEntries =
    QStringLiteral("SELECT f.sha256, f.size, f.role, f.added_ms, f.last_used_ms,"
                   " (SELECT COUNT(*) FROM pins p WHERE p.sha256 = f.sha256) AS pin_count FROM files f");

} // namespace

QString cacheRoleName(CacheRole role)
{
    switch (role) {
    case CacheRole::Model:
        return QStringLiteral("model");
    case CacheRole::Weights:
        return QStringLiteral("weights");
    case CacheRole::Shard:
        return QStringLiteral("shard");
    case CacheRole::Checkpoint:
        return QStringLiteral("checkpoint");
    case CacheRole::Unknown:
        break;
    }
    return QStringLiteral("unknown");
}

std::optional<CacheRole> cacheRoleFromName(const QString& name)
{
    for (CacheRole role :
         {CacheRole::Model, CacheRole::Weights, CacheRole::Shard, CacheRole::Checkpoint, CacheRole::Unknown})
        if (name == cacheRoleName(role))
            return role;
    return std::nullopt;
}

Result<std::unique_ptr<CacheIndex>> CacheIndex::open(const QString& path)
{
    std::unique_ptr<CacheIndex> index(new CacheIndex);
    // NORMAL durability: a power cut may lose the last commits, which startup reconciliation re-indexes.
    const SqlSchema schema{QStringLiteral("the cache index"), kSchemaVersion, kSchema,
                           QStringLiteral("delete it (the cached files are re-indexed) or use the agent that wrote it")};
    if (auto s = index->openFile(path, schema); !s)
        return fail(s.error());
    return index;
}

Status CacheIndex::insert(const CacheEntry& entry)
{
    auto r = exec(QStringLiteral("INSERT INTO files (sha256, size, role, added_ms, last_used_ms) VALUES (?, ?, ?, ?, ?)"
                                 " ON CONFLICT (sha256) DO UPDATE SET size = excluded.size, role = excluded.role,"
                                 " added_ms = excluded.added_ms, last_used_ms = excluded.last_used_ms"),
                  {entry.sha256, entry.size, cacheRoleName(entry.role), entry.addedMs, entry.lastUsedMs});
    if (!r)
        return fail(r.error());
    return {};
}

Status CacheIndex::remove(const QString& sha256)
{
    if (auto r = exec(QStringLiteral("DELETE FROM files WHERE sha256 = ?"), {sha256}); !r)
        return fail(r.error());
    return {};
}

Result<bool> CacheIndex::touch(const QString& sha256, qint64 nowMs)
{
    auto r = exec(QStringLiteral("UPDATE files SET last_used_ms = ? WHERE sha256 = ?"), {nowMs, sha256});
    if (!r)
        return fail(r.error());
    return r->numRowsAffected() > 0;
}

Result<QList<CacheEntry>> CacheIndex::selectEntries(const QString& where, const QString& order,
                                                    const QVariantList& values)
{
    auto query = exec(kSelectEntries + where + order, values);
    if (!query)
        return fail(query.error());
    QList<CacheEntry> entries;
    while (query->next()) {
        CacheEntry entry;
        entry.sha256 = query->value(0).toString();
        entry.size = query->value(1).toLongLong();
        entry.role = cacheRoleFromName(query->value(2).toString()).value_or(CacheRole::Unknown);
        entry.addedMs = query->value(3).toLongLong();
        entry.lastUsedMs = query->value(4).toLongLong();
        entry.pins = query->value(5).toInt();
        entries.append(entry);
    }
    return entries;
}

Result<std::optional<CacheEntry>> CacheIndex::find(const QString& sha256)
{
    auto entries = selectEntries(QStringLiteral(" WHERE f.sha256 = ?"), QString(), {sha256});
    if (!entries)
        return fail(entries.error());
    if (entries->isEmpty())
        return std::optional<CacheEntry>();
    return std::optional<CacheEntry>(entries->first());
}

Result<QList<CacheEntry>> CacheIndex::entries(std::optional<CacheRole> role)
{
    const QString order = QStringLiteral(" ORDER BY f.last_used_ms DESC, f.sha256");
    if (role)
        return selectEntries(QStringLiteral(" WHERE f.role = ?"), order, {cacheRoleName(*role)});
    return selectEntries(QString(), order, {});
}

Result<QList<CacheEntry>> CacheIndex::evictionCandidates()
{
    return selectEntries(QStringLiteral(" WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.sha256 = f.sha256)"),
                         QStringLiteral(" ORDER BY f.last_used_ms, f.sha256"), {});
}

Result<qint64> CacheIndex::usedBytes()
{
    auto query = exec(QStringLiteral("SELECT COALESCE(SUM(size), 0) FROM files"));
    if (!query)
        return fail(query.error());
    return query->next() ? query->value(0).toLongLong() : qint64(0);
}

Status CacheIndex::pin(const QString& sha256, const QString& owner)
{
    if (auto r =
            exec(QStringLiteral("INSERT INTO pins (sha256, owner) VALUES (?, ?) ON CONFLICT (sha256, owner) DO NOTHING"),
                 {sha256, owner});
        !r)
        return fail(r.error());
    return {};
}

Status CacheIndex::unpin(const QString& sha256, const QString& owner)
{
    if (auto r = exec(QStringLiteral("DELETE FROM pins WHERE sha256 = ? AND owner = ?"), {sha256, owner}); !r)
        return fail(r.error());
    return {};
}

Result<int> CacheIndex::releaseOwner(const QString& owner)
{
    auto r = exec(QStringLiteral("DELETE FROM pins WHERE owner = ?"), {owner});
    if (!r)
        return fail(r.error());
    return r->numRowsAffected();
}

Result<QStringList> CacheIndex::pinOwners()
{
    auto query = exec(QStringLiteral("SELECT DISTINCT owner FROM pins ORDER BY owner"));
    if (!query)
        return fail(query.error());
    QStringList owners;
    while (query->next())
        owners.append(query->value(0).toString());
    return owners;
}

} // namespace gleaner::agent
