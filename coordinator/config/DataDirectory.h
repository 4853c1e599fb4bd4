#pragma once
// The coordinator's data directory: everything it knows lives here, so a backup is a copy of one folder.
//
//   config.json             listen address, host names, enrollment and snapshot settings (CoordinatorConfig)
//   gleaner.db              SQLite (WAL): tokens, agents, jobs, workunits, leases, received updates, history
//                           (or, when config.json names one, a PostgreSQL database holds them instead)
//   signing-key.pem         Ed25519 key that signs every task manifest (0600); signing-key.pub.pem beside it
//   signing-key-rotations.json  each key that replaced another, signed by the one it replaced (SigningKeys.h)
//   signing-key.next.pem    a new key while a rotation is under way (gone once it completes or is undone)
//   tls/cert.pem, key.pem   the HTTPS identity (key 0600); agents pin cert.pem when it is self-signed
//   admin-token             the admin token for the CLI on this machine (0600); the database holds only its
//                           hash
//   blobs/ab/abcd...        content-addressed files: shards, model specs, published weights, snapshots
//   updates/<job>/<lease>.<tag>.safetensors   uploads received and not yet folded into a snapshot (the tag
//                           is the receiving attempt's own; the update's row names the file)
//                           (blobs/ and updates/ are in config shared_dir instead when several coordinators
//                           serve one deployment: every one of them reads what the others wrote)
//   uploads/                uploads in flight (deleted at start)
//   server.json             pid, host and port of the running server (removed when it stops)

#include "Result.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <optional>

namespace gleaner::coordinator {

struct CoordinatorConfig
{
    QString listenHost = QStringLiteral("127.0.0.1");
    quint16 listenPort = 8443;
    QStringList hosts{QStringLiteral("localhost"), QStringLiteral("127.0.0.1")}; // names in the certificate
    bool openEnrollment = false;      // agents may enroll without a token
    int httpThreads = 2;
    // One client (an IPv4 address or an IPv6 /64) holds at most this many connections; more are closed at once.
    int maxConnectionsPerAddress = 64;
    // Enrollment requests per client: a burst of enrollBurst, then enrollPerMinute (answered 429 beyond).
    int enrollPerMinute = 10;
    int enrollBurst = 10;
    int snapshotEveryUpdates = 50;    // server weights are written to disk this often ...
    int snapshotEverySeconds = 60;    // ... or this often, whichever comes first
    // A new weights file is published for leases at most this often (the housekeeping tick is 250 ms). The lab
    // measured what an older base costs: at 1000 ms, four agents of mixed speed trained from weights about
    // three updates staler and missed the one-pass accuracy that they reach at 0 (docs/aggregation.md).
    int publishIntervalMs = 250;
    // An agent's next lease waits this long at most for weights that hold its own previous result, published at
    // once for it (0: leases never wait, and carry the last file the tick published).
    int leaseWaitForOwnUpdateMs = 2000;
    // Updates received and not yet folded in hold their weights in memory (queued for the weights thread, or
    // waiting for Redis): beyond this many MiB of them the coordinator hands out no new lease until the folds
    // catch up (the agents ask again in a moment). 0: no bound.
    int foldBacklogMb = 1024;
    int validateEveryUpdates = 0;     // 0: validate at epoch ends only
    // Against hoarding: an agent holds at most this many open leases (fewer when it declared fewer cores: twice
    // its cores), and a lease lives at most this many of its job's deadlines in all, however often it reports.
    int maxLeasesPerAgent = 16;
    int leaseLifetimeDeadlines = 6;
    // Checkpoints that agents handed back when they left (protocol 6.8) take at most this much disk in all; beyond
    // it a hand-back is taken without its checkpoint (the workunit starts afresh).
    int handbackCapMb = 2048;
    // The dashboard and /metrics (docs/dashboard.md).
    enum class MetricsAccess { Admin, Loopback };
    MetricsAccess metricsAccess = MetricsAccess::Admin; // "loopback": no credentials needed from 127.0.0.0/8, ::1
    int agentOnlineSeconds = 180;          // an agent seen this recently counts as online
    int sessionIdleSeconds = 12 * 3600;    // a dashboard session not used this long ends
    int sessionLifetimeSeconds = 7 * 86400; // and every session ends this long after its login
    // Where the coordinator's state lives: empty for gleaner.db in the data directory (SQLite, the default), or
    // a PostgreSQL database, postgresql://user@host[:port]/dbname[?passfile=/path] (docs/architecture.md, "The
    // store on two engines"; the password in that 0600 file rather than here, SqlDatabase.h). One coordinator
    // uses a database at a time: a second one is refused at start.
    QString database;
    // Where the server weights of running jobs live: empty for this process's memory (the default), or a
    // Redis 7 server, redis://[user@]host[:port][/db][?password_file=/path] (the password in that 0600 file,
    // RedisConnection.h), which every coordinator of the deployment folds into (aggregation/SharedWeights.h;
    // docs/scale-out.md). Snapshots stay in the blob store.
    QString redis;
    // The URL agents use when it is not this server's own address: a load balancer, a reverse proxy, a forwarded
    // port (https://host[:port], no path). Signed into every lease's manifest, which agents check against the URL
    // they work for, so they must be given this one. Empty: https://<first host>:<port>.
    QString publicUrl;
    // Reverse proxies in front of the coordinator (nginx, a load balancer), by IP address: a request from one of
    // them counts as coming from the client its X-Forwarded-For names last, for per-client limits and logs.
    QStringList trustedProxies;
    // A folder every coordinator of the deployment reaches (a network file system, or one machine's disk for
    // several processes on it), absolute: blobs and kept updates live there instead of in the data directory.
    // Set, this coordinator is one of several on one deployment (docs/scale-out.md): it needs `database` and
    // `redis`, and its signing key, TLS identity and admin token must be the deployment's (init --join).
    QString sharedDir;

