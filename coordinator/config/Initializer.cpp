#include "config/Initializer.h"

#include "enrollment/Tokens.h"
#include "crypto/Ed25519.h"
#include "crypto/SecureFile.h"
#include "crypto/TlsCertificate.h"
#include "store/Database.h"
#include "util/Clock.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonObject>

#include <functional>

namespace gleaner::coordinator {
namespace {

constexpr QDir::Filters kEverything = QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot;

void removeAllBut(const QDir& folder, const QStringList& kept)
{
    for (const QFileInfo& entry : folder.entryInfoList(kEverything)) {
        if (kept.contains(entry.fileName()))
            continue;
        if (entry.isDir() && !entry.isSymLink())
            QDir(entry.filePath()).removeRecursively();
        else
            QFile::remove(entry.filePath());
    }
}

Status createEverything(const DataDirectory& dir, const CoordinatorConfig& config, const QString& certificateFile,
                        const QString& keyFile, InitResult& out)
{
    auto key = SigningKey::generate();
    if (!key)
        return fail(key.error());
    if (auto s = key->saveToFile(dir.signingKeyPath()); !s)
        return s;
    out.signingPublicKeyPem = key->publicKey().toPem();
    if (auto s = SecureFile::write(dir.signingPublicKeyPath(), out.signingPublicKeyPem, 0644,
                                   QStringLiteral("signing public key"));
        !s)
        return s;

    if (!QDir().mkpath(QFileInfo(dir.certificatePath()).path()))
        return fail(QStringLiteral("%1: cannot create the folder").arg(QFileInfo(dir.certificatePath()).path()));
    auto identity = certificateFile.isEmpty() ? TlsCertificate::generateSelfSigned(config.hosts)
                                              : TlsCertificate::load(certificateFile, keyFile);
    if (!identity)
        return fail(identity.error());
    if (auto s = TlsCertificate::save(*identity, dir.certificatePath(), dir.tlsKeyPath()); !s)
        return s;
    out.certificatePath = dir.certificatePath();

    out.adminToken = Tokens::generate("gla_");
    if (auto s = SecureFile::write(dir.adminTokenPath(), QByteArray(out.adminToken + '\n'), 0600, QStringLiteral("admin token")); !s)
        return s;
    if (config.isShared()) {
        // A new deployment's shared folder: one that holds another deployment's files is never taken over.
        const QDir shared(config.sharedDir);
        if (shared.exists() && !shared.isEmpty())
            return fail(
                QStringLiteral("%1 (shared_dir) is not empty; a new deployment starts with an empty shared "
                               "folder (to add a coordinator to an existing deployment, use --join)")
                    .arg(config.sharedDir));
        if (!QDir().mkpath(config.sharedDir) ||
            !QFile::setPermissions(config.sharedDir,
                                   QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner))
            return fail(QStringLiteral("%1: cannot create the shared folder").arg(config.sharedDir));
    }
    auto db = Database::open(dir.databaseLocation(config));
    if (!db)
        return fail(db.error());
    // A PostgreSQL database outlives data directories: one that already holds a deployment is not taken over.
    if (!config.database.isEmpty()) {
        auto tokens = (*db)->exec(QStringLiteral("SELECT COUNT(*) FROM admin_tokens"));
        if (!tokens)
            return fail(tokens.error());
        if (tokens->next() && tokens->value(0).toLongLong() > 0)
            return fail(QStringLiteral("%1 already holds a coordinator's state; init never takes over a deployment. "
                                       "Give this one an empty database (CREATE DATABASE ...), or serve with the "
                                       "data directory that was created with it.")
                            .arg((*db)->name()));
    }
    auto stored = (*db)->exec(QStringLiteral("INSERT INTO admin_tokens (hash, created_ms) VALUES (?, ?)"),
                              {Tokens::hash(out.adminToken), SystemClock().nowMs()});
    if (!stored)
        return fail(stored.error());
    return dir.saveConfig(config);
}

Status copyIdentity(const DataDirectory& dir, const DataDirectory& source, InitResult& out)
{
    if (QFile::exists(source.nextSigningKeyPath()))
        return fail(
            QStringLiteral("%1: a signing key rotation is under way there; join once it has completed")
                .arg(source.root()));
    const struct
    {
        QString from;
        QString to;
        int mode;
        const char* what;
        bool optional;
    } files[] = {
        {source.signingKeyPath(), dir.signingKeyPath(), 0600, "signing key", false},
        {source.signingPublicKeyPath(), dir.signingPublicKeyPath(), 0644, "signing public key", false},
        {source.signingKeyRotationsPath(), dir.signingKeyRotationsPath(), 0644, "signing key rotations",
         true},
        {source.certificatePath(), dir.certificatePath(), 0644, "TLS certificate", false},
        {source.tlsKeyPath(), dir.tlsKeyPath(), 0600, "TLS private key", false},
        {source.adminTokenPath(), dir.adminTokenPath(), 0600, "admin token", false},
    };
    if (!QDir().mkpath(QFileInfo(dir.certificatePath()).path()))
        return fail(
            QStringLiteral("%1: cannot create the folder").arg(QFileInfo(dir.certificatePath()).path()));
    for (const auto& file : files) {
        if (file.optional && !QFile::exists(file.from))
            continue;
        auto bytes = SecureFile::read(file.from, QString::fromLatin1(file.what), 1 << 20);
        if (!bytes)
            return fail(bytes.error());
        const Status written = SecureFile::write(file.to, *bytes, file.mode, QString::fromLatin1(file.what));
        if (file.to == dir.adminTokenPath())
            out.adminToken = bytes->trimmed();
        if (file.to == dir.signingPublicKeyPath())
            out.signingPublicKeyPem = *bytes;
        SecureFile::wipe(*bytes);
        if (!written)
            return written;
    }
    out.certificatePath = dir.certificatePath();
    return {};
}

Status joinEverything(const DataDirectory& dir, const DataDirectory& source, const QString& listen,
                      InitResult& out)
{
    auto config = source.loadConfig();
    if (!config)
        return fail(QStringLiteral("%1: %2").arg(source.root(), config.error()));
    if (!config->isShared())
        return fail(
            QStringLiteral("%1 runs alone (its config.json names no shared_dir): only a deployment of "
                           "several coordinators, made with init --shared-dir, can be joined")
                .arg(source.root()));
    if (!listen.isEmpty()) {
        auto parsed = CoordinatorConfig::fromJson(QJsonObject{{QStringLiteral("listen"), listen}});
        if (!parsed)
            return fail(QStringLiteral("--listen: expected HOST:PORT, got \"%1\"").arg(listen));
        config->listenHost = parsed->listenHost;
        config->listenPort = parsed->listenPort;
    }
    if (auto s = copyIdentity(dir, source, out); !s)
        return s;
    auto db = Database::open(dir.databaseLocation(*config));
    if (!db)
        return fail(db.error());
    auto known = (*db)->exec(QStringLiteral("SELECT 1 FROM admin_tokens WHERE hash = ?"),
                             {Tokens::hash(out.adminToken)});
    if (!known)
        return fail(known.error());
    if (!known->next())
        return fail(
            QStringLiteral("%1 does not hold the deployment of %2 (its admin token is not there): join "
                           "with the data directory of a coordinator of this database's deployment")
                .arg((*db)->name(), source.root()));
    return dir.saveConfig(*config);
}

// Makes the data directory with `create`; leaves nothing it made behind when `create` fails.
Result<InitResult> makeDataDirectory(const DataDirectory& dir,
                                     const std::function<Status(InitResult&)>& create)
{
    const QDir folder(dir.root());
    const bool existed = folder.exists();
    if (existed && !folder.isEmpty())
        return fail(QStringLiteral("%1 already exists and is not empty; init never overwrites a data directory. "
                                   "Choose a new folder, or remove this one if you really mean to start over.")
                        .arg(dir.root()));
    if (!QDir().mkpath(dir.root())
        || !QFile::setPermissions(dir.root(), QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner))
        return fail(QStringLiteral("%1: cannot create the data directory").arg(dir.root()));
    // isEmpty() does not count hidden entries: those stay whatever happens.
    const QStringList before = existed ? folder.entryList(kEverything) : QStringList();
    InitResult out;
    if (auto s = create(out); !s) {
        // Nothing half-made is left to be mistaken for a data directory. A folder that was there before stays, as
        // it was: the service user of a package cannot create another one in /var/lib to try again.
        if (existed)
            removeAllBut(folder, before);
        else
            QDir(dir.root()).removeRecursively();
        return fail(s.error());
    }
    return out;
}

} // namespace

Result<InitResult> initializeDataDirectory(const DataDirectory& dir, const CoordinatorConfig& config,
                                           const QString& certificateFile, const QString& keyFile)
{
    // A shared folder that init makes goes with a failed init too, so that init can run again; one that was
    // there (empty) stays.
    const bool sharedExisted = !config.isShared() || QFileInfo::exists(config.sharedDir);
    auto made = makeDataDirectory(
        dir, [&](InitResult& out) { return createEverything(dir, config, certificateFile, keyFile, out); });
    if (!made && !sharedExisted)
        QDir(config.sharedDir).removeRecursively();
    return made;
}

Result<InitResult> joinDeployment(const DataDirectory& dir, const DataDirectory& source,
                                  const QString& listen)
{
    if (QDir(dir.root()) == QDir(source.root()))
        return fail(QStringLiteral("--join names the data directory being made (%1)").arg(dir.root()));
    return makeDataDirectory(dir, [&](InitResult& out) { return joinEverything(dir, source, listen, out); });
}

} // namespace gleaner::coordinator
