#pragma once
// An SQLite database through Qt SQL, in WAL mode, with a versioned schema: the one place Gleaner opens, migrates,
// queries and commits SQLite (the coordinator's database, the agent's cache index and state). A connection
// belongs to the thread that opened it (Qt SQL's rule); each user keeps its database on one thread or behind
// one lock.
//
// Durability: synchronous=NORMAL by default: a committed transaction survives the process being killed; after a
// power cut the last transactions may be lost, which each user's recovery accounts for. A schema with `fullSync`
// (the coordinator's, which answers 202 and deletes replay files on the strength of a commit) runs
// synchronous=FULL: a commit that returned survives a power cut too.

#include "Result.h"

#include <QSqlDatabase>
#include <QSqlQuery>
#include <QVariant>

#include <functional>
#include <span>

namespace gleaner {

// One step of a schema's history: the statements that take a file from version `from` to `from + 1`.
struct SqlUpgrade
{
    int from = 0;
    std::span<const char* const> statements;
};

struct SqlSchema
{
    QString what;                           // "the coordinator's database": for messages
    int version = 1;                        // stored in meta.schema_version
    std::span<const char* const> statements; // run once, in one transaction, on a new file (meta is added)
    QString remedy;                         // what to do when the file has another version
    // How a file written by an older version is brought to `version` when it is opened: every step from its
    // version on, in one transaction (all or nothing). A file that no chain of steps leads from, or one
    // written by a newer version, is refused with `remedy`.
    std::span<const SqlUpgrade> upgrades = {};
    bool fullSync = false; // synchronous=FULL (see above)
};

class SqlDatabase
{
public:
    virtual ~SqlDatabase();
    SqlDatabase(const SqlDatabase&) = delete;
    SqlDatabase& operator=(const SqlDatabase&) = delete;

    // Prepares, binds positionally and runs `sql`; the error names the database and the statement. A null
    // QString binds as '' (Qt's "no text"); bind QVariant() where NULL is meant.
    Result<QSqlQuery> exec(const QString& sql, const QVariantList& values = {});
    // Runs `work` in a transaction: committed when it returns ok, rolled back otherwise. A transaction inside
    // another is part of it: its failure rolls back the enclosing one.
    Status transaction(const std::function<Status()>& work);
    // The id SQLite gave the last inserted row of this connection.
    qint64 lastInsertId();
    const QString& path() const { return m_path; }

protected:
    SqlDatabase() = default;
    // Opens (creating when missing) and migrates; subclasses call it from their own open().
    Status openFile(const QString& path, const SqlSchema& schema);

private:
    Status migrate(const SqlSchema& schema);
    Status upgrade(const SqlSchema& schema, int from);

    QString m_connection;
    QString m_path;
    QString m_what;
    QSqlDatabase m_db;
    int m_depth = 0;
    bool m_nestedFailed = false;
};

} // namespace gleaner
