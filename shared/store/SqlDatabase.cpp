#include "store/SqlDatabase.h"

#include <QSqlError>
#include <QUuid>

#include <algorithm>

namespace gleaner {

SqlDatabase::~SqlDatabase()
{
    if (m_connection.isEmpty())
        return;
    m_db.close();
    m_db = QSqlDatabase();
    QSqlDatabase::removeDatabase(m_connection);
}

Status SqlDatabase::openFile(const QString& path, const SqlSchema& schema)
{
    m_path = path;
    m_what = schema.what;
    m_connection = QStringLiteral("gleaner-") + QUuid::createUuid().toString(QUuid::WithoutBraces);
    m_db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), m_connection);
    if (!m_db.isValid())
        return fail(QStringLiteral("the Qt SQLite driver is missing; install Debian's libqt6sql6-sqlite"));
    m_db.setDatabaseName(path);
    m_db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
    if (!m_db.open())
        return fail(QStringLiteral("%1: cannot open %2: %3").arg(path, m_what, m_db.lastError().text()));
    const char* synchronous = schema.fullSync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
    for (const char* pragma : {"PRAGMA journal_mode=WAL", synchronous, "PRAGMA foreign_keys=ON"})
        if (auto r = exec(QString::fromLatin1(pragma)); !r)
            return fail(r.error());
    return migrate(schema);
}

Result<QSqlQuery> SqlDatabase::exec(const QString& sql, const QVariantList& values)
{
    QSqlQuery query(m_db);
    if (!query.prepare(sql))
        return fail(QStringLiteral("%1: cannot prepare \"%2\": %3").arg(m_path, sql.left(80), query.lastError().text()));
    for (const QVariant& value : values)
        query.addBindValue(value.typeId() == QMetaType::QString && value.toString().isNull()
                               ? QVariant(QString::fromLatin1(""))
                               : value);
    if (!query.exec())
        return fail(QStringLiteral("%1: \"%2\" failed: %3").arg(m_path, sql.left(80), query.lastError().text()));
    return query;
}

Status SqlDatabase::transaction(const std::function<Status()>& work)
{
    if (m_depth > 0) {
        Status status = work();
        if (!status)
            m_nestedFailed = true;
        return status;
    }
    if (!m_db.transaction())
        return fail(QStringLiteral("%1: cannot begin a transaction: %2").arg(m_path, m_db.lastError().text()));
    ++m_depth;
    m_nestedFailed = false;
    Status status = work();
    --m_depth;
    if (status && m_nestedFailed)
        status = fail(QStringLiteral("%1: a step of the transaction failed; nothing was stored").arg(m_path));
    if (!status) {
        m_db.rollback();
        return status;
    }
    if (!m_db.commit()) {
        const QString error = m_db.lastError().text();
        m_db.rollback();
        return fail(QStringLiteral("%1: commit failed: %2").arg(m_path, error));
    }
    return {};
}

qint64 SqlDatabase::lastInsertId()
{
    auto query = exec(QStringLiteral("SELECT last_insert_rowid()"));
    return query && query->next() ? query->value(0).toLongLong() : -1;
}

Status SqlDatabase::migrate(const SqlSchema& schema)
{
    auto existing = exec(QStringLiteral("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'"));
    if (!existing)
        return fail(existing.error());
    if (existing->next()) {
        auto version = exec(QStringLiteral("SELECT value FROM meta WHERE key='schema_version'"));
        if (!version || !version->next())
            return fail(QStringLiteral("%1: %2 has no schema version; %3").arg(m_path, m_what, schema.remedy));
        const int found = version->value(0).toInt();
        if (found == schema.version)
            return {};
        if (found < schema.version && !schema.upgrades.empty())
            return upgrade(schema, found);
        return fail(
            QStringLiteral("%1: %2 has schema version %3, not the %4 this version of Gleaner knows; %5")
                .arg(m_path, m_what)
                .arg(found)
                .arg(schema.version)
                .arg(schema.remedy));
    }
    return transaction([&]() -> Status {
        if (auto r = exec(QStringLiteral("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")); !r)
            return fail(r.error());
        for (const char* statement : schema.statements)
            if (auto r = exec(QString::fromLatin1(statement)); !r)
                return fail(r.error());
        auto r = exec(QStringLiteral("INSERT INTO meta (key, value) VALUES ('schema_version', ?)"),
                      {QString::number(schema.version)});
        return r ? Status() : fail(r.error());
    });
}

Status SqlDatabase::upgrade(const SqlSchema& schema, int from)
{
    return transaction([&]() -> Status {
        for (int version = from; version < schema.version; ++version) {
            const auto step = std::find_if(schema.upgrades.begin(), schema.upgrades.end(),
                                           [&](const SqlUpgrade& s) { return s.from == version; });
            if (step == schema.upgrades.end())
                return fail(
                    QStringLiteral("%1: %2 has schema version %3 and this version of Gleaner has no upgrade "
                                   "from version %4 to %5; %6")
                        .arg(m_path, m_what)
                        .arg(from)
                        .arg(version)
                        .arg(version + 1)
                        .arg(schema.remedy));
            for (const char* statement : step->statements)
                if (auto r = exec(QString::fromLatin1(statement)); !r)
                    return fail(QStringLiteral("upgrading %1 from schema version %2 to %3: %4")
                                    .arg(m_what)
                                    .arg(version)
                                    .arg(version + 1)
                                    .arg(r.error()));
        }
        auto r = exec(QStringLiteral("UPDATE meta SET value = ? WHERE key = 'schema_version'"),
                      {QString::number(schema.version)});
        return r ? Status() : fail(r.error());
    });
}

} // namespace gleaner
