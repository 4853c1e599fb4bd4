// A test helper for test_workersandbox: applies the worker's sandbox to itself, as gleaner-worker does before it
// reads its task folder, then tries what a hostile model would try and prints what the kernel answered, as one
// JSON object: {"report": {the "sandbox" event}, "NAME": errno (0: allowed), ...}; what is tried in a child
// process (what the seccomp filter answers by killing) is its exit status, or minus the signal that killed it.
// It is the test-only stand-in for a model that would call what no TorchScript operator can: gleaner-worker
// itself has no such hook.
//   sandbox_probe TASK_DIR FORBIDDEN_FILE TCP_PORT UNIX_SOCKET [MAX_MEMORY_MB]
#include "worker/WorkerSandbox.h"

#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

using namespace gleaner::agent;

namespace {

int openErrno(const QByteArray& path, int flags)
{
    const int fd = ::open(path.constData(), flags | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    ::close(fd);
    return 0;
}

int listErrno(const QByteArray& path)
{
    DIR* dir = ::opendir(path.constData());
    if (!dir)
        return errno;
    ::closedir(dir);
    return 0;
}

int connectErrno(int port)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(quint16(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int result = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
    const int error = result == 0 ? 0 : errno;
    ::close(fd);
    return error;
}

// Runs `attempt` in a child: its exit status (what it returns: an errno, 0 for allowed), or minus the signal that
// killed it (SIGSYS: the seccomp filter).
int inChild(const std::function<int()>& attempt)
{
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child == 0)
        ::_exit(attempt() & 0xff);
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

int execErrno()
{
    char* const argv[] = {const_cast<char*>("true"), nullptr};
    ::execv("/bin/true", argv);
    return errno;
}

// A Unix socket made before the sandbox (as an inherited one would be), connected after it.
int unixConnectErrno(int fd, const QByteArray& path)
{
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.constData(), sizeof(address.sun_path) - 1);
    return ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ? 0 : errno;
}

// Allocates and touches `bytes`; 0 when it got them, ENOMEM when the kernel refused.
int allocateErrno(qint64 bytes)
{
    void* memory = std::malloc(size_t(bytes));
    if (!memory)
        return ENOMEM;
    std::memset(memory, 1, size_t(bytes));
    std::free(memory);
    return 0;
}

QString namespaceOf(const char* path)
{
    char link[64] = {};
    return ::readlink(path, link, sizeof(link) - 1) > 0 ? QString::fromLatin1(link) : QString();
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: sandbox_probe TASK_DIR FORBIDDEN_FILE TCP_PORT UNIX_SOCKET [MAX_MEMORY_MB]\n");
        return 2;
    }
    const QByteArray task = argv[1];
    const QByteArray forbidden = argv[2];
    const int port = std::atoi(argv[3]);
    const QByteArray unixSocket = argv[4];
    const qint64 maxMemoryMb = argc == 6 ? std::atoll(argv[5]) : 0;
    const QString networkBefore = namespaceOf("/proc/self/ns/net");
    const int heldSocket = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SandboxLimits limits;
    limits.maxMemoryBytes = maxMemoryMb * 1024 * 1024;
    limits.stackAllowanceBytes = SandboxLimits::stackAllowance(1);
    const SandboxReport report =
        WorkerSandbox::apply(SandboxRules::forWorker(QString::fromLocal8Bit(task), false), limits);

    rlimit core{};
    ::getrlimit(RLIMIT_CORE, &core);
    const QByteArray input = task + QByteArrayLiteral("/input.txt");
    const QByteArray output = task + QByteArrayLiteral("/output.txt");
    const QByteArray renamed = task + QByteArrayLiteral("/renamed.txt");
    const QByteArray beside = task + QByteArrayLiteral("-beside.txt");
    // In this order: the file written is renamed, then removed.
    const int writeTask = openErrno(output, O_WRONLY | O_CREAT | O_TRUNC);
    const int renameInTask = ::rename(output.constData(), renamed.constData()) == 0 ? 0 : errno;
    const int removeInTask = ::unlink(renamed.constData()) == 0 ? 0 : errno;
    QJsonObject out;
    out.insert(QStringLiteral("report"), report.toEvent());
    out.insert(QStringLiteral("read_forbidden"), openErrno(forbidden, O_RDONLY));
    out.insert(QStringLiteral("list_forbidden_folder"), listErrno(forbidden.left(forbidden.lastIndexOf('/'))));
    out.insert(QStringLiteral("read_task"), openErrno(input, O_RDONLY));
    out.insert(QStringLiteral("write_task"), writeTask);
    // Left in place: its owner tells whether the user namespace kept the user's ids.
    out.insert(QStringLiteral("write_kept"), openErrno(task + QByteArrayLiteral("/kept.txt"), O_WRONLY | O_CREAT));
    out.insert(QStringLiteral("rename_in_task"), renameInTask);
    out.insert(QStringLiteral("remove_in_task"), removeInTask);
    out.insert(QStringLiteral("write_beside_task"), openErrno(beside, O_WRONLY | O_CREAT | O_TRUNC));
    out.insert(QStringLiteral("read_library"), openErrno(QByteArrayLiteral("/etc/ld.so.cache"), O_RDONLY));
    out.insert(QStringLiteral("read_cpu_count"), openErrno(QByteArrayLiteral("/sys/devices/system/cpu/online"), O_RDONLY));
    out.insert(QStringLiteral("read_passwd"), openErrno(QByteArrayLiteral("/etc/passwd"), O_RDONLY));
    out.insert(QStringLiteral("write_dev_null"), openErrno(QByteArrayLiteral("/dev/null"), O_WRONLY));
    out.insert(QStringLiteral("tcp_connect"), connectErrno(port));
    out.insert(QStringLiteral("exec"), inChild(execErrno));
    out.insert(QStringLiteral("unix_socket"), ::socket(AF_UNIX, SOCK_STREAM, 0) >= 0 ? 0 : errno);
    out.insert(QStringLiteral("socketpair"), [] {
        int pair[2];
        return ::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0 ? 0 : errno;
    }());
    out.insert(QStringLiteral("unix_connect"), unixConnectErrno(heldSocket, unixSocket));
    out.insert(QStringLiteral("ptrace"), inChild([] { return ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == 0 ? 0 : errno; }));
    out.insert(QStringLiteral("unshare_user"), inChild([] { return ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno; }));
    out.insert(QStringLiteral("clone3"), ::syscall(SYS_clone3, nullptr, 0) == 0 ? 0 : errno);
    out.insert(QStringLiteral("personality"), inChild([] { return ::syscall(SYS_personality, 0x0040000) >= 0 ? 0 : errno; }));
    // getpid by x32's number, and by i386's through int 0x80: another architecture's call is killed.
    out.insert(QStringLiteral("x32_syscall"), inChild([] { return ::syscall(0x40000000 | SYS_getpid) >= 0 ? 0 : errno; }));
#if defined(__x86_64__)
    out.insert(QStringLiteral("i386_syscall"), inChild([] {
        long result = 20; // i386's getpid
        asm volatile("int $0x80" : "+a"(result) : : "memory");
        return result >= 0 ? 0 : int(-result);
    }));
#endif
    // What must keep working under the filter: a thread (clone without namespace flags) and a pipe.
    out.insert(QStringLiteral("thread"), [] {
        bool ran = false;
        std::thread([&ran] { ran = true; }).join();
        return ran ? 0 : 1;
    }());
    out.insert(QStringLiteral("network_namespace_changed"), namespaceOf("/proc/self/ns/net") != networkBefore);
    if (maxMemoryMb > 0) {
        out.insert(QStringLiteral("allocate_half_cap"), allocateErrno(maxMemoryMb * 1024 * 1024 / 2));
        // Twice the cap: past the cap and the allowance for one thread's stacks (48 MiB) alike.
        out.insert(QStringLiteral("allocate_over_cap"), allocateErrno(maxMemoryMb * 1024 * 1024 * 2));
    }
    out.insert(QStringLiteral("signal_parent"), ::kill(::getppid(), 0) == 0 ? 0 : errno);
    out.insert(QStringLiteral("core_limit"), qint64(core.rlim_cur));
    out.insert(QStringLiteral("dumpable"), ::prctl(PR_GET_DUMPABLE));
    const QByteArray line = QJsonDocument(out).toJson(QJsonDocument::Compact);
    std::fwrite(line.constData(), 1, size_t(line.size()), stdout);
    std::fputc('\n', stdout);
    return 0;
}
