#include "ProcStat.h"

#include <QDir>
#include <QHash>

#include <fcntl.h>
#include <unistd.h>

#include <charconv>

namespace gleaner::agent {

namespace {

bool toInt(QByteArrayView field, qint64& out)
{
    const char* begin = field.data();
    const char* end = begin + field.size();
    const auto [ptr, ec] = std::from_chars(begin, end, out);
    return ec == std::errc() && ptr == end;
}

} // namespace

Result<ProcStat> parseProcStat(QByteArrayView line)
{
    const qsizetype open = line.indexOf('(');
    const qsizetype close = line.lastIndexOf(')');
    if (open < 1 || close < open)
        return fail(QStringLiteral("a /proc/<pid>/stat line has no \"(command)\" field: \"%1\"")
                        .arg(QString::fromUtf8(line.first(qMin<qsizetype>(80, line.size())))));
    ProcStat stat;
    if (!toInt(line.first(open).trimmed(), stat.pid))
        return fail(QStringLiteral("a /proc/<pid>/stat line does not start with a process id: \"%1\"")
                        .arg(QString::fromUtf8(line.first(qMin<qsizetype>(80, line.size())))));
    stat.comm = line.sliced(open + 1, close - open - 1).toByteArray();

    // After the name: state(3) ppid(4) pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime(14) stime(15) cutime(16) cstime(17) ... (field numbers of proc(5)).
    const QList<QByteArray> fields = line.sliced(close + 1).toByteArray().simplified().split(' ');
    if (fields.size() < 15)
        return fail(
            QStringLiteral("the /proc/%1/stat line has %2 fields after the command name, 15 or more expected")
                .arg(stat.pid)
                .arg(fields.size()));
    stat.state = fields[0].isEmpty() ? '?' : fields[0].at(0);
    if (!toInt(fields[1], stat.ppid) || !toInt(fields[11], stat.utime) || !toInt(fields[12], stat.stime) ||
        !toInt(fields[13], stat.cutime) || !toInt(fields[14], stat.cstime))
        return fail(
            QStringLiteral("the /proc/%1/stat line has a field that is not a number among ppid, utime, "
                           "stime, cutime, cstime")
                .arg(stat.pid));
    return stat;
}

QByteArray readKernelFile(const QString& path, qsizetype maxBytes)
{
    // Plain read(2): QFile would stat and buffer a file whose size the kernel reports as 0, for each of the
    // hundreds of processes a scan reads.
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return {};
    QByteArray data(maxBytes, Qt::Uninitialized);
    qsizetype filled = 0;
    while (filled < maxBytes) {
        const ssize_t n = ::read(fd, data.data() + filled, static_cast<size_t>(maxBytes - filled));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        filled += n;
    }
    ::close(fd);
    data.truncate(filled);
    return data;
}

QList<qint64> listPids(const QString& procRoot)
{
    QList<qint64> pids;
    const QStringList names = QDir(procRoot).entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::NoSort);
    for (const QString& name : names) {
        bool ok = false;
        const qint64 pid = name.toLongLong(&ok);
        if (ok && pid > 0)
            pids.append(pid);
    }
    return pids;
}

QList<ProcStat> readAllProcStats(const QString& procRoot)
{
    QList<ProcStat> processes;
    for (const qint64 pid : listPids(procRoot)) {
        const QByteArray line = readKernelFile(procRoot + QLatin1Char('/') + QString::number(pid) + u"/stat");
        if (line.isEmpty())
            continue; // exited between the listing and the read
        Result<ProcStat> stat = parseProcStat(line);
        if (stat.ok())
            processes.append(std::move(stat).value());
    }
    return processes;
}

QSet<qint64> processTree(qint64 root, const QList<ProcStat>& processes)
{
    QMultiHash<qint64, qint64> children;
    for (const ProcStat& p : processes)
        children.insert(p.ppid, p.pid);
    QSet<qint64> tree{root};
    QList<qint64> pending{root};
    while (!pending.isEmpty()) {
        const qint64 parent = pending.takeLast();
        for (auto it = children.constFind(parent); it != children.cend() && it.key() == parent; ++it) {
            if (!tree.contains(it.value())) { // a corrupt tree with a cycle must not loop forever
                tree.insert(it.value());
                pending.append(it.value());
            }
        }
    }
    return tree;
}

} // namespace gleaner::agent
