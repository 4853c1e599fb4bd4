#include "cache/CacheIndex.h"

#include <QSqlError>
#include <QUuid>

namespace gleaner::agent {
namespace {

// Bumped with every schema change; a cache written by another version is refused rather than misread.
constexpr int kSchemaVersion = 1;

const char* const kSchema[] = {
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
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
    case CacheRole::Unknown:
        break;
    }
    return QStringLiteral("unknown");
}

std::optional<CacheRole> cacheRoleFromName(const QString& name)
{
    for (CacheRole role : {CacheRole::Model, CacheRole::Weights, CacheRole::Shard, CacheRole::Unknown})
        if (name == cacheRoleName(role))
            return role;
    return std::nullopt;
}

CacheIndex::CacheIndex(QString connectionName, QString path)
    : m_connection(std::move(connectionName)), m_path(std::move(path))
{
}

CacheIndex::~CacheIndex()
{
    m_db.close();
    m_db = QSqlDatabase();
    QSqlDatabase::removeDatabase(m_connection);
}

Result<std::unique_ptr<CacheIndex>> CacheIndex::open(const QString& path)
{
    std::unique_ptr<CacheIndex> index(new CacheIndex(
        QStringLiteral("gleaner-cache-") + QUuid::createUuid().toString(QUuid::WithoutBraces), path));
    index->m_db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), index->m_connection);
    if (!index->m_db.isValid())
        return fail(QStringLiteral("the Qt SQLite driver is missing; install Debian's libqt6sql6-sqlite"));
    index->m_db.setDatabaseName(path);
    index->m_db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
    if (!index->m_db.open())
        return fail(QStringLiteral("%1: cannot open the cache index: %2; delete it to rebuild the cache")
                        .arg(path, index->m_db.lastError().text()));
    // NORMAL: a power cut may lose the last commits, which startup reconciliation re-indexes from the files.
    for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"})
        if (auto r = index->exec(QString::fromLatin1(pragma)); !r)
            return fail(r.error());
    if (auto s = index->migrate(); !s)
        return fail(s.error());
    return index;
}

Result<QSqlQuery> CacheIndex::exec(const QString& sql, const QVariantList& values)
{
    QSqlQuery query(m_db);
    if (!query.prepare(sql))
        return fail(QStringLiteral("%1: cannot prepare \"%2\": %3")
                        .arg(m_path, sql.left(80), query.lastError().text()));
    for (const QVariant& value : values)
        query.addBindValue(value);
    if (!query.exec())
        return fail(
            QStringLiteral("%1: \"%2\" failed: %3").arg(m_path, sql.left(80), query.lastError().text()));
    return query;
}

Status CacheIndex::migrate()
{
    auto existing = exec(QStringLiteral("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'"));
    if (!existing)
        return fail(existing.error());
    if (existing->next()) {
        auto version = exec(QStringLiteral("SELECT value FROM meta WHERE key='schema_version'"));
        if (!version || !version->next())
            return fail(
                QStringLiteral("%1: the cache index has no schema version; delete it to rebuild the cache")
                    .arg(m_path));
        const int found = version->value(0).toInt();
        if (found != kSchemaVersion)
            return fail(
                QStringLiteral("%1: cache index schema %2 is not the %3 this agent knows; delete the "
                               "index (the cached files are re-indexed) or use the agent that wrote it")
                    .arg(m_path)
                    .arg(found)
                    .arg(kSchemaVersion));
        return {};
    }
    if (!m_db.transaction())
        return fail(
            QStringLiteral("%1: cannot begin a transaction: %2").arg(m_path, m_db.lastError().text()));
    auto create = [this]() -> Status {
        for (const char* statement : kSchema)
            if (auto r = exec(QString::fromLatin1(statement)); !r)
                return fail(r.error());
        if (auto r = exec(QStringLiteral("INSERT INTO meta (key, value) VALUES ('schema_version', ?)"),
                          {QString::number(kSchemaVersion)});
            !r)
            return fail(r.error());
        return {};
    };
    if (Status s = create(); !s) {
        m_db.rollback();
        return s;
    }
    if (!m_db.commit()) {
        const QString error = m_db.lastError().text();
        m_db.rollback();
        return fail(QStringLiteral("%1: cannot create the cache index: %2").arg(m_path, error));
    }
    return {};
}

Status CacheIndex::insert(const CacheEntry& entry)
{
    auto r = exec(QStringLiteral("INSERT OR REPLACE INTO files (sha256, size, role, added_ms, last_used_ms)"
                                 " VALUES (?, ?, ?, ?, ?)"),
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
            exec(QStringLiteral("INSERT OR IGNORE INTO pins (sha256, owner) VALUES (?, ?)"), {sha256, owner});
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
