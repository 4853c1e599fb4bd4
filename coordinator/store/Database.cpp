#include "store/Database.h"

#include <QSqlError>
#include <QUuid>

namespace gleaner::coordinator {
namespace {

constexpr int kSchemaVersion = 1;

const char* const kSchema[] = {
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE admin_tokens (hash TEXT PRIMARY KEY, created_ms INTEGER NOT NULL)",
    "CREATE TABLE enrollment_tokens (id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE, created_ms INTEGER NOT NULL,"
    " expires_ms INTEGER, uses_left INTEGER, used INTEGER NOT NULL DEFAULT 0, revoked INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE agents (id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, name TEXT NOT NULL,"
    " platform TEXT NOT NULL, hardware TEXT NOT NULL, enrolled_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL,"
    " revoked INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0, timed_out INTEGER NOT NULL DEFAULT 0,"
    " invalid INTEGER NOT NULL DEFAULT 0, samples INTEGER NOT NULL DEFAULT 0, train_seconds REAL NOT NULL DEFAULT 0)",
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,"
    " reason TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL, finished_ms INTEGER, epoch INTEGER NOT NULL"
    " DEFAULT 0, model_sha TEXT, initial_sha TEXT, test_sha TEXT, accuracy REAL, loss REAL)",
    "CREATE TABLE shards (job_id INTEGER NOT NULL, idx INTEGER NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER NOT"
    " NULL, samples INTEGER NOT NULL, PRIMARY KEY (job_id, idx))",
    "CREATE TABLE workunits (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, epoch INTEGER NOT NULL, shard INTEGER"
    " NOT NULL, state TEXT NOT NULL, issued INTEGER NOT NULL DEFAULT 0, UNIQUE (job_id, epoch, shard))",
    "CREATE TABLE leases (id TEXT PRIMARY KEY, workunit_id INTEGER NOT NULL, agent_id TEXT NOT NULL,"
    " issued_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL, state TEXT NOT NULL, base_version INTEGER NOT NULL,"
    " weights_sha TEXT NOT NULL, nonce TEXT NOT NULL)",
    "CREATE INDEX leases_by_state ON leases (state)",
    "CREATE TABLE updates (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, lease_id TEXT NOT NULL"
    " UNIQUE, agent_id TEXT NOT NULL, epoch INTEGER NOT NULL, base_version INTEGER NOT NULL, file TEXT NOT NULL,"
    " samples INTEGER NOT NULL, loss REAL NOT NULL, train_seconds REAL NOT NULL, received_ms INTEGER NOT NULL,"
    " applied_version INTEGER)",
    "CREATE TABLE snapshots (job_id INTEGER PRIMARY KEY, version INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
    " sha256 TEXT NOT NULL, written_ms INTEGER NOT NULL)",
    "CREATE TABLE validations (job_id INTEGER NOT NULL, epoch INTEGER NOT NULL, epoch_end INTEGER NOT NULL,"
    " version INTEGER NOT NULL, updates INTEGER NOT NULL, accuracy REAL NOT NULL, loss REAL NOT NULL,"
    " at_ms INTEGER NOT NULL)",
};

} // namespace

Database::Database(QString connectionName, QString path)
    : m_connection(std::move(connectionName)), m_path(std::move(path))
{
}

Database::~Database()
{
    m_db.close();
    m_db = QSqlDatabase();
    QSqlDatabase::removeDatabase(m_connection);
}

Result<std::unique_ptr<Database>> Database::open(const QString& path)
{
    std::unique_ptr<Database> database(
        new Database(QStringLiteral("gleaner-") + QUuid::createUuid().toString(QUuid::WithoutBraces), path));
    database->m_db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), database->m_connection);
    if (!database->m_db.isValid())
        return fail(QStringLiteral("the Qt SQLite driver is missing; install Debian's libqt6sql6-sqlite"));
    database->m_db.setDatabaseName(path);
    database->m_db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
    if (!database->m_db.open())
        return fail(QStringLiteral("%1: cannot open the database: %2").arg(path, database->m_db.lastError().text()));
    for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON"})
        if (auto r = database->exec(QString::fromLatin1(pragma)); !r)
            return fail(r.error());
    if (auto s = database->migrate(); !s)
        return fail(s.error());
    return database;
}

Result<QSqlQuery> Database::exec(const QString& sql, const QVariantList& values)
{
    QSqlQuery query(m_db);
    if (!query.prepare(sql))
        return fail(QStringLiteral("database: cannot prepare \"%1\": %2").arg(sql.left(80), query.lastError().text()));
    // A null QString means "no text" in Qt and NULL in SQL; Gleaner's text columns want ''. A missing value is
    // bound as QVariant() when NULL is meant.
    for (const QVariant& value : values)
        query.addBindValue(value.typeId() == QMetaType::QString && value.toString().isNull() ? QVariant(QString::fromLatin1(""))
                                                                                             : value);
    if (!query.exec())
        return fail(QStringLiteral("database: \"%1\" failed: %2").arg(sql.left(80), query.lastError().text()));
    return query;
}

Status Database::transaction(const std::function<Status()>& work)
{
    if (m_depth > 0) {
        // Nested: part of the enclosing transaction, which rolls back when any part failed.
        Status status = work();
        if (!status)
            m_nestedFailed = true;
        return status;
    }
    if (!m_db.transaction())
        return fail(QStringLiteral("database: cannot begin a transaction: %1").arg(m_db.lastError().text()));
    ++m_depth;
    m_nestedFailed = false;
    Status status = work();
    --m_depth;
    if (status && m_nestedFailed)
        status = fail(QStringLiteral("database: a step of the transaction failed; nothing was stored"));
    if (!status) {
        m_db.rollback();
        return status;
    }
    if (!m_db.commit()) {
        const QString error = m_db.lastError().text();
        m_db.rollback();
        return fail(QStringLiteral("database: commit failed: %1").arg(error));
    }
    return {};
}

qint64 Database::lastInsertId()
{
    auto query = exec(QStringLiteral("SELECT last_insert_rowid()"));
    return query && query->next() ? query->value(0).toLongLong() : -1;
}

Status Database::migrate()
{
    auto existing = exec(QStringLiteral("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'"));
    if (!existing)
        return fail(existing.error());
    if (existing->next()) {
        auto version = exec(QStringLiteral("SELECT value FROM meta WHERE key='schema_version'"));
        if (!version || !version->next())
            return fail(QStringLiteral("%1: the database has no schema version").arg(m_path));
        const int found = version->value(0).toInt();
        if (found != kSchemaVersion)
            return fail(QStringLiteral("%1: schema version %2 is not the %3 this coordinator knows; use the "
                                       "coordinator version that wrote it")
                            .arg(m_path)
                            .arg(found)
                            .arg(kSchemaVersion));
        return {};
    }
    return transaction([this]() -> Status {
        for (const char* statement : kSchema)
            if (auto r = exec(QString::fromLatin1(statement)); !r)
                return fail(r.error());
        if (auto r = exec(QStringLiteral("INSERT INTO meta (key, value) VALUES ('schema_version', ?)"),
                          {kSchemaVersion});
            !r)
            return fail(r.error());
        return {};
    });
}

} // namespace gleaner::coordinator
