#include "worker/SyscallFilter.h"

#include <cerrno>
#include <cstring>

#ifdef __linux__
#include <sched.h>
#include <seccomp.h>
#endif

namespace gleaner::agent {
namespace {

// Refused with EPERM (SyscallFilter.h says why not killed).
constexpr const char* kRefused[] = {"socket", "socketpair", "connect", "bind",    "listen",
                                    "accept", "accept4",    "sendto",  "sendmsg", "sendmmsg"};

// Killing the process: nothing an honest training run calls once the sandbox is in place.
// clang-format off
constexpr const char* kKilling[] = {
    // another process's memory, or its descriptors
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise",
    // another program, which Landlock already refuses to run
    "execve", "execveat",
    // the kernel's larger attack surfaces that training never touches
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    // the file system's and the namespaces' shape: a way around Landlock and out of the network namespace
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "mount_setattr", "unshare", "setns",
    // the kernel itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"};
// clang-format on

#ifdef __linux__

// The namespace flags of clone(2): a new namespace is a way out of the sandbox's own (the network's).
constexpr unsigned long kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWNET,   CLONE_NEWPID,
                                             CLONE_NEWIPC, CLONE_NEWUTS,  CLONE_NEWCGROUP};
// personality(0xffffffff) only reads the persona; glibc asks it. Any other value changes it
// (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...).
constexpr unsigned long kPersonalityQuery = 0xffffffffUL;

QString failed(const char* what, int result)
{
    return QStringLiteral("%1 failed (%2)")
        .arg(QLatin1String(what), QString::fromLocal8Bit(std::strerror(-result)));
}

// Adds `action` for `name`; a name this libseccomp does not know is skipped: the kernel it was built for has
// no such call either.
int addRule(scmp_filter_ctx filter, std::uint32_t action, const char* name)
{
    const int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR)
        return 0;
    return seccomp_rule_add(filter, action, number, 0);
}

QString build(scmp_filter_ctx filter)
{
    // A call by another architecture's number kills; libseccomp also refuses x32's numbers on x86-64 when
    // x32 is not among the filter's architectures, which it is not.
    if (const int rc = seccomp_attr_set(filter, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0)
        return failed("seccomp_attr_set(SCMP_FLTATR_ACT_BADARCH)", rc);
    for (const char* name : kRefused)
        if (const int rc = addRule(filter, SCMP_ACT_ERRNO(EPERM), name); rc != 0)
            return failed(name, rc);
    for (const char* name : kKilling)
        if (const int rc = addRule(filter, SCMP_ACT_KILL_PROCESS, name); rc != 0)
            return failed(name, rc);
    for (const unsigned long flag : kNamespaceFlags)
        if (const int rc = seccomp_rule_add(filter, SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1,
                                            SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
            rc != 0)
            return failed("clone", rc);
    if (const int rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0)
        return failed("clone3", rc);
    if (const int rc = seccomp_rule_add(filter, SCMP_ACT_KILL_PROCESS, SCMP_SYS(personality), 1,
                                        SCMP_A0(SCMP_CMP_NE, kPersonalityQuery));
        rc != 0)
        return failed("personality", rc);
    if (const int rc = seccomp_load(filter); rc != 0)
        return failed("seccomp_load", rc);
    return {};
}

#endif // __linux__

QStringList names(const auto& list)
{
    QStringList out;
    for (const char* name : list)
        out << QLatin1String(name);
    return out;
}

} // namespace

QStringList SyscallFilter::refused()
{
    return names(kRefused);
}

QStringList SyscallFilter::killing()
{
    QStringList out = names(kKilling);
    out << QStringLiteral("clone (new namespaces)") << QStringLiteral("personality (changes)");
    return out;
}

QString SyscallFilter::install()
{
#ifdef __linux__
    const scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
    if (!filter)
        return QStringLiteral("seccomp_init failed: libseccomp does not know this architecture");
    QString problem = build(filter);
    seccomp_release(filter);
    if (problem.contains(QLatin1String("seccomp_load")) &&
        problem.contains(QLatin1String("Invalid argument")))
        problem += QStringLiteral("; this kernel lacks seccomp filters (CONFIG_SECCOMP_FILTER)");
    return problem;
#else
    return QStringLiteral("seccomp exists only on Linux");
#endif
}

} // namespace gleaner::agent
