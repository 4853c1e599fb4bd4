#include "util/DirectoryLock.h"

#include <QFile>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace gleaner {

Result<DirectoryLock> DirectoryLock::acquire(const QString& dir, const QString& holder)
{
    const QByteArray path = QFile::encodeName(dir + QStringLiteral("/lock"));
    const int fd = ::open(path.constData(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(QStringLiteral("%1: cannot open the lock file: %2")
                        .arg(QString::fromLocal8Bit(path), QString::fromLocal8Bit(std::strerror(errno))));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd);
        return fail(QStringLiteral("another %1 is already running on %2; stop it first").arg(holder, dir));
    }
    return DirectoryLock(fd);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : m_fd(other.m_fd)
{
    other.m_fd = -1;
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept
{
    if (this != &other) {
        if (m_fd >= 0)
            ::close(m_fd);
        m_fd = other.m_fd;
        other.m_fd = -1;
    }
    return *this;
}

DirectoryLock::~DirectoryLock()
{
    if (m_fd >= 0)
        ::close(m_fd); // releases the flock
}

} // namespace gleaner
