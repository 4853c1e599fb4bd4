#include "crypto/SecureFile.h"

#include <QFile>
#include <QFileInfo>
#include <QScopeGuard>

#include <openssl/crypto.h>

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gleaner {
namespace {

QString errnoText(int error)
{
    return qt_error_string(error);
}

QString octal(unsigned mode)
{
    return QString::number(mode & 07777, 8).rightJustified(4, u'0');
}

// The file descriptor and temporary file of one write(); whatever happens, neither outlives the call.
class TempFile
{
public:
    explicit TempFile(QByteArray pathTemplate) : m_path(std::move(pathTemplate)) {}
    ~TempFile()
    {
        if (m_fd >= 0)
            ::close(m_fd);
        if (!m_renamed && m_created)
            ::unlink(m_path.constData());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    bool create()
    {
        m_fd = ::mkostemp(m_path.data(), O_CLOEXEC);
        m_created = m_fd >= 0;
        return m_created;
    }
    int fd() const { return m_fd; }
    const QByteArray& path() const { return m_path; }
    bool closeFile()
    {
        const int fd = m_fd;
        m_fd = -1;
        return ::close(fd) == 0;
    }
    void markRenamed() { m_renamed = true; }

private:
    QByteArray m_path;
    int m_fd = -1;
    bool m_created = false;
    bool m_renamed = false;
};

bool writeAll(int fd, QByteArrayView bytes)
{
    qsizetype done = 0;
    while (done < bytes.size()) {
        const ssize_t written = ::write(fd, bytes.data() + done, size_t(bytes.size() - done));
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        done += qsizetype(written);
    }
    return true;
}

} // namespace

void SecureFile::wipe(QByteArray& bytes)
{
    if (!bytes.isEmpty())
        OPENSSL_cleanse(bytes.data(), size_t(bytes.size()));
    bytes.clear();
}

Status SecureFile::write(const QString& path, QByteArrayView bytes, int mode, const QString& what)
{
    const QFileInfo info(path);
    if (info.isSymLink())
        return fail(
            QStringLiteral("%1 is a symbolic link; a %2 is never written through one. Remove the link "
                           "or give the real path")
                .arg(path, what));
    const QString folder = info.absolutePath();
    // Same folder, so the final rename() is atomic (one file system) and replaces the directory entry.
    TempFile temp(QFile::encodeName(folder) + "/." + QFile::encodeName(info.fileName()) + ".tmp-XXXXXX");
    if (!temp.create())
        return fail(QStringLiteral("cannot create a temporary file in %1 to write the %2 %3: %4")
                        .arg(folder, what, path, errnoText(errno)));
    // mkostemp() creates 0600 and a umask could take bits away; set exactly `mode` before the first byte.
    if (::fchmod(temp.fd(), mode_t(mode)) != 0)
        return fail(QStringLiteral("cannot set the permissions of the %1 %2 to %3: %4")
                        .arg(what, path, octal(unsigned(mode)), errnoText(errno)));
    if (!writeAll(temp.fd(), bytes))
        return fail(QStringLiteral("cannot write the %1 %2: %3").arg(what, path, errnoText(errno)));
    // Flushed before the rename: otherwise a power cut could leave `path` naming an empty file.
    if (::fsync(temp.fd()) != 0 || !temp.closeFile())
        return fail(QStringLiteral("cannot flush the %1 %2 to disk: %3").arg(what, path, errnoText(errno)));
    if (::rename(temp.path().constData(), QFile::encodeName(info.absoluteFilePath()).constData()) != 0)
        return fail(
            QStringLiteral("cannot move the new %1 into place at %2: %3").arg(what, path, errnoText(errno)));
    temp.markRenamed();

    // Makes the rename itself durable; a failure here loses nothing already written, so it is not an error.
    const int folderFd = ::open(QFile::encodeName(folder).constData(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (folderFd >= 0) {
        ::fsync(folderFd);
        ::close(folderFd);
    }
    return {};
}

Result<QByteArray> SecureFile::read(const QString& path, const QString& what, qsizetype maxSize,
                                    int forbiddenModeBits, const QString& exposure)
{
    const QByteArray nativePath = QFile::encodeName(path);
    // O_NONBLOCK: opening a FIFO by mistake must not hang; it is refused below as not a regular file.
    const int fd = ::open(nativePath.constData(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return fail(QStringLiteral("cannot open the %1 %2: %3").arg(what, path, errnoText(errno)));
    const auto closeFd = qScopeGuard([fd] { ::close(fd); });

    // fstat on the open descriptor, so the mode checked is the mode of the file actually read.
    struct stat info = {};
    if (::fstat(fd, &info) != 0)
        return fail(QStringLiteral("cannot inspect the %1 %2: %3").arg(what, path, errnoText(errno)));
    if (!S_ISREG(info.st_mode))
        return fail(QStringLiteral("the %1 %2 is not a regular file").arg(what, path));
    if ((info.st_mode & mode_t(forbiddenModeBits)) != 0)
        return fail(QStringLiteral("the %1 %2 is open to other users (mode %3); %4. Run `chmod 600 %2` and "
                                   "try again")
                        .arg(what, path, octal(unsigned(info.st_mode)),
                             exposure.isEmpty() ? QStringLiteral("it must stay private") : exposure));
    if (info.st_size > maxSize)
        return fail(
            QStringLiteral("the %1 %2 is %3 bytes, more than the %4 expected. Is this the right file?")
                .arg(what, path, QString::number(qint64(info.st_size)), QString::number(maxSize)));

    // One byte more than the size: a file that grew since fstat() is read up to the cap, no further.
    QByteArray bytes(qsizetype(info.st_size) + 1, Qt::Uninitialized);
    qsizetype length = 0;
    while (length < bytes.size()) {
        const ssize_t count = ::read(fd, bytes.data() + length, size_t(bytes.size() - length));
        if (count < 0 && errno == EINTR)
            continue;
        if (count < 0) {
            const int error = errno;
            wipe(bytes);
            return fail(QStringLiteral("cannot read the %1 %2: %3").arg(what, path, errnoText(error)));
        }
        if (count == 0)
            break;
        length += qsizetype(count);
    }
    // Shrinking keeps the same buffer, so no unwiped copy of a secret is left behind by a reallocation.
    bytes.truncate(length);
    return bytes;
}

} // namespace gleaner
