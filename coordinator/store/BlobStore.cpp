#include "store/BlobStore.h"

#include "util/Durability.h"

#include "crypto/Sha256.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

namespace gleaner::coordinator {

BlobStore::BlobStore(QString dir) : m_dir(std::move(dir)) {}

QString BlobStore::path(const QString& sha256) const
{
    if (!Sha256::isHexDigest(sha256))
        return {};
    return QStringLiteral("%1/%2").arg(m_dir, relativePath(sha256));
}

QString BlobStore::relativePath(const QString& sha256) const
{
    if (!Sha256::isHexDigest(sha256))
        return {};
    return QStringLiteral("%1/%2").arg(sha256.left(2), sha256);
}

bool BlobStore::contains(const QString& sha256) const
{
    const QString file = path(sha256);
    return !file.isEmpty() && QFileInfo::exists(file);
}

qint64 BlobStore::size(const QString& sha256) const
{
    const QFileInfo info(path(sha256));
    return info.exists() ? info.size() : -1;
}

Result<BlobInfo> BlobStore::put(const QByteArray& bytes)
{
    const QString sha = Sha256::toHex(Sha256::hash(bytes));
    const QString target = path(sha);
    if (QFileInfo::exists(target))
        return BlobInfo{sha, bytes.size()};
    if (!QDir().mkpath(QFileInfo(target).path()))
        return fail(QStringLiteral("%1: cannot create the blob folder").arg(QFileInfo(target).path()));
    QSaveFile file(target);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return fail(QStringLiteral("%1: cannot write: %2").arg(target, file.errorString()));
    // QSaveFile flushed the bytes before its rename; the name is durable once the folder is.
    if (auto s = Durability::syncFolder(QFileInfo(target).path()); !s)
        return fail(s.error());
    return BlobInfo{sha, bytes.size()};
}

Result<BlobInfo> BlobStore::adoptFile(const QString& source)
{
    auto digest = Sha256::hashFile(source);
    if (!digest)
        return fail(digest.error());
    const QString sha = Sha256::toHex(*digest);
    const QString target = path(sha);
    const qint64 bytes = QFileInfo(source).size();
    if (QFileInfo::exists(target)) {
        QFile::remove(source);
        return BlobInfo{sha, bytes};
    }
    if (!QDir().mkpath(QFileInfo(target).path()))
        return fail(QStringLiteral("%1: cannot create the blob folder").arg(QFileInfo(target).path()));
    if (!QFile::rename(source, target))
        return fail(QStringLiteral("cannot move %1 into the blob store at %2").arg(source, target));
    if (auto s = Durability::syncFolder(QFileInfo(target).path()); !s)
        return fail(s.error());
    return BlobInfo{sha, bytes};
}

} // namespace gleaner::coordinator
