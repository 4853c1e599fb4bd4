#pragma once
// A database through Qt SQL with a versioned schema: the one place Gleaner opens, migrates, queries and
// commits SQL (the coordinator's database, the agent's cache index and state). It is either an SQLite file
// (openFile) or a PostgreSQL database (openPostgres), which several coordinators may share. A connection
// belongs to the thread that opened it (Qt SQL's rule); each user keeps its database on one thread or behind
// one lock.
//
// One schema text for both engines: schemas are written in SQLite's dialect and translated for PostgreSQL
// (PostgresDdl.h). Statements that users run must mean the same on both: `INSERT ... ON CONFLICT (...) DO
// UPDATE/NOTHING` rather than INSERT OR REPLACE/IGNORE, insertReturningId() rather than SQLite's row id,
// GREATEST/LEAST rather than SQLite's two-argument MAX/MIN. `?` placeholders work on both (Qt numbers them
// for PostgreSQL). Integers and doubles come back as the QVariant types whose toLongLong()/toDouble() read
// them on both engines (PostgreSQL's BIGINT as qulonglong when positive, qlonglong when negative), NULL as a
// null QVariant; a sum of BIGINTs is NUMERIC on PostgreSQL and comes back as a double.
//
// Durability on SQLite: synchronous=NORMAL by default: a committed transaction survives the process being
// killed; after a power cut the last transactions may be lost, which each user's recovery accounts for. A
// schema with `fullSync` (the coordinator's, which answers 202 and deletes replay files on the strength of a
// commit) runs synchronous=FULL: a commit that returned survives a power cut too. PostgreSQL's durability is
// the server's (synchronous_commit).

#include "Result.h"

#include <QSqlDatabase>
#include <QSqlQuery>
#include <QVariant>

#include <functional>
#include <span>
#include <vector>

namespace gleaner {

// One step of a schema's history: the statements that take a database from version `from` to `from + 1`.
struct SqlUpgrade
{
    int from = 0;
    std::span<const char* const> statements;
};

struct SqlSchema
{
    QString what;                            // "the coordinator's database": for messages
    int version = 1;                         // stored in meta.schema_version
    std::span<const char* const> statements; // run once, in one transaction, in a new database (+ meta)
    QString remedy;                          // what to do when the database has another version
    // How a database written by an older version is brought to `version` when it is opened: every step from
    // its version on, in one transaction (all or nothing). A database that no chain of steps leads from, or
    // one written by a newer version, is refused with `remedy`.
    std::span<const SqlUpgrade> upgrades = {};
    bool fullSync = false; // SQLite: synchronous=FULL (see above)
};

class SqlDatabase
{
public:
    enum class Engine { Sqlite, Postgres };

    virtual ~SqlDatabase();
    SqlDatabase(const SqlDatabase&) = delete;
    SqlDatabase& operator=(const SqlDatabase&) = delete;

    // Prepares, binds positionally and runs `sql`; the error names the database and the statement. A null
    // QString binds as '' (Qt's "no text"); bind QVariant() where NULL is meant. A bool binds as 1 or 0:
    // flags are INTEGER columns.
    Result<QSqlQuery> exec(const QString& sql, const QVariantList& values = {});
    // Runs an INSERT of one row and answers the id the database gave it: `sql` gets ` RETURNING <idColumn>`.
    Result<qint64> insertReturningId(const QString& sql, const QVariantList& values,
                                     const QString& idColumn = QStringLiteral("id"));
    // On PostgreSQL a connection the server dropped is opened again by the next transaction before anything of it
    // runs, or by the statement outside one that found it gone: a SELECT then runs again on the new connection;
    // any other statement fails (it may have been carried out before the connection went) and is not repeated.
    // Runs `work` in a transaction: committed when it returns ok, rolled back otherwise. A transaction inside
    // another is part of it: its failure rolls back the enclosing one. On PostgreSQL a statement that fails
    // inside a transaction also fails the whole of it (PostgreSQL refuses anything after it), even when
    // `work` goes on; on SQLite `work` decides.
    Status transaction(const std::function<Status()>& work);
    // Inside a transaction: `then` runs once the outermost one has ended, told whether it committed (what a
    // caller may believe of the database only once its writes are in). Outside one: runs at once, committed
    // (the statement before it committed on its own).
    void whenTransactionEnds(std::function<void(bool committed)> then);
    bool inTransaction() const { return m_depth > 0; }
    // Whether the last transaction failed at its COMMIT, where its outcome is unknown: the connection may
    // have gone after the server committed. Its caller must not undo what a committed transaction would name.
    bool lastCommitUncertain() const { return m_commitUncertain; }

    Engine engine() const { return m_engine; }
    // The database for messages: an SQLite file's path, or a PostgreSQL URL without its password.
    const QString& name() const { return m_name; }

protected:
    // PostgreSQL: the connection was lost and is open again (reconnectIfLost). What the old session held, such as
    // a session advisory lock, went with it: a subclass takes it again here. A failure closes the new connection
    // again, so nothing runs without what the subclass holds; the next statement tries anew.
    virtual Status connectionReopened() { return {}; }
    SqlDatabase() = default;
    // Opens (creating when missing) an SQLite file and migrates; subclasses call these from their own open().
    Status openFile(const QString& path, const SqlSchema& schema);
    // Connects to postgresql://user[:password]@host[:port]/dbname and migrates. The host may instead be the
    // directory of the server's unix socket, as libpq takes it:
    // postgresql://user@/dbname?host=/run/postgresql. The database must exist; its tables are created in the
    // user's current schema on first use. Three more of libpq's parameters are taken, each checked here:
    // passfile=/path (the password in a 0600 file in libpq's format, rather than in the URL: a file others may
    // read is refused, naming the chmod that fixes it), sslmode=MODE and sslrootcert=/path/ca.pem (TLS to a
    // server on another machine: verify-full checks its certificate against that CA and its name).
    Status openPostgres(const QString& url, const SqlSchema& schema);

private:
    Status bringUpToDate(const SqlSchema& schema);
    Status migrate(const SqlSchema& schema);
    Status create(const SqlSchema& schema);
    Status upgrade(const SqlSchema& schema, int from);
    Result<QSqlQuery> execOnce(const QString& sql, const QVariantList& values);
    // What is bound for `values`: a null QString as '', a bool as 1 or 0.
    static QVariantList boundValues(const QVariantList& values);
    // PostgreSQL, between transactions: when the connection is gone (the server restarted, a failover), opens it
    // again; answers whether it did.
    bool reconnectIfLost();
    // A schema statement as this engine runs it.
    Status execSchema(const char* statement);

    Engine m_engine = Engine::Sqlite;
    QString m_connection;
    QString m_name;
    QString m_what;
    QSqlDatabase m_db;
    int m_depth = 0;
    std::vector<std::function<void(bool committed)>> m_whenEnds;
    bool m_nestedFailed = false;
    bool m_commitUncertain = false;
    QString m_failedStatement; // PostgreSQL: the first statement that failed in the open transaction
    bool m_reconnecting = false; // inside reconnectIfLost: connectionReopened()'s statements do not reconnect
};

} // namespace gleaner
