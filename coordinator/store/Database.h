#pragma once
// The coordinator's database: its schema on the shared SqlDatabase (versioned, nested transactions), in an
// SQLite file (WAL; the default, gleaner.db in the data directory) or in a PostgreSQL database that
// config.json names. The coordinator uses it from its state thread only. Durability: see SqlDatabase.h and
// docs/architecture.md.
//
// A coordinator's connection claims the PostgreSQL database with a session advisory lock for as long as it is
// open: exclusively for a coordinator alone (a second one is refused, naming the database), shared by the
// coordinators of one deployment (config shared_dir; docs/scale-out.md). One of those holds a second lock,
// the housekeeper's, and does the deployment's housekeeping; when its connection goes, another takes it over.

#include "Result.h"
#include "store/SqlDatabase.h"

#include <memory>
#include <optional>

namespace gleaner::coordinator {

class Database final : public SqlDatabase
{
public:
    // `location`: an SQLite file's path, or a postgresql:// (or postgres://) URL.
    static Result<std::unique_ptr<Database>> open(const QString& location);
    static bool isPostgresUrl(const QString& location);
    // Marks the database as this coordinator's until the connection closes; refused when another coordinator
    // holds it. Other connections (init, tests, tools) may still read and write it. Nothing to do on SQLite.
    // `shared`: as one of several coordinators of a deployment (on PostgreSQL only).
    Status claimForCoordinator(bool shared = false);
    // Whether this coordinator does the deployment's housekeeping (snapshots, validation, deletions): always
    // on SQLite and for a coordinator alone; among several, the one whose connection holds the housekeeper's
    // lock, taken here when it is free.
    bool holdsHousekeeping();
    // Whether this connection may import job `jobId` (a submitted job's data set, into blobs and workunits):
    // among several coordinators, the one whose connection holds the job's import lock, taken here when it is
    // free and the job is still `created` (a coordinator that stopped mid-import frees it with its
    // connection). Always on SQLite and for a coordinator alone. releaseImport() gives it back once the
    // import's outcome is recorded.
    Result<bool> claimImport(qint64 jobId);
    void releaseImport(qint64 jobId);
    // The deployment's own random name, made once and kept in the database (meta.deployment_id): what keeps
    // its keys apart from another deployment's where two share a Redis.
    Result<QString> deploymentId();
    // meta[key]: `value` when no one set it before, else what was set (and stays).
    Result<QString> keepOnce(const QString& key, const QString& value);
    Result<std::optional<QString>> readMeta(const QString& key);

protected:
    // A lost connection took the claim with it: it is taken again before the new connection is used.
    Status connectionReopened() override;

private:
    Database() = default;
    Status lockForCoordinator();

    bool m_claimed = false;
    bool m_shared = false;      // claimed as one of several coordinators
    bool m_housekeeper = false; // this connection holds the housekeeper's lock
};

} // namespace gleaner::coordinator
