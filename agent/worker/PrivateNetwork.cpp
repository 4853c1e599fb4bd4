#include "worker/PrivateNetwork.h"

#include <cerrno>
#include <cstring>

#ifdef __linux__
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
#endif

namespace gleaner::agent {
namespace {

QString errnoText(int error)
{
    return QString::fromLocal8Bit(std::strerror(error));
}

#ifdef __linux__

// Writes `text` to /proc/self/`file`; 0 or the errno.
int writeProcSelf(const char* file, const QByteArray& text)
{
    const QByteArray path = QByteArrayLiteral("/proc/self/") + file;
    const int fd = ::open(path.constData(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    const ssize_t written = ::write(fd, text.constData(), size_t(text.size()));
    const int error = written == text.size() ? 0 : (written < 0 ? errno : EIO);
    ::close(fd);
    return error;
}

#endif // __linux__

} // namespace

QString PrivateNetwork::refusedReason(int error)
{
    switch (error) {
    case EPERM:
    case EACCES:
        return QStringLiteral("user namespaces are not allowed to this user (%1); on Debian allow them with "
                              "`sysctl kernel.unprivileged_userns_clone=1`, elsewhere check "
                              "user.max_user_namespaces and any AppArmor or SELinux rule on user namespaces")
            .arg(errnoText(error));
    case ENOSPC:
    case EUSERS:
        return QStringLiteral("no user namespace is left to this user (%1); raise the sysctl "
                              "user.max_user_namespaces")
            .arg(errnoText(error));
    case EINVAL:
        return QStringLiteral(
                   "the kernel refused a user namespace (%1): the process has threads or runs in a "
                   "chroot")
            .arg(errnoText(error));
    case ENOSYS:
        return QStringLiteral(
            "this kernel has no user or network namespaces (CONFIG_USER_NS, CONFIG_NET_NS)");
    default:
        return QStringLiteral("unshare failed (%1)").arg(errnoText(error));
    }
}

PrivateNetwork::Outcome PrivateNetwork::enter()
{
    Outcome outcome;
#ifdef __linux__
    // Root may have a network namespace without a user namespace; in a container without CAP_SYS_ADMIN it may
    // not, and tries the way everyone else goes.
    if (::geteuid() == 0 && ::unshare(CLONE_NEWNET) == 0) {
        outcome.entered = true;
        return outcome;
    }
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
        outcome.reason = refusedReason(errno);
        return outcome;
    }
    outcome.entered = true;
    outcome.userNamespace = true;
    // Without the maps the worker would be nobody inside and could not create its result; setgroups must be
    // denied before an unprivileged process may write its gid_map.
    const int setgroups = writeProcSelf("setgroups", "deny");
    const int uidMap =
        writeProcSelf("uid_map", QByteArray::number(uid) + ' ' + QByteArray::number(uid) + " 1");
    const int gidMap =
        writeProcSelf("gid_map", QByteArray::number(gid) + ' ' + QByteArray::number(gid) + " 1");
    if (uidMap != 0 || gidMap != 0)
        outcome.reason =
            QStringLiteral("the user namespace has no id map (uid_map: %1, gid_map: %2, setgroups: "
                           "%3): files written in the task folder may fail")
                .arg(errnoText(uidMap), errnoText(gidMap), errnoText(setgroups));
#else
    outcome.reason = QStringLiteral("network namespaces exist only on Linux");
#endif
    return outcome;
}

} // namespace gleaner::agent
