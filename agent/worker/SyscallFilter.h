#pragma once
// The worker's seccomp filter: the last layer of its sandbox (WorkerSandbox), installed after Landlock and
// before any thread starts, so every thread of the worker carries it. Landlock bounds the files a hostile
// model (or an exploit of libtorch's interpreter) could reach; this bounds the system calls it could make, on
// kernels whose Landlock cannot refuse sockets (before ABI 4, Debian 12's 6.1 among them).
//
// Everything is allowed but what training never does:
//   - the network: socket, socketpair, connect, bind, listen, accept, accept4, sendto, sendmsg, sendmmsg fail
//     with EPERM rather than killing the worker, because glibc probes a Unix socket on its own (the name
//     service cache behind getpwuid, syslog) and carries on when refused; refused, no socket ever exists to
//     use;
//   - what would leave or widen the sandbox, or attack the kernel or another process, kills the worker
//     (SIGSYS): ptrace, process_vm_readv/writev, pidfd_getfd, process_madvise, execve, execveat, bpf,
//     perf_event_open, userfaultfd, keyctl, add_key, request_key, mount and the new mount API, umount2,
//     pivot_root, chroot, unshare, setns, clone with a namespace flag, kexec_load, kexec_file_load,
//     init_module, finit_module, delete_module, io_uring_setup/enter/register, personality other than the
//     query glibc makes;
//   - clone3 fails with ENOSYS: its flags lie in memory the filter cannot read, and glibc then uses clone,
//     whose flags it can;
//   - a system call of another architecture (i386's int 0x80, x32's numbers) kills the worker: the rules
//   above
//     name x86-64's numbers, and the same call by another number would pass them.

#include <QString>
#include <QStringList>

namespace gleaner::agent {

class SyscallFilter
{
public:
    // Installs the filter on the calling thread (and the threads it starts); empty on success, else what
    // failed and why. Needs no_new_privs or CAP_SYS_ADMIN. Irreversible.
    static QString install();
    // The system calls refused with EPERM, and those that kill the worker, for the report and the docs.
    static QStringList refused();
    static QStringList killing();
};

} // namespace gleaner::agent
