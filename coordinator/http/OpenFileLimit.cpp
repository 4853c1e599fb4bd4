#include "http/OpenFileLimit.h"

#include <QFile>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/resource.h>

namespace gleaner::coordinator {
namespace {

QString lastError()
{
    return QString::fromLocal8Bit(std::strerror(errno));
}

// Linux refuses a soft limit above fs.nr_open even when the hard limit says "unlimited".
quint64 kernelCeiling()
{
    QFile file(QStringLiteral("/proc/sys/fs/nr_open"));
    bool ok = false;
    quint64 ceiling = 0;
    if (file.open(QIODevice::ReadOnly))
        ceiling = file.readAll().trimmed().toULongLong(&ok);
    return ok && ceiling > 0 ? ceiling : 1u << 20;
}

} // namespace

Result<OpenFileLimit> raiseOpenFileLimit()
{
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return fail(QStringLiteral("cannot read the open-file limit (RLIMIT_NOFILE): %1").arg(lastError()));
    OpenFileLimit result;
    result.previous = limit.rlim_cur;
    const rlim_t target = limit.rlim_max == RLIM_INFINITY ? rlim_t(kernelCeiling()) : limit.rlim_max;
    if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < target) {
        rlimit raised = limit;
        raised.rlim_cur = target;
        if (::setrlimit(RLIMIT_NOFILE, &raised) != 0)
            return fail(QStringLiteral("cannot raise the open-file limit (RLIMIT_NOFILE) from %1 to %2: %3")
                            .arg(quint64(limit.rlim_cur))
                            .arg(quint64(target))
                            .arg(lastError()));
        limit.rlim_cur = target;
    }
    result.soft = limit.rlim_cur == RLIM_INFINITY ? kernelCeiling() : quint64(limit.rlim_cur);
    result.hard = limit.rlim_max == RLIM_INFINITY ? kernelCeiling() : quint64(limit.rlim_max);
    return result;
}

int connectionsThatFit(quint64 openFiles, int wanted)
{
    if (openFiles <= kFilesBesidesConnections + 2)
        return 1;
    const quint64 fit = (openFiles - kFilesBesidesConnections) / 2;
    return int(std::clamp<quint64>(fit, 1, quint64(std::max(1, wanted))));
}

} // namespace gleaner::coordinator
