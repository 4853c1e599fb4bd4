// gleaner-coordinator init: a new data directory with everything the server needs.
#include "cli/Cli.h"
#include "config/DataDirectory.h"
#include "config/Initializer.h"
#include "store/Database.h"
#include "crypto/TlsCertificate.h"
#include "store/RedisConnection.h"

#include <QCommandLineParser>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonObject>
#include <QTextStream>

namespace gleaner::coordinator::cli {
namespace {

// What init made, for the admin: as JSON, or in words. `made` starts the sentence ("Created the ...
// directory").
int reportCreated(const DataDirectory& dir, const InitResult& created, bool json, const QString& made)
{
    auto config = dir.loadConfig();
    if (!config)
        return failure(config.error());
    if (json) {
        QJsonObject out;
        out.insert(QStringLiteral("url"), config->url());
        out.insert(QStringLiteral("admin_token"), QString::fromLatin1(created.adminToken));
        out.insert(QStringLiteral("ca_certificate"), dir.certificatePath());
        out.insert(QStringLiteral("signing_public_key"), QString::fromLatin1(created.signingPublicKeyPem));
        out.insert(QStringLiteral("data_dir"), dir.root());
        printJson(out);
        return 0;
    }
    QFile cert(dir.certificatePath());
    cert.open(QIODevice::ReadOnly);
    const auto fingerprint = TlsCertificate::fingerprint(cert.readAll());
    QTextStream out(stdout);
    out << made << " " << dir.root() << "\n\n"
        << "  URL for agents:        " << config->url() << "\n"
        << "  TLS certificate:       " << dir.certificatePath() << "\n"
        << "  certificate SHA-256:   " << (fingerprint ? *fingerprint : fingerprint.error()) << "\n"
        << "  admin token:           " << created.adminToken << "\n\n"
        << "The admin token is shown once; the CLI on this machine reads it from " << dir.adminTokenPath()
        << ".\n"
        << "Start the server with: gleaner-coordinator serve --data-dir " << dir.root() << "\n";
    return 0;
}

} // namespace

int initCommand(const QStringList& arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Creates a coordinator's data directory: the Ed25519 key that signs task manifests, a TLS key and a "
        "self-signed certificate for the given host names (unless --tls-cert is given), an admin token (printed "
        "once), the configuration and the SQLite database. Refuses to touch an existing data directory."));
    parser.addHelpOption();
    parser.addOption({QStringLiteral("data-dir"), QStringLiteral("The data directory to create."), QStringLiteral("DIR")});
    parser.addOption({QStringLiteral("listen"), QStringLiteral("Address and port to serve on (default 127.0.0.1:8443)."),
                      QStringLiteral("HOST:PORT"), QStringLiteral("127.0.0.1:8443")});
    parser.addOption({QStringLiteral("host"),
                      QStringLiteral("A name or address agents use to reach this coordinator; repeat for several. "
                                     "localhost and 127.0.0.1 are always included."),
                      QStringLiteral("NAME")});
    parser.addOption({QStringLiteral("tls-cert"), QStringLiteral("Use this certificate (PEM) instead of a self-signed one."),
                      QStringLiteral("FILE")});
    parser.addOption({QStringLiteral("tls-key"), QStringLiteral("The private key (PEM) of --tls-cert."), QStringLiteral("FILE")});
    parser.addOption({QStringLiteral("open-enrollment"), QStringLiteral("Let agents enroll without a token.")});
    parser.addOption({QStringLiteral("database"),
                      QStringLiteral("Keep the coordinator's state in this PostgreSQL database, "
                                     "postgresql://user@host[:port]/dbname?passfile=/path (it must exist and hold no "
                                     "other deployment), instead of gleaner.db in the data directory. The password "
                                     "goes in that file (host:port:dbname:user:password, mode 0600), not in the URL; "
                                     "to another machine add &sslmode=verify-full&sslrootcert=/path/ca.pem "
                                     "(docs/scale-out.md)."),
                      QStringLiteral("URL")});
    parser.addOption({QStringLiteral("redis"),
                      QStringLiteral("Keep the server weights of running jobs in this Redis 7 server, "
                                     "redis://[user@]host[:port][/db]?password_file=/path, where every coordinator "
                                     "of the deployment folds into them, instead of in the coordinator's memory. "
                                     "The file (mode 0600) holds the server's password alone; init checks that "
                                     "Redis takes it."),
                      QStringLiteral("URL")});
    parser.addOption({QStringLiteral("public-url"),
                      QStringLiteral("The address agents reach this coordinator at when it is not its own: a load "
                                     "balancer, a reverse proxy, a forwarded port (https://host[:port]). Give it "
                                     "to agents; add its host with --host so the certificate names it."),
                      QStringLiteral("URL")});
    parser.addOption({QStringLiteral("trusted-proxy"),
                      QStringLiteral("A reverse proxy in front of this coordinator, by IP address (repeat for "
                                     "several): its requests count as coming from the client its "
                                     "X-Forwarded-For names last."),
                      QStringLiteral("ADDRESS")});
    parser.addOption({QStringLiteral("accel-redirect"),
                      QStringLiteral("The nginx in front (--trusted-proxy) sends file downloads itself from "
                                     "the blob folder, which it serves at this internal location (such as "
                                     "/_gleaner/blobs/): the coordinator answers with X-Accel-Redirect "
                                     "(docs/scale-out.md). Needs --shared-dir."),
                      QStringLiteral("PATH")});
    parser.addOption(
        {QStringLiteral("shared-dir"),
         QStringLiteral("A new deployment that several coordinators serve: blobs and kept updates in "
                        "this folder (absolute; a network file system every coordinator mounts, or a "
                        "folder on this machine for several processes here), which must be empty. "
                        "Needs --database and --redis."),
         QStringLiteral("DIR")});
    parser.addOption(
        {QStringLiteral("join"),
         QStringLiteral("Another coordinator of an existing deployment of several (made with "
                        "--shared-dir): takes the signing key, TLS identity, admin token and "
                        "configuration from that coordinator's data directory DIR (readable from "
                        "here: this machine's, a mounted or a copied one). Only --listen may differ."),
         QStringLiteral("DIR")});
    parser.addOption({QStringLiteral("json"), QStringLiteral("Print {url, admin_token, ca_certificate, signing_public_key}.")});
    if (!parser.parse(arguments))
        return usageError(parser.errorText(), QStringLiteral("init"));
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    if (!parser.positionalArguments().isEmpty())
        return usageError(QStringLiteral("unexpected argument \"%1\"").arg(parser.positionalArguments().first()),
                          QStringLiteral("init"));
    const QString root = parser.value(QStringLiteral("data-dir"));
    if (root.isEmpty())
        return usageError(QStringLiteral("--data-dir DIR is required"), QStringLiteral("init"));
    if (parser.isSet(QStringLiteral("tls-cert")) != parser.isSet(QStringLiteral("tls-key")))
        return usageError(QStringLiteral("--tls-cert and --tls-key go together"), QStringLiteral("init"));
    if (parser.isSet(QStringLiteral("join"))) {
        for (const char* other : {"host", "tls-cert", "tls-key", "open-enrollment", "database", "redis",
                                  "public-url", "trusted-proxy", "shared-dir", "accel-redirect"})
            if (parser.isSet(QString::fromLatin1(other)))
                return usageError(
                    QStringLiteral("--%1: a coordinator that joins takes the deployment's settings from "
                                   "--join's data directory; only --listen may differ")
                        .arg(QString::fromLatin1(other)),
                    QStringLiteral("init"));
        const DataDirectory dir(root);
        const DataDirectory source(parser.value(QStringLiteral("join")));
        auto joined = joinDeployment(
            dir, source,
            parser.isSet(QStringLiteral("listen")) ? parser.value(QStringLiteral("listen")) : QString());
        if (!joined)
            return failure(joined.error());
        return reportCreated(dir, *joined, parser.isSet(QStringLiteral("json")),
                             QStringLiteral("Joined the deployment of %1 with").arg(source.root()));
    }

    CoordinatorConfig config;
    auto parsedListen = CoordinatorConfig::fromJson(QJsonObject{{QStringLiteral("listen"), parser.value(QStringLiteral("listen"))}});
    if (!parsedListen)
        return usageError(QStringLiteral("--listen: expected HOST:PORT, got \"%1\"").arg(parser.value(QStringLiteral("listen"))),
                          QStringLiteral("init"));
    config.listenHost = parsedListen->listenHost;
    config.listenPort = parsedListen->listenPort;
    QStringList hosts = parser.values(QStringLiteral("host"));
    for (const QString& always : {QStringLiteral("localhost"), QStringLiteral("127.0.0.1")})
        if (!hosts.contains(always))
            hosts << always;
    if (config.listenHost != u"0.0.0.0" && config.listenHost != u"::" && !hosts.contains(config.listenHost))
        hosts << config.listenHost;
    config.hosts = hosts;
    config.openEnrollment = parser.isSet(QStringLiteral("open-enrollment"));
    config.database = parser.value(QStringLiteral("database"));
    if (parser.isSet(QStringLiteral("database")) && !Database::isPostgresUrl(config.database))
        return usageError(QStringLiteral("--database: expected a PostgreSQL URL, postgresql://user@host:port/dbname"),
                          QStringLiteral("init"));
    config.trustedProxies = parser.values(QStringLiteral("trusted-proxy"));
    for (const QString& proxy : config.trustedProxies)
        if (auto s = CoordinatorConfig::checkTrustedProxy(proxy); !s)
            return usageError(QStringLiteral("--trusted-proxy: %1").arg(s.error()), QStringLiteral("init"));
    config.publicUrl = parser.value(QStringLiteral("public-url"));
    if (parser.isSet(QStringLiteral("public-url")))
        if (auto s = CoordinatorConfig::checkPublicUrl(config.publicUrl); !s)
            return usageError(QStringLiteral("--public-url: %1").arg(s.error()), QStringLiteral("init"));
    config.redis = parser.value(QStringLiteral("redis"));
    if (parser.isSet(QStringLiteral("redis")))
        if (auto s = RedisConnection::checkUrl(config.redis); !s)
            return usageError(QStringLiteral("--redis: %1").arg(s.error()), QStringLiteral("init"));
    config.sharedDir = parser.value(QStringLiteral("shared-dir"));
    if (parser.isSet(QStringLiteral("shared-dir")))
        if (auto s = config.checkSharedDir(); !s)
            return usageError(QStringLiteral("--shared-dir: %1").arg(s.error()), QStringLiteral("init"));
    config.accelRedirect = parser.value(QStringLiteral("accel-redirect"));
    if (parser.isSet(QStringLiteral("accel-redirect")))
        if (auto s = config.checkAccelRedirect(); !s)
            return usageError(QStringLiteral("--accel-redirect: %1").arg(s.error()), QStringLiteral("init"));
    if (!config.redis.isEmpty())
        if (auto reached = RedisConnection::open(config.redis); !reached)
            return failure(reached.error());

    const DataDirectory dir(root);
    auto created = initializeDataDirectory(dir, config, parser.value(QStringLiteral("tls-cert")),
                                           parser.value(QStringLiteral("tls-key")));
    if (!created)
        return failure(created.error());
    return reportCreated(dir, *created, parser.isSet(QStringLiteral("json")),
                         QStringLiteral("Created the coordinator data directory"));
}

} // namespace gleaner::coordinator::cli
