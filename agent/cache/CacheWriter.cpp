#include "cache/CacheWriter.h"

#include "cache/FileCache.h"

#include <QFileInfo>

#ifdef Q_OS_UNIX
#include <unistd.h>
#endif

namespace gleaner::agent {

CacheWriter::CacheWriter(FileCache* cache, QString sha256, qint64 expectedSize, CacheRole role,
                         QString partialPath)
    : m_cache(cache), m_sha256(std::move(sha256)), m_expectedSize(expectedSize), m_role(role),
      m_partialPath(std::move(partialPath)), m_file(m_partialPath)
{
}

CacheWriter::~CacheWriter()
{
    // Closing without commit keeps what was written: the next beginWrite() of this hash resumes from it.
    m_file.close();
    release();
}

void CacheWriter::release()
{
    if (m_cache) {
        m_cache->releaseWriter(m_sha256);
        m_cache = nullptr;
    }
}

Status CacheWriter::start()
{
    if (!m_file.open(QIODevice::ReadWrite))
        return fail(QStringLiteral("%1: cannot open the partial download: %2; check the cache folder's "
                                   "permissions and free space")
                        .arg(m_partialPath, m_file.errorString()));
    if (!m_hasher.isValid())
        return fail(m_hasher.errorString());
    // A partial longer than the file cannot be a prefix of it (an earlier, different manifest?): start over.
    if (m_file.size() > m_expectedSize && !m_file.resize(0))
        return fail(QStringLiteral("%1: cannot truncate the partial download: %2")
                        .arg(m_partialPath, m_file.errorString()));
    // Hash the prefix a previous run wrote, so the final hash covers the whole file without a second pass.
    QByteArray chunk;
    while (!(chunk = m_file.read(Sha256::kChunkSize)).isEmpty()) {
        m_hasher.addData(chunk);
        m_written += chunk.size();
    }
    if (m_file.error() != QFileDevice::NoError || m_written != m_file.size())
        return fail(QStringLiteral("%1: cannot read the partial download: %2; delete it to download again")
                        .arg(m_partialPath, m_file.errorString()));
    m_resumeOffset = m_written;
    return {};
}

Status CacheWriter::failAndDelete(QString message)
{
    m_finished = true;
    m_file.close();
    QFile::remove(m_partialPath);
    release();
    return fail(std::move(message));
}

Status CacheWriter::append(QByteArrayView data)
{
    if (m_finished || !m_file.isOpen())
        return fail(
            QStringLiteral("%1: the download of %2 is already finished").arg(m_partialPath, m_sha256));
    if (m_written + data.size() > m_expectedSize)
        return failAndDelete(
            QStringLiteral("refusing file %1: the server sent more than the %2 bytes its manifest "
                           "names; the coordinator's file differs from its manifest, so the "
                           "partial download was deleted")
                .arg(m_sha256)
                .arg(m_expectedSize));
    const qint64 wrote = m_file.write(data.data(), data.size());
    if (wrote != data.size()) {
        // A short write leaves an unknown tail on disk: rewind to what was hashed, so a retry stays
        // consistent.
        const QString why = m_file.errorString();
        m_file.resize(m_written);
        m_file.seek(m_written);
        return fail(
            QStringLiteral("%1: cannot write the download: %2; free disk space or lower the cache cap")
                .arg(m_partialPath, why));
    }
    m_hasher.addData(data);
    m_written += data.size();
    return {};
}

Result<CommitResult> CacheWriter::commit()
{
    if (m_finished || !m_file.isOpen())
        return fail(
            QStringLiteral("%1: the download of %2 is already finished").arg(m_partialPath, m_sha256));
    if (!m_file.flush())
        return fail(
            QStringLiteral("%1: cannot write the download: %2; free disk space or lower the cache cap")
                .arg(m_partialPath, m_file.errorString()));
    // Bytes someone else wrote to partialPath() (libcurl with its own FILE*) are hashed here.
    const qint64 onDisk = QFileInfo(m_partialPath).size();
    if (onDisk > m_expectedSize)
        return fail(failAndDelete(
                        QStringLiteral("refusing file %1: %2 holds %3 bytes, but its manifest names %4; "
                                       "the coordinator's file differs from its manifest, so it was deleted")
                            .arg(m_sha256, m_partialPath)
                            .arg(onDisk)
                            .arg(m_expectedSize))
                        .error());
    if (onDisk > m_written) {
        if (!m_file.seek(m_written))
            return fail(
                QStringLiteral("%1: cannot read the download: %2").arg(m_partialPath, m_file.errorString()));
        QByteArray chunk;
        while (!(chunk = m_file.read(Sha256::kChunkSize)).isEmpty()) {
            m_hasher.addData(chunk);
            m_written += chunk.size();
        }
    }
    if (m_written < m_expectedSize)
        return fail(
            QStringLiteral("%1: the download of %2 is incomplete, %3 of %4 bytes; resume it from byte %3")
                .arg(m_partialPath, m_sha256)
                .arg(m_written)
                .arg(m_expectedSize));
    const QString actual = Sha256::toHex(m_hasher.result());
    if (actual != m_sha256) {
        const QString why =
            m_hasher.isValid() ? QString() : QStringLiteral(" (%1)").arg(m_hasher.errorString());
        return fail(
            failAndDelete(QStringLiteral("refusing file %1: its %2 bytes hash to %3%4; the coordinator's "
                                         "file differs from its manifest, so it was deleted; tell the "
                                         "coordinator's operator")
                              .arg(m_sha256)
                              .arg(m_written)
                              .arg(actual.isEmpty() ? QStringLiteral("nothing") : actual, why))
                .error());
    }
#ifdef Q_OS_UNIX
    // The file is named by its content from now on and startup does not re-hash it: its bytes must be on disk
    // before the rename is, or a power cut could leave a wrong file under a trusted name.
    if (::fsync(m_file.handle()) != 0)
        return fail(
            QStringLiteral("%1: cannot flush the download to disk; free disk space or lower the cache cap")
                .arg(m_partialPath));
#endif
    m_file.close();
    m_finished = true;
    auto result = m_cache->finishCommit(*this);
    release();
    return result;
}

void CacheWriter::discard()
{
    m_finished = true;
    m_file.close();
    QFile::remove(m_partialPath);
    release();
}

} // namespace gleaner::agent
