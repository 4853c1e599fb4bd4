#include "ProcessProbe.h"

#include <QDir>
#include <QFile>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gleaner::e2e {
namespace {

QByteArray readProcFile(qint64 pid, const char* name)
{
    QFile file(QStringLiteral("/proc/%1/%2").arg(pid).arg(QLatin1StringView(name)));
    // /proc files report size 0: read until the end rather than by size.
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

// The fields of /proc/PID/stat after the command name, which may itself hold spaces and parentheses.
QList<QByteArray> statFields(qint64 pid)
{
    const QByteArray stat = readProcFile(pid, "stat");
    const qsizetype close = stat.lastIndexOf(')');
    if (close < 0)
        return {};
    return stat.mid(close + 2).trimmed().split(' ');
}

qint64 statusKb(const QByteArray& status, const QByteArray& key)
{
    const QByteArray prefix = key + ':';
    for (const QByteArray& line : status.split('\n'))
        if (line.startsWith(prefix))
            return line.mid(prefix.size()).trimmed().split(' ').value(0).toLongLong();
    return 0;
}

} // namespace

quint16 freeLoopbackPort()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    quint16 port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
        port = ntohs(address.sin_port);
    ::close(fd);
    return port;
}

bool processAlive(qint64 pid)
{
    if (pid <= 0)
        return false;
    const QList<QByteArray> fields = statFields(pid);
    return !fields.isEmpty() && fields.first() != "Z" && fields.first() != "X";
}

QList<std::pair<qint64, QString>> workersUnder(const QString& tasksDir)
{
    const QByteArray prefix = QFile::encodeName(QDir(tasksDir).absolutePath()) + '/';
    QList<std::pair<qint64, QString>> workers;
    const QStringList entries = QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    for (const QString& entry : entries) {
        bool isPid = false;
        const qint64 pid = entry.toLongLong(&isPid);
        if (!isPid)
            continue;
        const QList<QByteArray> argv = readProcFile(pid, "cmdline").split('\0');
        if (argv.isEmpty() || !argv.first().endsWith("gleaner-worker"))
            continue;
        const qsizetype task = argv.indexOf("--task");
        if (task >= 0 && argv.value(task + 1).startsWith(prefix) && processAlive(pid))
            workers.append({pid, QFile::decodeName(argv.value(task + 1))});
    }
    return workers;
}

QList<qint64> workerPidsUnder(const QString& tasksDir)
{
    QList<qint64> pids;
    for (const auto& [pid, task] : workersUnder(tasksDir))
        pids.append(pid);
    return pids;
}

std::optional<ProcessSample> sampleProcess(qint64 pid)
{
    const QByteArray status = readProcFile(pid, "status");
    const QList<QByteArray> fields = statFields(pid);
    // After the name: state is field 3 of stat, utime and stime fields 14 and 15, so 11 and 12 here.
    if (status.isEmpty() || fields.size() < 13)
        return std::nullopt;
    ProcessSample sample;
    sample.rssKb = statusKb(status, "VmRSS");
    sample.hwmKb = statusKb(status, "VmHWM");
    sample.cpuTicks = fields.at(11).toLongLong() + fields.at(12).toLongLong();
    return sample;
}

qint64 clockTicksPerSecond()
{
    return qint64(::sysconf(_SC_CLK_TCK));
}

} // namespace gleaner::e2e
