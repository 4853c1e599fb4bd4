#include "cache/FileCache.h"

#include "crypto/Sha256.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>
#include <QMutexLocker>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gleaner::agent {

Q_LOGGING_CATEGORY(lcCache, "gleaner.agent.cache", QtInfoMsg)

namespace {

const QString kPartialDir = QStringLiteral("partial");
const QString kPartialSuffix = QStringLiteral(".part");

Error badHash(const QString& sha256)
{
    return fail(
        QStringLiteral("\"%1\" is not a SHA-256 (64 lowercase hex digits); the manifest or request is "
                       "malformed")
            .arg(sha256.left(80)));
}

bool isShardFolderName(const QString& name)
{
    auto isHex = [](QChar c) { return (c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f'); };
    return name.size() == 2 && isHex(name.at(0)) && isHex(name.at(1));
}

} // namespace

FileCache::FileCache(QString dir, qint64 capBytes, const Clock& clock, std::unique_ptr<CacheIndex> index)
    : m_dir(std::move(dir)), m_cap(capBytes), m_clock(clock), m_index(std::move(index))
{
}

FileCache::~FileCache()
{
    // Writers hold a pointer to their cache; one alive now is a caller's bug that would crash later.
    Q_ASSERT(m_writing.isEmpty());
}

Result<std::unique_ptr<FileCache>> FileCache::open(const QString& dir, qint64 capBytes, const Clock& clock)
{
    const QString absolute = QDir(dir).absolutePath();
    if (!QDir().mkpath(absolute + u'/' + kPartialDir))
        return fail(
            QStringLiteral("%1: cannot create the cache folder; check its parent's permissions or choose "
                           "another data folder")
                .arg(absolute));
    // Cached files are the user's (or the organisation's) training data: no other local user reads them.
    QFile::setPermissions(absolute, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
    auto index = CacheIndex::open(absolute + QStringLiteral("/index.db"));
    if (!index)
        return fail(index.error());
    std::unique_ptr<FileCache> cache(
        new FileCache(absolute, qMax<qint64>(0, capBytes), clock, std::move(*index)));
    if (Status s = cache->reconcile(); !s)
        return fail(s.error());
    return cache;
}

QString FileCache::filePath(const QString& sha256) const
{
    return m_dir + u'/' + sha256.left(2) + u'/' + sha256;
}

QString FileCache::partialPathFor(const QString& sha256) const
{
    return m_dir + u'/' + kPartialDir + u'/' + sha256 + kPartialSuffix;
}

Result<std::unique_ptr<CacheWriter>> FileCache::beginWrite(const QString& sha256, qint64 expectedSize,
                                                           CacheRole role)
{
    if (!Sha256::isHexDigest(sha256))
        return badHash(sha256);
    if (expectedSize < 0)
        return fail(
            QStringLiteral("file %1: the manifest gives a negative size (%2)").arg(sha256).arg(expectedSize));
    {
        QMutexLocker lock(&m_mutex);
        if (m_writing.contains(sha256))
            return fail(
                QStringLiteral("file %1 is already being downloaded; wait for that download").arg(sha256));
        auto entry = m_index->find(sha256);
        if (!entry)
            return fail(entry.error());
        if (*entry && QFileInfo(filePath(sha256)).size() == (*entry)->size)
            return fail(QStringLiteral("file %1 is already cached at %2; use it instead of downloading it")
                            .arg(sha256, filePath(sha256)));
        m_writing.insert(sha256);
    }
    // Hashing a resumed prefix may take a while; it runs outside the lock. The claim above keeps a second
    // writer of this hash away, and the writer's destructor gives it back on every path.
    std::unique_ptr<CacheWriter> writer(
        new CacheWriter(this, sha256, expectedSize, role, partialPathFor(sha256)));
    if (Status s = writer->start(); !s)
        return fail(s.error());
    if (writer->resumeOffset() > 0)
        qCInfo(lcCache) << "resuming" << sha256 << "at byte" << writer->resumeOffset() << "of"
                        << expectedSize;
    return writer;
}

void FileCache::releaseWriter(const QString& sha256)
{
    QMutexLocker lock(&m_mutex);
    m_writing.remove(sha256);
}

Result<CommitResult> FileCache::finishCommit(CacheWriter& writer)
{
    QMutexLocker lock(&m_mutex);
    const QString& sha256 = writer.sha256();
    const QString target = filePath(sha256);
    if (!QDir().mkpath(QFileInfo(target).absolutePath()))
        return fail(QStringLiteral("%1: cannot create the folder; check the cache folder's permissions")
                        .arg(QFileInfo(target).absolutePath()));
    // rename() replaces atomically: a reader sees no file or the whole verified file, never a part.
    if (std::rename(QFile::encodeName(writer.partialPath()).constData(),
                    QFile::encodeName(target).constData()) != 0)
        return fail(QStringLiteral("%1: cannot move the verified download to %2: %3; check the cache folder")
                        .arg(writer.partialPath(), target, QString::fromLocal8Bit(std::strerror(errno))));
    const qint64 now = m_clock.nowMs();
    // Should this fail, the file is a stray that the next start re-indexes after hashing it.
    if (Status s = m_index->insert({sha256, writer.expectedSize(), writer.role(), now, now, 0}); !s)
        return fail(s.error());
    qCInfo(lcCache) << "cached" << cacheRoleName(writer.role()) << sha256 << writer.expectedSize() << "bytes";
    return CommitResult{target, evictLocked()};
}

bool FileCache::contains(const QString& sha256) const
{
    if (!Sha256::isHexDigest(sha256))
        return false;
    QMutexLocker lock(&m_mutex);
    auto entry = m_index->find(sha256);
    if (!entry || !*entry)
        return false;
    const QFileInfo info(filePath(sha256));
    return info.isFile() && info.size() == (*entry)->size;
}

QString FileCache::path(const QString& sha256) const
{
    // isHexDigest() (inside contains) is what keeps "../x" and separators out of the path.
    return contains(sha256) ? filePath(sha256) : QString();
}

bool FileCache::touch(const QString& sha256)
{
    if (!Sha256::isHexDigest(sha256))
        return false;
    QMutexLocker lock(&m_mutex);
    auto touched = m_index->touch(sha256, m_clock.nowMs());
    if (!touched)
        qCWarning(lcCache) << touched.error();
    return touched && *touched;
}

Status FileCache::pin(const QString& sha256, const QString& owner)
{
    if (!Sha256::isHexDigest(sha256))
        return badHash(sha256);
    if (owner.isEmpty())
        return fail(QStringLiteral("file %1: a pin needs an owner (the lease id)").arg(sha256));
    QMutexLocker lock(&m_mutex);
    return m_index->pin(sha256, owner);
}

Status FileCache::unpin(const QString& sha256, const QString& owner)
{
    if (!Sha256::isHexDigest(sha256))
        return badHash(sha256);
    QMutexLocker lock(&m_mutex);
    return m_index->unpin(sha256, owner);
}

Result<int> FileCache::releaseOwner(const QString& owner)
{
    QMutexLocker lock(&m_mutex);
    return m_index->releaseOwner(owner);
}

QStringList FileCache::pinOwners() const
{
    QMutexLocker lock(&m_mutex);
    auto owners = m_index->pinOwners();
    if (!owners)
        qCWarning(lcCache) << owners.error();
    return owners ? *owners : QStringList();
}

QList<CacheEntry> FileCache::entries() const
{
    QMutexLocker lock(&m_mutex);
    auto entries = m_index->entries();
    if (!entries)
        qCWarning(lcCache) << entries.error();
    return entries ? *entries : QList<CacheEntry>();
}

QStringList FileCache::heldHashes(std::optional<CacheRole> role) const
{
    QMutexLocker lock(&m_mutex);
    auto entries = m_index->entries(role);
    if (!entries) {
        qCWarning(lcCache) << entries.error();
        return {};
    }
    QStringList hashes;
    hashes.reserve(entries->size());
    for (const CacheEntry& entry : *entries)
        hashes.append(entry.sha256);
    return hashes;
}

qint64 FileCache::usedBytes() const
{
    QMutexLocker lock(&m_mutex);
    auto used = m_index->usedBytes();
    return used ? *used : 0;
}

qint64 FileCache::capBytes() const
{
    QMutexLocker lock(&m_mutex);
    return m_cap;
}

EvictionReport FileCache::setCap(qint64 bytes)
{
    QMutexLocker lock(&m_mutex);
    m_cap = qMax<qint64>(0, bytes);
    return evictLocked();
}

EvictionReport FileCache::evictLocked()
{
    EvictionReport report;
    report.capBytes = m_cap;
    auto used = m_index->usedBytes();
    report.usedBytes = used ? *used : 0;
    if (report.usedBytes <= m_cap)
        return report;
    auto candidates = m_index->evictionCandidates();
    if (!candidates) {
        qCWarning(lcCache) << "cannot evict:" << candidates.error();
        return report;
    }
    for (const CacheEntry& entry : *candidates) {
        if (report.usedBytes <= m_cap)
            break;
        const QString file = filePath(entry.sha256);
        if (!QFile::remove(file) && QFileInfo::exists(file)) {
            qCWarning(lcCache) << file << "cannot be deleted; check the cache folder's permissions";
            continue;
        }
        if (Status s = m_index->remove(entry.sha256); !s) {
            qCWarning(lcCache) << s.error();
            continue;
        }
        report.usedBytes -= entry.size;
        report.evicted.append({entry.sha256, entry.size, entry.role});
        qCInfo(lcCache) << "evicted" << cacheRoleName(entry.role) << entry.sha256 << entry.size << "bytes";
    }
    if (report.overCap())
        qCWarning(lcCache) << "pinned files use" << report.usedBytes << "bytes, more than the cache cap of"
                           << m_cap << "; the cache shrinks when their subtasks finish";
    return report;
}

void FileCache::remove(const QString& sha256)
{
    if (!Sha256::isHexDigest(sha256))
        return;
    QMutexLocker lock(&m_mutex);
    auto entry = m_index->find(sha256);
    if (entry && *entry && (*entry)->pins == 0)
        dropLocked(sha256);
}

void FileCache::dropLocked(const QString& sha256)
{
    QFile::remove(filePath(sha256));
    if (Status s = m_index->remove(sha256); !s)
        qCWarning(lcCache) << s.error();
}

Status FileCache::verify(const QString& sha256)
{
    if (!Sha256::isHexDigest(sha256))
        return badHash(sha256);
    const QString file = filePath(sha256);
    {
        QMutexLocker lock(&m_mutex);
        auto entry = m_index->find(sha256);
        if (!entry)
            return fail(entry.error());
        if (!*entry)
            return fail(QStringLiteral("file %1 is not cached; download it").arg(sha256));
    }
    // Hashing a large shard takes seconds: outside the lock, so downloads and lease requests go on.
    auto digest = Sha256::hashFile(file);
    const QString actual = digest ? Sha256::toHex(*digest) : QString();
    if (actual == sha256)
        return {};
    QMutexLocker lock(&m_mutex);
    dropLocked(sha256);
    if (!digest)
        return fail(
            QStringLiteral("cached file %1 cannot be read (%2); it was removed from the cache and will be "
                           "downloaded again")
                .arg(file, digest.error()));
    return fail(
        QStringLiteral("cached file %1 was altered on disk: its content hashes to %2; it was removed from "
                       "the cache and will be downloaded again")
            .arg(file, actual));
}

Status FileCache::reconcile()
{
    reconcileIndexedFiles();
    reconcileStrays();
    reconcilePartials();
    QMutexLocker lock(&m_mutex);
    m_startup.eviction = evictLocked();
    const CacheStartupReport& r = m_startup;
    if (r.indexedStrays || r.deletedStrays || r.droppedRows || r.removedPartials)
        qCInfo(lcCache) << m_dir << ": re-indexed" << r.indexedStrays << "files, deleted" << r.deletedStrays
                        << "unknown files, dropped" << r.droppedRows << "index rows without a file, removed"
                        << r.removedPartials << "stale partial downloads";
    return {};
}

void FileCache::reconcileIndexedFiles()
{
    auto entries = m_index->entries();
    if (!entries) {
        qCWarning(lcCache) << entries.error();
        return;
    }
    for (const CacheEntry& entry : *entries) {
        const QFileInfo info(filePath(entry.sha256));
        if (info.isFile() && info.size() == entry.size)
            continue;
        // Gone (deleted by hand) or a different size (cut by a crash before fsync, or edited): either way it
        // is not the file the index promised.
        dropLocked(entry.sha256);
        ++m_startup.droppedRows;
    }
}

void FileCache::reconcileStrays()
{
    const QDir root(m_dir);
    for (const QString& folder : root.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        if (!isShardFolderName(folder))
            continue;
        const QDir dir(root.filePath(folder));
        for (const QFileInfo& info : dir.entryInfoList(QDir::Files | QDir::Hidden | QDir::System)) {
            const QString name = info.fileName();
            if (Sha256::isHexDigest(name) && name.startsWith(folder)) {
                auto known = m_index->find(name);
                if (known && *known)
                    continue;
                // Left by a crash between the rename and the index insert: keep it if its content is its
                // name. Its role is lost; the hash is all a lease request needs.
                auto digest = Sha256::hashFile(info.absoluteFilePath());
                if (digest && Sha256::toHex(*digest) == name) {
                    const qint64 now = m_clock.nowMs();
                    if (m_index->insert({name, info.size(), CacheRole::Unknown, now, now, 0})) {
                        ++m_startup.indexedStrays;
                        continue;
                    }
                }
            }
            qCInfo(lcCache) << "deleting" << info.absoluteFilePath() << ": not a cached file of this name";
            QFile::remove(info.absoluteFilePath());
            ++m_startup.deletedStrays;
        }
    }
}

void FileCache::reconcilePartials()
{
    const QDir dir(m_dir + u'/' + kPartialDir);
    const qint64 now = m_clock.nowMs();
    for (const QFileInfo& info : dir.entryInfoList(QDir::Files | QDir::Hidden | QDir::System)) {
        const QString name = info.fileName();
        const QString sha256 = name.chopped(qMin(name.size(), kPartialSuffix.size()));
        bool remove = !name.endsWith(kPartialSuffix) || !Sha256::isHexDigest(sha256);
        if (!remove) {
            auto known = m_index->find(sha256);
            remove = (known && *known) || now - info.lastModified().toMSecsSinceEpoch() > kStalePartialMs;
        }
        if (remove) {
            QFile::remove(info.absoluteFilePath());
            ++m_startup.removedPartials;
        }
    }
}

} // namespace gleaner::agent
