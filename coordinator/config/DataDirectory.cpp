#include "config/DataDirectory.h"

#include "spec/JsonFields.h"
#include "store/Database.h"
#include "store/RedisConnection.h"

#include <QDir>
#include <QFile>
#include <QHostAddress>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QSaveFile>
#include <QUrl>

#include <csignal>

namespace gleaner::coordinator {

Status CoordinatorConfig::checkPublicUrl(const QString& url)
{
    const QUrl parsed(url, QUrl::StrictMode);
    if (!parsed.isValid() || parsed.scheme() != QLatin1StringView("https") || parsed.host().isEmpty())
        return fail(QStringLiteral("expected https://HOST[:PORT], the address agents reach the coordinator at"));
    if (!parsed.userInfo().isEmpty() || (!parsed.path().isEmpty() && parsed.path() != QLatin1StringView("/")) ||
        parsed.hasQuery() || parsed.hasFragment())
        return fail(QStringLiteral("expected https://HOST[:PORT] with no user, path, query or fragment"));
    return {};
}

Status CoordinatorConfig::checkTrustedProxy(const QString& address)
{
    if (QHostAddress(address).isNull() || address.contains(u'/'))
        return fail(QStringLiteral("\"%1\" is not an IP address (give each proxy's address, no names or ranges)")
                        .arg(address.left(64)));
    return {};
}

Status CoordinatorConfig::checkSharedDir() const
{
    if (!QDir::isAbsolutePath(sharedDir))
        return fail(QStringLiteral("expected an absolute path, got \"%1\"").arg(sharedDir.left(200)));
    if (database.isEmpty() || redis.isEmpty())
        return fail(
            QStringLiteral("several coordinators share a deployment through PostgreSQL and Redis: name "
                           "both (database, redis) as well, or remove shared_dir to run one coordinator"));
    return {};
}

Status CoordinatorConfig::checkAccelRedirect() const
{
    static const QRegularExpression plainPath(QStringLiteral("^/([A-Za-z0-9._~-]+/)+$"));
    if (accelRedirect.size() > 200 || !plainPath.match(accelRedirect).hasMatch())
        return fail(
            QStringLiteral("expected nginx's internal location of the blob folder, an absolute path of "
                           "letters, digits and . _ ~ - ending in /, such as /_gleaner/blobs/; got \"%1\"")
                .arg(accelRedirect.left(200)));
    for (const QString& segment : accelRedirect.split(u'/', Qt::SkipEmptyParts))
        if (segment == u"." || segment == u"..")
            return fail(QStringLiteral("\"%1\" holds a . or .. segment; name the location as nginx's "
                                       "configuration spells it")
                            .arg(accelRedirect));
    if (trustedProxies.isEmpty())
        return fail(
            QStringLiteral("only a trusted proxy can send files in the coordinator's place: name the nginx "
                           "in front (trusted_proxies, init --trusted-proxy) as well"));
    // nginx must open the blob folder: the shared folder's, never the data directory that holds the keys.
    if (!isShared())
        return fail(
            QStringLiteral("nginx sends files from a deployment's shared folder (shared_dir, init "
                           "--shared-dir); a coordinator alone keeps its blobs in its data directory, "
                           "beside its keys, and sends them itself"));
    return {};
}

QString CoordinatorConfig::url() const
{
    if (!publicUrl.isEmpty())
        return QUrl(publicUrl).adjusted(QUrl::RemovePath | QUrl::StripTrailingSlash).toString();
    QString host = hosts.isEmpty() ? listenHost : hosts.first();
    if (host.contains(u':'))
        host = u'[' + host + u']';
    return QStringLiteral("https://%1:%2").arg(host).arg(listenPort);
}

QJsonObject CoordinatorConfig::toJson() const
{
    QJsonObject json;
    json.insert(QStringLiteral("listen"), QStringLiteral("%1:%2").arg(listenHost).arg(listenPort));
    json.insert(QStringLiteral("hosts"), QJsonArray::fromStringList(hosts));
    json.insert(QStringLiteral("open_enrollment"), openEnrollment);
    json.insert(QStringLiteral("http_threads"), httpThreads);
    json.insert(QStringLiteral("max_connections_per_address"), maxConnectionsPerAddress);
    json.insert(QStringLiteral("enroll_per_minute"), enrollPerMinute);
    json.insert(QStringLiteral("enroll_burst"), enrollBurst);
    json.insert(QStringLiteral("snapshot_every_updates"), snapshotEveryUpdates);
    json.insert(QStringLiteral("snapshot_every_seconds"), snapshotEverySeconds);
    json.insert(QStringLiteral("publish_interval_ms"), publishIntervalMs);
    json.insert(QStringLiteral("lease_wait_for_own_update_ms"), leaseWaitForOwnUpdateMs);
    json.insert(QStringLiteral("fold_backlog_mb"), foldBacklogMb);
    json.insert(QStringLiteral("validate_every_updates"), validateEveryUpdates);
    json.insert(QStringLiteral("max_leases_per_agent"), maxLeasesPerAgent);
    json.insert(QStringLiteral("lease_lifetime_deadlines"), leaseLifetimeDeadlines);
    json.insert(QStringLiteral("handback_cap_mb"), handbackCapMb);
    json.insert(QStringLiteral("metrics_access"), metricsAccess == MetricsAccess::Loopback ? QStringLiteral("loopback")
                                                                                          : QStringLiteral("admin"));
    json.insert(QStringLiteral("agent_online_seconds"), agentOnlineSeconds);
    json.insert(QStringLiteral("session_idle_seconds"), sessionIdleSeconds);
    json.insert(QStringLiteral("session_lifetime_seconds"), sessionLifetimeSeconds);
    if (!database.isEmpty())
        json.insert(QStringLiteral("database"), database);
    if (!redis.isEmpty())
        json.insert(QStringLiteral("redis"), redis);
    if (!publicUrl.isEmpty())
        json.insert(QStringLiteral("public_url"), publicUrl);
    if (!trustedProxies.isEmpty())
        json.insert(QStringLiteral("trusted_proxies"), QJsonArray::fromStringList(trustedProxies));
    if (!sharedDir.isEmpty())
        json.insert(QStringLiteral("shared_dir"), sharedDir);
    if (!accelRedirect.isEmpty())
        json.insert(QStringLiteral("accel_redirect"), accelRedirect);
    return json;
}

Result<CoordinatorConfig> CoordinatorConfig::fromJson(const QJsonObject& json)
{
    // The same field checks as a job spec: a typo in config.json is refused by name, never silently defaulted.
    JsonFields fields(json, QStringLiteral("config"));
    fields.allowOnly({QStringLiteral("listen"),
                      QStringLiteral("hosts"),
                      QStringLiteral("open_enrollment"),
                      QStringLiteral("http_threads"),
                      QStringLiteral("max_connections_per_address"),
                      QStringLiteral("enroll_per_minute"),
                      QStringLiteral("enroll_burst"),
                      QStringLiteral("snapshot_every_updates"),
                      QStringLiteral("snapshot_every_seconds"),
                      QStringLiteral("publish_interval_ms"),
                      QStringLiteral("lease_wait_for_own_update_ms"),
                      QStringLiteral("fold_backlog_mb"),
                      QStringLiteral("validate_every_updates"),
                      QStringLiteral("metrics_access"),
                      QStringLiteral("agent_online_seconds"),
                      QStringLiteral("session_idle_seconds"),
                      QStringLiteral("session_lifetime_seconds"),
                      QStringLiteral("max_leases_per_agent"),
                      QStringLiteral("lease_lifetime_deadlines"),
                      QStringLiteral("handback_cap_mb"),
                      QStringLiteral("database"),
                      QStringLiteral("redis"),
                      QStringLiteral("public_url"),
                      QStringLiteral("trusted_proxies"),
                      QStringLiteral("shared_dir"),
                      QStringLiteral("accel_redirect")});
    CoordinatorConfig config;
    QString listen;
    if (fields.readString(u"listen", listen, Need::Required)) {
        const qsizetype colon = listen.lastIndexOf(u':');
        bool portOk = false;
        const int port = colon > 0 ? listen.mid(colon + 1).toInt(&portOk) : 0;
        if (colon <= 0 || !portOk || port < 0 || port > 65535) {
            fields.fail(u"listen", QStringLiteral("expected HOST:PORT, got \"%1\"").arg(listen));
        } else {
            config.listenHost = listen.left(colon);
            if (config.listenHost.startsWith(u'[') && config.listenHost.endsWith(u']'))
                config.listenHost = config.listenHost.mid(1, config.listenHost.size() - 2);
            config.listenPort = quint16(port);
        }
    }
    if (fields.ok() && fields.has(u"hosts")) {
        config.hosts.clear();
        const QJsonValue hosts = fields.value(u"hosts");
        for (const auto& host : hosts.toArray())
            config.hosts << host.toString();
        if (!hosts.isArray() || config.hosts.contains(QString()))
            fields.fail(u"hosts", QStringLiteral("expected a list of host names and addresses"));
    }
    fields.readBool(u"open_enrollment", config.openEnrollment);
    fields.readInt(u"http_threads", config.httpThreads, IntRange{1, 256});
    fields.readInt(u"max_connections_per_address", config.maxConnectionsPerAddress, IntRange{1, 100'000});
    fields.readInt(u"enroll_per_minute", config.enrollPerMinute, IntRange{1, 100'000});
    fields.readInt(u"enroll_burst", config.enrollBurst, IntRange{1, 100'000});
    fields.readInt(u"snapshot_every_updates", config.snapshotEveryUpdates, IntRange{1, 1'000'000});
    fields.readInt(u"snapshot_every_seconds", config.snapshotEverySeconds, IntRange{1, 86'400});
    fields.readInt(u"publish_interval_ms", config.publishIntervalMs, IntRange{0, 3'600'000});
    fields.readInt(u"lease_wait_for_own_update_ms", config.leaseWaitForOwnUpdateMs, IntRange{0, 60'000});
    fields.readInt(u"fold_backlog_mb", config.foldBacklogMb, IntRange{0, 1024 * 1024});
    fields.readInt(u"validate_every_updates", config.validateEveryUpdates, IntRange{0, 1'000'000});
    fields.readInt(u"max_leases_per_agent", config.maxLeasesPerAgent, IntRange{1, 1024});
    fields.readInt(u"lease_lifetime_deadlines", config.leaseLifetimeDeadlines, IntRange{1, 1000});
    fields.readInt(u"handback_cap_mb", config.handbackCapMb, IntRange{0, 16 * 1024 * 1024});
    int metricsAccess = 0;
    if (fields.readChoice(u"metrics_access", metricsAccess, {QStringLiteral("admin"), QStringLiteral("loopback")}))
        config.metricsAccess = metricsAccess == 1 ? MetricsAccess::Loopback : MetricsAccess::Admin;
    fields.readInt(u"agent_online_seconds", config.agentOnlineSeconds, IntRange{10, 86'400});
    fields.readInt(u"session_idle_seconds", config.sessionIdleSeconds, IntRange{60, 30 * 86'400});
    fields.readInt(u"session_lifetime_seconds", config.sessionLifetimeSeconds, IntRange{60, 365 * 86'400});
    if (fields.readString(u"database", config.database) && !config.database.isEmpty()
        && !Database::isPostgresUrl(config.database))
        fields.fail(u"database", QStringLiteral("expected a PostgreSQL URL, postgresql://user@host:port/dbname, "
                                                "or nothing for gleaner.db in the data directory"));
    if (fields.readString(u"redis", config.redis) && !config.redis.isEmpty()) {
        // The URL may hold a password: the message says what is wrong with it, never the URL itself.
        if (auto s = RedisConnection::checkUrl(config.redis); !s)
            fields.fail(u"redis", s.error() + QStringLiteral(", or nothing to keep the weights in memory"));
    }
    if (fields.ok() && fields.has(u"trusted_proxies")) {
        const QJsonValue proxies = fields.value(u"trusted_proxies");
        for (const auto& proxy : proxies.toArray())
            config.trustedProxies << proxy.toString();
        if (!proxies.isArray() || config.trustedProxies.contains(QString()))
            fields.fail(u"trusted_proxies", QStringLiteral("expected a list of IP addresses"));
    }
    if (fields.ok())
        for (const QString& proxy : config.trustedProxies)
            if (auto s = checkTrustedProxy(proxy); !s) {
                fields.fail(u"trusted_proxies", s.error());
                break;
            }
    if (fields.readString(u"public_url", config.publicUrl) && !config.publicUrl.isEmpty())
        if (auto s = checkPublicUrl(config.publicUrl); !s)
            fields.fail(u"public_url", s.error());
    if (fields.readString(u"shared_dir", config.sharedDir) && !config.sharedDir.isEmpty())
        if (auto s = config.checkSharedDir(); !s)
            fields.fail(u"shared_dir", s.error());
    if (fields.readString(u"accel_redirect", config.accelRedirect) && !config.accelRedirect.isEmpty() &&
        fields.ok())
        if (auto s = config.checkAccelRedirect(); !s)
            fields.fail(u"accel_redirect", s.error());
    if (!fields.ok())
        return fields.failure();
    return config;
}

DataDirectory::DataDirectory(QString root) : m_root(QDir(root).absolutePath()) {}

QString DataDirectory::configPath() const { return m_root + QStringLiteral("/config.json"); }
QString DataDirectory::databasePath() const { return m_root + QStringLiteral("/gleaner.db"); }
QString DataDirectory::databaseLocation(const CoordinatorConfig& config) const
{
    return config.database.isEmpty() ? databasePath() : config.database;
}
QString DataDirectory::signingKeyPath() const { return m_root + QStringLiteral("/signing-key.pem"); }
QString DataDirectory::signingPublicKeyPath() const { return m_root + QStringLiteral("/signing-key.pub.pem"); }
QString DataDirectory::signingKeyRotationsPath() const { return m_root + QStringLiteral("/signing-key-rotations.json"); }
QString DataDirectory::nextSigningKeyPath() const { return m_root + QStringLiteral("/signing-key.next.pem"); }
QString DataDirectory::certificatePath() const { return m_root + QStringLiteral("/tls/cert.pem"); }
QString DataDirectory::tlsKeyPath() const { return m_root + QStringLiteral("/tls/key.pem"); }
QString DataDirectory::adminTokenPath() const { return m_root + QStringLiteral("/admin-token"); }
QString DataDirectory::storageRoot(const CoordinatorConfig& config) const
{
    return config.isShared() ? QDir::cleanPath(config.sharedDir) : m_root;
}
QString DataDirectory::blobsDir(const CoordinatorConfig& config) const
{
    return storageRoot(config) + QStringLiteral("/blobs");
}
QString DataDirectory::updatesDir(const CoordinatorConfig& config) const
{
    return storageRoot(config) + QStringLiteral("/updates");
}
QString DataDirectory::uploadsDir() const { return m_root + QStringLiteral("/uploads"); }

Status DataDirectory::writeServerInfo(const ServerInfo& info) const
{
    QSaveFile file(m_root + QStringLiteral("/server.json"));
    QJsonObject json{{QStringLiteral("pid"), info.pid}, {QStringLiteral("host"), info.host},
                     {QStringLiteral("port"), int(info.port)}};
    if (!file.open(QIODevice::WriteOnly) || file.write(QJsonDocument(json).toJson()) < 0 || !file.commit())
        return fail(QStringLiteral("%1: cannot record the server's address: %2").arg(file.fileName(), file.errorString()));
    return {};
}

void DataDirectory::removeServerInfo() const
{
    QFile::remove(m_root + QStringLiteral("/server.json"));
}

std::optional<ServerInfo> DataDirectory::readServerInfo() const
{
    QFile file(m_root + QStringLiteral("/server.json"));
    if (!file.open(QIODevice::ReadOnly))
        return std::nullopt;
    const QJsonObject json = QJsonDocument::fromJson(file.readAll()).object();
    ServerInfo info{json.value(QStringLiteral("pid")).toInteger(), json.value(QStringLiteral("host")).toString(),
                    quint16(json.value(QStringLiteral("port")).toInt())};
    // A server killed without cleaning up leaves the file behind; its process is gone.
    if (info.pid <= 0 || info.port == 0 || ::kill(pid_t(info.pid), 0) != 0)
        return std::nullopt;
    return info;
}

bool DataDirectory::exists() const
{
    return QFile::exists(configPath());
}

Result<CoordinatorConfig> DataDirectory::loadConfig() const
{
    QFile file(configPath());
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot read the coordinator's configuration (%2); is %3 a data directory "
                                   "made by `gleaner-coordinator init`?")
                        .arg(configPath(), file.errorString(), m_root));
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(file.readAll(), &error);
    if (!doc.isObject())
        return fail(QStringLiteral("%1: not a JSON object (%2)").arg(configPath(), error.errorString()));
    return CoordinatorConfig::fromJson(doc.object()).context(configPath());
}

Status DataDirectory::saveConfig(const CoordinatorConfig& config) const
{
    QSaveFile file(configPath());
    if (!file.open(QIODevice::WriteOnly))
        return fail(QStringLiteral("%1: cannot write: %2").arg(configPath(), file.errorString()));
    file.write(QJsonDocument(config.toJson()).toJson(QJsonDocument::Indented));
    if (!file.commit())
        return fail(QStringLiteral("%1: cannot write: %2").arg(configPath(), file.errorString()));
    return {};
}

Result<QByteArray> DataDirectory::readAdminToken() const
{
    QFile file(adminTokenPath());
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot read the admin token (%2); run the command as the user who ran "
                                   "`gleaner-coordinator init`")
                        .arg(adminTokenPath(), file.errorString()));
    return file.readAll().trimmed();
}

} // namespace gleaner::coordinator
