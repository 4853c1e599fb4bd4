// A test helper for test_workersandbox: applies the worker's sandbox to itself, as gleaner-worker does before it
// reads its task folder, then tries what a hostile model would try and prints what the kernel answered, as one
// JSON object: {"report": {the "sandbox" event}, "NAME": errno (0: allowed), ...}.
//   sandbox_probe TASK_DIR FORBIDDEN_FILE TCP_PORT
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
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Runs /bin/true in a child; its errno when execve failed, 0 when it ran.
int execErrno()
{
    const pid_t child = ::fork();
    if (child == 0) {
        char* const argv[] = {const_cast<char*>("true"), nullptr};
        ::execv("/bin/true", argv);
        ::_exit(100 + errno);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) >= 100 ? WEXITSTATUS(status) - 100 : 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 4) {
        std::fprintf(stderr, "usage: sandbox_probe TASK_DIR FORBIDDEN_FILE TCP_PORT\n");
        return 2;
    }
    const QByteArray task = argv[1];
    const QByteArray forbidden = argv[2];
    const int port = std::atoi(argv[3]);
    const SandboxReport report = WorkerSandbox::apply(SandboxRules::forWorker(QString::fromLocal8Bit(task), false));

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
    out.insert(QStringLiteral("rename_in_task"), renameInTask);
    out.insert(QStringLiteral("remove_in_task"), removeInTask);
    out.insert(QStringLiteral("write_beside_task"), openErrno(beside, O_WRONLY | O_CREAT | O_TRUNC));
    out.insert(QStringLiteral("read_library"), openErrno(QByteArrayLiteral("/etc/ld.so.cache"), O_RDONLY));
    out.insert(QStringLiteral("read_cpu_count"), openErrno(QByteArrayLiteral("/sys/devices/system/cpu/online"), O_RDONLY));
    out.insert(QStringLiteral("read_passwd"), openErrno(QByteArrayLiteral("/etc/passwd"), O_RDONLY));
    out.insert(QStringLiteral("write_dev_null"), openErrno(QByteArrayLiteral("/dev/null"), O_WRONLY));
    out.insert(QStringLiteral("tcp_connect"), connectErrno(port));
    out.insert(QStringLiteral("exec"), execErrno());
    out.insert(QStringLiteral("signal_parent"), ::kill(::getppid(), 0) == 0 ? 0 : errno);
    out.insert(QStringLiteral("core_limit"), qint64(core.rlim_cur));
    out.insert(QStringLiteral("dumpable"), ::prctl(PR_GET_DUMPABLE));
    const QByteArray line = QJsonDocument(out).toJson(QJsonDocument::Compact);
    std::fwrite(line.constData(), 1, size_t(line.size()), stdout);
    std::fputc('\n', stdout);
    return 0;
}
