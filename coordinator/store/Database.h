#pragma once
// The coordinator's database: its schema on the shared SqlDatabase (versioned, nested transactions), in an
// SQLite file (WAL; the default, gleaner.db in the data directory) or in a PostgreSQL database that
// config.json names. The coordinator uses it from its state thread only. Durability: see SqlDatabase.h and
// docs/architecture.md.
//
// One coordinator uses a PostgreSQL database at a time: the coordinator's connection claims it with a session
// advisory lock for as long as it is open, and a second coordinator's claim is refused, naming the database.
// (Scheduling is ready for several: each job's changes are made under its lock, SchedulerTables.h. Several
// coordinators on one database still need shared blobs, one housekeeper and views kept current.)

#include "Result.h"
#include "store/SqlDatabase.h"

#include <memory>

namespace gleaner::coordinator {

class Database final : public SqlDatabase
{
public:
    // `location`: an SQLite file's path, or a postgresql:// (or postgres://) URL.
    static Result<std::unique_ptr<Database>> open(const QString& location);
    static bool isPostgresUrl(const QString& location);
    // Marks the database as this coordinator's until the connection closes; refused when another coordinator
    // holds it. Other connections (init, tests, tools) may still read and write it. Nothing to do on SQLite.
    Status claimForCoordinator();
    // The deployment's own random name, made once and kept in the database (meta.deployment_id): what keeps
    // its keys apart from another deployment's where two share a Redis.
    Result<QString> deploymentId();

protected:
    // A lost connection took the claim with it: it is taken again before the new connection is used.
    Status connectionReopened() override;

private:
    Database() = default;
    Status lockForCoordinator();

    bool m_claimed = false;
};

} // namespace gleaner::coordinator