    // The internal URI under which the nginx in front serves the blob folder (blobsDir) itself, for example
    // "/_gleaner/blobs/" with `location /_gleaner/blobs/ { internal; alias <blobs folder>/; }`: a file
    // download that came through a trusted proxy is then answered with X-Accel-Redirect to
    // <prefix>ab/<sha256>, and nginx sends the bytes (docs/scale-out.md). Empty (the default): the
    // coordinator sends every file itself. Needs trustedProxies and sharedDir.
    QString accelRedirect;

    // Whether this coordinator is one of several serving one deployment (shared_dir is set).
    bool isShared() const { return !sharedDir.isEmpty(); }
    // The URL agents use: publicUrl, or https://<first host>:<port>.
    QString url() const;
    // Whether `url` can be a public URL; else why not.
    static Status checkPublicUrl(const QString& url);
    // Whether sharedDir can be used: absolute, and with a PostgreSQL database and Redis named; else why not.
    Status checkSharedDir() const;
    // Whether accelRedirect can be used: an absolute URI path of plain characters ending in '/', with
    // trusted proxies and a shared folder named; else why not.
    Status checkAccelRedirect() const;
    // Whether `address` can name a trusted proxy (an IP address: no names, no ranges); else why not.
    static Status checkTrustedProxy(const QString& address);
    QJsonObject toJson() const;
    static Result<CoordinatorConfig> fromJson(const QJsonObject& json);
};

// Written by a running `serve` (server.json in the data directory): where it really listens.
struct ServerInfo
{
    qint64 pid = 0;
    QString host;
    quint16 port = 0;
};

class DataDirectory
{
public:
    explicit DataDirectory(QString root);

    const QString& root() const { return m_root; }
    QString configPath() const;
    QString databasePath() const;
    // The database `config` names: its PostgreSQL URL, or databasePath().
    QString databaseLocation(const CoordinatorConfig& config) const;
    QString signingKeyPath() const;
    QString signingPublicKeyPath() const;
    QString signingKeyRotationsPath() const;
    QString nextSigningKeyPath() const;
    QString certificatePath() const;
    QString tlsKeyPath() const;
    QString adminTokenPath() const;
    // Where blobs/ and updates/ are: config shared_dir, or the data directory itself. Update rows in the
    // database name their files relative to it.
    QString storageRoot(const CoordinatorConfig& config) const;
    QString blobsDir(const CoordinatorConfig& config) const;
    QString updatesDir(const CoordinatorConfig& config) const;
    QString uploadsDir() const;

    bool exists() const; // a config.json is present
    Result<CoordinatorConfig> loadConfig() const;
    Status saveConfig(const CoordinatorConfig& config) const;
    Status writeServerInfo(const ServerInfo& info) const;
    void removeServerInfo() const;
    // The running server's address; nullopt when none is recorded or its process is gone.
    std::optional<ServerInfo> readServerInfo() const;

    // The admin token the CLI sends; a clear message when the file is missing or unreadable.
    Result<QByteArray> readAdminToken() const;

private:
    QString m_root;
};

} // namespace gleaner::coordinator
