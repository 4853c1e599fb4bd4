#include "config/Initializer.h"

#include "core/Tokens.h"
#include "crypto/Ed25519.h"
#include "crypto/SecureFile.h"
#include "crypto/TlsCertificate.h"
#include "store/Database.h"
#include "util/Clock.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>

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

} // namespace

Result<InitResult> initializeDataDirectory(const DataDirectory& dir, const CoordinatorConfig& config,
                                           const QString& certificateFile, const QString& keyFile)
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
    if (auto s = createEverything(dir, config, certificateFile, keyFile, out); !s) {
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

} // namespace gleaner::coordinator
