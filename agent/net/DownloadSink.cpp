#include "DownloadSink.h"

namespace gleaner::agent {

namespace {

// "bytes FIRST-LAST/SIZE" -> FIRST; -1 when it does not parse.
qint64 contentRangeStart(const QByteArray& value)
{
    const QByteArray v = value.trimmed();
    if (!v.startsWith("bytes "))
        return -1;
    const qsizetype dash = v.indexOf('-');
    if (dash < 0)
        return -1;
    bool ok = false;
    const qint64 first = v.mid(6, dash - 6).trimmed().toLongLong(&ok);
    return ok ? first : -1;
}

} // namespace

DownloadSink::DownloadSink(QString path, qint64 resumeFrom, qint64 maxBytes)
    : m_file(std::move(path)), m_resumeFrom(resumeFrom), m_maxBytes(maxBytes)
{
}

Status DownloadSink::refuseOversized(qint64 bytes)
{
    m_oversized = true;
    m_file.close();
    QFile::remove(m_file.fileName());
    return fail(QStringLiteral("the server sent more than the %1 bytes the file may have (at least %2); the partial "
                               "file %3 was deleted")
                    .arg(m_maxBytes)
                    .arg(bytes)
                    .arg(m_file.fileName()));
}

Result<bool> DownloadSink::begin(int status, const HttpHeaderList& headers)
{
    if (status != 200 && status != 206)
        return false;
    m_position = status == 206 ? m_resumeFrom : 0;
    // An honest Content-Length over the limit is refused before a byte is written; a body without one, or
    // with a false one, meets the same limit in write().
    if (m_maxBytes >= 0) {
        for (const auto& [key, value] : headers) {
            bool ok = false;
            const qint64 length = value.trimmed().toLongLong(&ok);
            if (key.compare("Content-Length", Qt::CaseInsensitive) == 0 && ok && length > m_maxBytes - m_position)
                return fail(refuseOversized(m_position + length).error());
        }
    }
    if (status == 206) {
        QByteArray range;
        for (const auto& [key, value] : headers)
            if (key.compare("Content-Range", Qt::CaseInsensitive) == 0)
                range = value;
        const qint64 first = contentRangeStart(range);
        if (first != m_resumeFrom)
            return fail(QStringLiteral("the server sent part of the file from byte %1 (Content-Range \"%2\") but "
                                       "%3 bytes were already held")
                            .arg(first)
                            .arg(QString::fromLatin1(range))
                            .arg(m_resumeFrom));
        if (!m_file.open(QIODevice::ReadWrite))
            return fail(QStringLiteral("cannot open %1 to resume the download: %2")
                            .arg(m_file.fileName(), m_file.errorString()));
        // The bytes after the resume point are what the server is about to send; a longer file (a write that
        // went further than the size we read) would otherwise leave stale bytes behind.
        if (m_file.size() < m_resumeFrom || !m_file.resize(m_resumeFrom) || !m_file.seek(m_resumeFrom)) {
            m_file.close();
            return fail(QStringLiteral("cannot resume %1 at byte %2: the partial file changed under the download")
                            .arg(m_file.fileName())
                            .arg(m_resumeFrom));
        }
        return true;
    }
    if (!m_file.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return fail(QStringLiteral("cannot write %1: %2").arg(m_file.fileName(), m_file.errorString()));
    return true;
}

Status DownloadSink::write(const char* data, qint64 size)
{
    if (m_maxBytes >= 0 && size > m_maxBytes - m_position)
        return refuseOversized(m_position + size);
    if (m_file.write(data, size) != size)
        return fail(QStringLiteral("cannot write %1: %2").arg(m_file.fileName(), m_file.errorString()));
    m_position += size;
    return {};
}

Status DownloadSink::finish()
{
    if (!m_file.isOpen())
        return {};
    const bool flushed = m_file.flush();
    const QString error = m_file.errorString();
    m_file.close();
    if (!flushed)
        return fail(QStringLiteral("cannot write %1: %2").arg(m_file.fileName(), error));
    return {};
}

} // namespace gleaner::agent
