#include "store/Database.h"

#include <QRandomGenerator>

namespace gleaner::coordinator {
namespace {

// Bumped with every schema change, with an upgrade step from the previous version (kUpgrades) so that an
// existing data directory keeps its jobs, agents and leases.
constexpr int kSchemaVersion = 11;

// The session advisory lock that marks a PostgreSQL database as used by coordinators ("GLEANERC"): held
// exclusively by a coordinator alone, shared by the coordinators of one deployment.
constexpr qint64 kCoordinatorLockKey = 0x474c45414e455243;
// The session advisory lock whose holder does the deployment's housekeeping ("GLEANERH").
constexpr qint64 kHousekeeperLockKey = 0x474c45414e455248;
// The session advisory lock (two-key form: "GLIM", the job's id) of the coordinator that imports a job.
constexpr int kImportLockSpace = 0x474c494d;

const char* const kSchema[] = {
    "CREATE TABLE admin_tokens (hash TEXT PRIMARY KEY, created_ms INTEGER NOT NULL)",
    "CREATE TABLE enrollment_tokens (id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE, created_ms INTEGER "
    "NOT NULL,"
    " expires_ms INTEGER, uses_left INTEGER, used INTEGER NOT NULL DEFAULT 0, revoked INTEGER NOT NULL "
    "DEFAULT 0)",
    "CREATE TABLE agents (id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, name TEXT NOT NULL,"
    " platform TEXT NOT NULL, hardware TEXT NOT NULL, enrolled_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT "
    "NULL,"
    " revoked INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0, timed_out INTEGER NOT NULL "
    "DEFAULT 0,"
    " invalid INTEGER NOT NULL DEFAULT 0, samples INTEGER NOT NULL DEFAULT 0, train_seconds REAL NOT NULL "
    "DEFAULT 0,"
    " failed INTEGER NOT NULL DEFAULT 0, invalid_streak INTEGER NOT NULL DEFAULT 0, quarantined_ms INTEGER,"
    " quarantine_reason TEXT NOT NULL DEFAULT '', disagreed INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,"
    " reason TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL, finished_ms INTEGER, epoch INTEGER NOT "
    "NULL"
    " DEFAULT 0, model_sha TEXT, initial_sha TEXT, test_sha TEXT, accuracy REAL, loss REAL, sched_version "
    "INTEGER NOT"
    " NULL DEFAULT 0)",
    "CREATE TABLE shards (job_id INTEGER NOT NULL, idx INTEGER NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER "
    "NOT"
    " NULL, samples INTEGER NOT NULL, PRIMARY KEY (job_id, idx))",
    "CREATE TABLE workunits (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, epoch INTEGER NOT NULL, shard "
    "INTEGER"
    " NOT NULL, state TEXT NOT NULL, issued INTEGER NOT NULL DEFAULT 0, resume_lease TEXT NOT NULL DEFAULT "
    "'',"
    " resume_sha TEXT NOT NULL DEFAULT '', resume_size INTEGER NOT NULL DEFAULT 0, resume_step INTEGER NOT "
    "NULL"
    " DEFAULT 0, resume_base_version INTEGER NOT NULL DEFAULT 0, resume_weights_sha TEXT NOT NULL DEFAULT '',"
    " resume_steps INTEGER NOT NULL DEFAULT 0, changed_version INTEGER NOT NULL DEFAULT 0, resume_agent TEXT"
    " NOT NULL DEFAULT '', UNIQUE (job_id, epoch, shard))",
    "CREATE INDEX workunits_by_change ON workunits (job_id, changed_version)",
    "CREATE INDEX workunits_pending ON workunits (job_id, state, epoch, shard)",
    "CREATE INDEX workunits_resumable ON workunits (job_id, epoch) WHERE state = 'pending' AND resume_sha <> "
    "''",
    "CREATE TABLE leases (id TEXT PRIMARY KEY, workunit_id INTEGER NOT NULL, agent_id TEXT NOT NULL,"
    " issued_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL, state TEXT NOT NULL, base_version INTEGER "
    "NOT NULL,"
    " weights_sha TEXT NOT NULL, nonce TEXT NOT NULL, fail_stage TEXT NOT NULL DEFAULT '',"
    " fail_reason TEXT NOT NULL DEFAULT '', steps INTEGER NOT NULL DEFAULT 0, checkpoint_sha TEXT NOT NULL"
    " DEFAULT '', resume_step INTEGER NOT NULL DEFAULT 0, changed_version INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX leases_by_state ON leases (state)",
    "CREATE INDEX leases_by_workunit ON leases (workunit_id)",
    "CREATE INDEX leases_by_change ON leases (changed_version)",
    "CREATE INDEX leases_by_agent ON leases (agent_id, state)",
    "CREATE TABLE updates (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, lease_id TEXT NOT "
    "NULL"
    " UNIQUE, agent_id TEXT NOT NULL, epoch INTEGER NOT NULL, base_version INTEGER NOT NULL, file TEXT NOT "
    "NULL,"
    " samples INTEGER NOT NULL, loss REAL NOT NULL, train_seconds REAL NOT NULL, received_ms INTEGER NOT "
    "NULL,"
    " applied_version INTEGER, step REAL, fold_error TEXT NOT NULL DEFAULT '', concurrency INTEGER NOT NULL"
    " DEFAULT 1, upload_bytes INTEGER NOT NULL DEFAULT 0, encoding TEXT NOT NULL DEFAULT 'fp32')",
    "CREATE TABLE snapshots (job_id INTEGER PRIMARY KEY, version INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
    " sha256 TEXT NOT NULL, written_ms INTEGER NOT NULL, rule_sha TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE validations (job_id INTEGER NOT NULL, epoch INTEGER NOT NULL, epoch_end INTEGER NOT NULL,"
    " version INTEGER NOT NULL, updates INTEGER NOT NULL, accuracy REAL NOT NULL, loss REAL NOT NULL,"
    " at_ms INTEGER NOT NULL)",
    "CREATE TABLE job_tallies (job_id INTEGER NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,"
    " PRIMARY KEY (job_id, name))",
};

// Version 2: an agent may report a subtask failed (protocol 6.7): the agent's count, and the stage and reason
// on the lease. New columns go last, in kSchema too, so an upgraded file and a new one have the same tables.
const char* const kUpgradeTo2[] = {
    "ALTER TABLE agents ADD COLUMN failed INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE leases ADD COLUMN fail_stage TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE leases ADD COLUMN fail_reason TEXT NOT NULL DEFAULT ''",
};

// Version 3: hostile uploads. An agent's run of refused results, its quarantine and its results that disagreed
// with another agent's result of the same workunit; each update's step (its
// distance from the weights it trained from, which the job's bound is learnt from) and why it could not be
// folded in, when it could not.
const char* const kUpgradeTo3[] = {
    "ALTER TABLE agents ADD COLUMN invalid_streak INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE agents ADD COLUMN quarantined_ms INTEGER",
    "ALTER TABLE agents ADD COLUMN quarantine_reason TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE agents ADD COLUMN disagreed INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE updates ADD COLUMN step REAL",
    "ALTER TABLE updates ADD COLUMN fold_error TEXT NOT NULL DEFAULT ''",
};

// Version 4: rules that fold pseudo-gradients keep state (a buffer, a momentum), written beside each snapshot;
// speed-aware jobs size each lease in mini-batches.
const char* const kUpgradeTo4[] = {
    "ALTER TABLE snapshots ADD COLUMN rule_sha TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE leases ADD COLUMN steps INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE updates ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 1",
};

// Version 5: compressed uploads. Each update's bytes as they came over the wire, and its encoding.
const char* const kUpgradeTo5[] = {
    "ALTER TABLE updates ADD COLUMN upload_bytes INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE updates ADD COLUMN encoding TEXT NOT NULL DEFAULT 'fp32'",
};

// Version 6: agents that leave hand their work back (protocol 6.8). A workunit's resume point (the handed-back
// checkpoint, the base it trained from and its size) and the checkpoint each lease resumes from.
const char* const kUpgradeTo6[] = {
    "ALTER TABLE workunits ADD COLUMN resume_lease TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE workunits ADD COLUMN resume_sha TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE workunits ADD COLUMN resume_size INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE workunits ADD COLUMN resume_step INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE workunits ADD COLUMN resume_base_version INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE workunits ADD COLUMN resume_weights_sha TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE workunits ADD COLUMN resume_steps INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE leases ADD COLUMN checkpoint_sha TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE leases ADD COLUMN resume_step INTEGER NOT NULL DEFAULT 0",
};

// Version 7: several coordinators on one database. Each job counts the changes to its workunits and leases
// (sched_version, bumped under the job's row lock by whoever changes them), and each workunit and lease row
// names the count that last wrote it: a coordinator whose count is behind reads only the rows written since.
const char* const kUpgradeTo7[] = {
    "ALTER TABLE jobs ADD COLUMN sched_version INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE workunits ADD COLUMN changed_version INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE leases ADD COLUMN changed_version INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX workunits_by_change ON workunits (job_id, changed_version)",
    "CREATE INDEX leases_by_workunit ON leases (workunit_id)",
};

// Version 8: the leases a coordinator that is behind reads (changed_version above its count) by an index, not
// by a scan of every lease of the job: at 10,000 workunits the scan took 7 ms, under the job's lock, on every
// lease request that found another coordinator's change (bench_lease --coordinators 2).
const char* const kUpgradeTo8[] = {
    "CREATE INDEX leases_by_change ON leases (changed_version)",
};

// Version 9: grants in parallel (PostgreSQL). A grant claims a job's pending workunit of its oldest epoch
// (one that resumes a checkpoint, then one of a shard the agent holds, then the first) and counts the open
// leases of the agent it is for, each by an index: a sort of 10,000 pending workunits took 7 ms a grant.
const char* const kUpgradeTo9[] = {
    "CREATE INDEX workunits_pending ON workunits (job_id, state, epoch, shard)",
    "CREATE INDEX workunits_resumable ON workunits (job_id, epoch) WHERE state = 'pending' AND resume_sha <> "
    "''",
    "CREATE INDEX leases_by_agent ON leases (agent_id, state)",
};

// Version 10: a resume point remembers the agent that handed it back, so that a result trained on from it that
// the checks refuse counts against that agent and not against the honest one that resumed it.
const char* const kUpgradeTo10[] = {
    "ALTER TABLE workunits ADD COLUMN resume_agent TEXT NOT NULL DEFAULT ''",
};

// Version 11: a job's counts are the deployment's (JobTallies): each coordinator adds what it took to a stored
// count instead of keeping its own. The counts of updates are those the updates table already holds; file bytes
// sent were never stored and start at nothing.
const char* const kUpgradeTo11[] = {
    "CREATE TABLE job_tallies (job_id INTEGER NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,"
    " PRIMARY KEY (job_id, name))",
    "INSERT INTO job_tallies (job_id, name, value) SELECT job_id, 'updates_received', COUNT(*) FROM updates"
    " GROUP BY job_id",
    "INSERT INTO job_tallies (job_id, name, value) SELECT job_id, 'uploaded_bytes', SUM(upload_bytes) FROM"
    " updates WHERE upload_bytes > 0 GROUP BY job_id",
    "INSERT INTO job_tallies (job_id, name, value) SELECT job_id, 'uploads_counted', COUNT(*) FROM updates"
    " WHERE upload_bytes > 0 GROUP BY job_id",
    "INSERT INTO job_tallies (job_id, name, value) SELECT job_id, 'updates_not_folded', COUNT(*) FROM updates"
    " WHERE fold_error != '' GROUP BY job_id",
};

const SqlUpgrade kUpgrades[] = {
    {1, kUpgradeTo2}, {2, kUpgradeTo3}, {3, kUpgradeTo4}, {4, kUpgradeTo5},
    {5, kUpgradeTo6}, {6, kUpgradeTo7}, {7, kUpgradeTo8}, {8, kUpgradeTo9},
    {9, kUpgradeTo10}, {10, kUpgradeTo11},
};

} // namespace

bool Database::isPostgresUrl(const QString& location)
{
    return location.startsWith(u"postgresql://") || location.startsWith(u"postgres://");
}

Result<std::unique_ptr<Database>> Database::open(const QString& location)
{
    std::unique_ptr<Database> database(new Database);
    const SqlSchema schema{QStringLiteral("the coordinator's database"), kSchemaVersion, kSchema,
                           QStringLiteral("use the coordinator version that wrote it"), kUpgrades,
                           /*fullSync=*/true};
    if (!isPostgresUrl(location)) {
        if (auto s = database->openFile(location, schema); !s)
            return fail(s.error());
        return database;
    }
    if (auto s = database->openPostgres(location, schema); !s)
        return fail(s.error());
    return database;
}

Result<QString> Database::deploymentId()
{
    return keepOnce(QStringLiteral("deployment_id"),
                    QString::fromLatin1(QByteArray::number(QRandomGenerator::system()->generate64(), 16) +
                                        QByteArray::number(QRandomGenerator::system()->generate64(), 16)));
}

Result<QString> Database::keepOnce(const QString& key, const QString& value)
{
    // Whoever inserts first sets the value; everyone reads that one.
    auto inserted =
        exec(QStringLiteral("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"),
             {key, value});
    if (!inserted)
        return fail(inserted.error());
    auto kept = readMeta(key);
    if (!kept)
        return fail(kept.error());
    return kept->value_or(value);
}

Result<std::optional<QString>> Database::readMeta(const QString& key)
{
    auto read = exec(QStringLiteral("SELECT value FROM meta WHERE key = ?"), {key});
    if (!read)
        return fail(read.error());
    if (!read->next())
        return std::optional<QString>();
    return std::optional<QString>(read->value(0).toString());
}

bool Database::holdsHousekeeping()
{
    if (!m_shared)
        return true;
    if (m_housekeeper)
        return true;
    auto taken = exec(QStringLiteral("SELECT pg_try_advisory_lock(?)"), {kHousekeeperLockKey});
    m_housekeeper = taken && taken->next() && taken->value(0).toBool();
    return m_housekeeper;
}

Result<bool> Database::claimImport(qint64 jobId)
{
    if (!m_shared)
        return true;
    auto taken = exec(QStringLiteral("SELECT pg_try_advisory_lock(%1, CAST(mod(?, 2147483647) AS integer))")
                          .arg(kImportLockSpace),
                      {jobId});
    if (!taken)
        return fail(taken.error());
    if (!taken->next() || !taken->value(0).toBool())
        return false; // another coordinator imports it
    // Free, but perhaps because its importer finished a moment ago: only a job still waiting is imported.
    auto state = exec(QStringLiteral("SELECT state FROM jobs WHERE id = ?"), {jobId});
    if (state && state->next() && state->value(0).toString() == u"created")
        return true;
    releaseImport(jobId);
    return state ? Result<bool>(false) : fail(state.error());
}

void Database::releaseImport(qint64 jobId)
{
    if (!m_shared)
        return;
    (void)exec(QStringLiteral("SELECT pg_advisory_unlock(%1, CAST(mod(?, 2147483647) AS integer))")
                   .arg(kImportLockSpace),
               {jobId});
}

Status Database::claimForCoordinator(bool shared)
{
    if (engine() != Engine::Postgres)
        return shared ? fail(QStringLiteral("several coordinators share a deployment on PostgreSQL only"))
                      : Status();
    m_shared = shared;
    if (auto locked = lockForCoordinator(); !locked)
        return locked;
    m_claimed = true;
    return {};
}

Status Database::connectionReopened()
{
    m_housekeeper = false; // went with the connection; taken again on the next tick if no one else took it
    return m_claimed ? lockForCoordinator() : Status();
}

Status Database::lockForCoordinator()
{
    // A coordinator alone keeps its picture of jobs, leases and weights in memory and its blobs in its data
    // directory: a second coordinator on the same database would issue the same workunits again. Coordinators
    // that share a deployment (config shared_dir) hold the lock shared, so one alone and several sharing
    // never mix. Held until this connection closes (or its process dies).
    auto locked = exec(m_shared ? QStringLiteral("SELECT pg_try_advisory_lock_shared(?)")
                                : QStringLiteral("SELECT pg_try_advisory_lock(?)"),
                       {kCoordinatorLockKey});
    if (!locked)
        return fail(locked.error());
    if (!locked->next() || !locked->value(0).toBool())
        return fail(
            m_shared
                ? QStringLiteral("%1: a coordinator that runs alone (no shared_dir in its config.json) is "
                                 "using this database; stop it, or give it the deployment's shared_dir "
                                 "so that both share the deployment")
                      .arg(name())
                : QStringLiteral("%1: another coordinator is using this database; one coordinator uses a "
                                 "database at a time unless they share a deployment (stop the other "
                                 "one, give this one a database of its own, or join the deployment "
                                 "with gleaner-coordinator init --join)")
                      .arg(name()));
    return {};
}

} // namespace gleaner::coordinator
