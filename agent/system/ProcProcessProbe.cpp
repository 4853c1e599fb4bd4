#include "ProcProcessProbe.h"

#include "ProcStat.h"

#include <utility>

namespace gleaner::agent {

namespace {

constexpr qsizetype kCommLength = 15; // TASK_COMM_LEN - 1

bool sameName(QStringView candidate, QStringView name)
{
    if (candidate.compare(name, Qt::CaseInsensitive) == 0)
        return true;
    return candidate.endsWith(u".exe", Qt::CaseInsensitive) &&
           candidate.chopped(4).compare(name, Qt::CaseInsensitive) == 0;
}

QString lastPathComponent(const QString& path)
{
    const qsizetype slash = qMax(path.lastIndexOf(u'/'), path.lastIndexOf(u'\\'));
    return path.mid(slash + 1);
}

} // namespace

ProcProcessProbe::ProcProcessProbe(QString procRoot, qint64 ownPid)
    : m_root(std::move(procRoot)), m_ownPid(ownPid)
{
}

bool ProcProcessProbe::matches(const QString& name, const QString& comm, const QString& argv0)
{
    const QString wanted = name.trimmed();
    if (wanted.isEmpty())
        return false;
    if (!comm.isEmpty()) {
        if (sameName(comm, wanted))
            return true;
        // The kernel name is the first 15 bytes of the executable's name, ".exe" included for Wine programs.
        if (comm.size() == kCommLength) {
            if (wanted.size() > kCommLength &&
                comm.compare(wanted.left(kCommLength), Qt::CaseInsensitive) == 0)
                return true;
            const QString withExe = wanted + u".exe";
            if (withExe.size() > kCommLength &&
                comm.compare(withExe.left(kCommLength), Qt::CaseInsensitive) == 0)
                return true;
        }
    }
    return !argv0.isEmpty() && sameName(lastPathComponent(argv0), wanted);
}

QStringList ProcProcessProbe::running(const QStringList& names)
{
    QStringList found;
    if (names.isEmpty())
        return found;
    const QList<ProcStat> processes = readAllProcStats(m_root);
    const QSet<qint64> ours = processTree(m_ownPid, processes);
    for (const ProcStat& p : processes) {
        if (ours.contains(p.pid))
            continue;
        const QString comm = QString::fromUtf8(p.comm);
        // argv[0] ends at the first NUL; kernel threads have an empty cmdline and only their comm.
        const QByteArray cmdline =
            readKernelFile(m_root + QLatin1Char('/') + QString::number(p.pid) + u"/cmdline", 4096);
        const QString argv0 = QString::fromUtf8(cmdline.left(cmdline.indexOf('\0')));
        for (const QString& name : names) {
            if (!found.contains(name) && matches(name, comm, argv0))
                found.append(name);
        }
        if (found.size() == names.size())
            break;
    }
    // The order of the preference, not of the process table.
    QStringList ordered;
    for (const QString& name : names) {
        if (found.contains(name) && !ordered.contains(name))
            ordered.append(name);
    }
    return ordered;
}

} // namespace gleaner::agent
