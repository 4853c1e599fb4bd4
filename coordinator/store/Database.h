#pragma once
// The coordinator's SQLite database through Qt SQL, in WAL mode. One Database object per thread that uses it
// (Qt SQL connections are per thread); the coordinator uses it from its state thread only.
//
// Durability: WAL with synchronous=NORMAL. A committed transaction survives the process being killed (it is in
// the operating system's hands when commit returns); after a power cut the last transactions may be lost, which
// the agents' retries of the same results cover. The schema is in Database.cpp, with its version in `meta`.

#include "Result.h"

#include <QSqlDatabase>
#include <QSqlQuery>
#include <QVariant>

#include <functional>
#include <memory>

namespace gleaner::coordinator {

class Database
{
public:
    static Result<std::unique_ptr<Database>> open(const QString& path);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    // Prepares, binds positionally and runs `sql`; the error names the statement.
    Result<QSqlQuery> exec(const QString& sql, const QVariantList& values = {});
    // Runs `work` in a transaction: committed when it returns ok, rolled back otherwise. A transaction inside
    // another is part of it: its failure rolls back the enclosing one.
    Status transaction(const std::function<Status()>& work);
    // The id SQLite gave the last inserted row of this connection.
    qint64 lastInsertId();

    const QString& path() const { return m_path; }

private:
    Database(QString connectionName, QString path);
    Status migrate();

    QString m_connection;
    QString m_path;
    QSqlDatabase m_db;
    int m_depth = 0;
    bool m_nestedFailed = false;
};

} // namespace gleaner::coordinator
