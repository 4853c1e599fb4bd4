#include "worker/ProcessPriority.h"

#include <cerrno>
#include <cstring>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gleaner::agent {
namespace {

// From linux/ioprio.h, which glibc does not wrap.
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioClassIdle = 3;
constexpr int kIoprioClassShift = 13;

QString lastError(const char* what)
{
    return QStringLiteral("%1: %2").arg(QString::fromLatin1(what), QString::fromLocal8Bit(std::strerror(errno)));
}

} // namespace

QStringList lowerProcessPriority()
{
    QStringList problems;
    if (::setpriority(PRIO_PROCESS, 0, 19) != 0)
        problems << lastError("nice 19");
#ifdef SCHED_IDLE
    sched_param param{};
    if (::sched_setscheduler(0, SCHED_IDLE, &param) != 0)
        problems << lastError("SCHED_IDLE");
#endif
#ifdef SYS_ioprio_set
    if (::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, kIoprioClassIdle << kIoprioClassShift) != 0)
        problems << lastError("idle I/O priority");
#endif
    return problems;
}

} // namespace gleaner::agent
