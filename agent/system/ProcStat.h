#pragma once
// One process as /proc/<pid>/stat describes it (proc(5)), shared by the CPU and the process probes. The
// command name sits in parentheses and may itself hold spaces, parentheses and even newlines ("(my (odd)
// prog)"), so the parser takes what lies between the first '(' and the LAST ')' and counts the other fields
// from there: splitting the line on spaces, as many scripts do, shifts every field after an odd name.

#include "Result.h"

#include <QByteArray>
#include <QList>
#include <QSet>
#include <QString>

namespace gleaner::agent {

struct ProcStat
{
    qint64 pid = 0;
    QByteArray comm; // the kernel's name of the process: at most 15 bytes, truncated, not the full path
    char state = '?';
    qint64 ppid = 0;
    // Clock ticks (USER_HZ, as in /proc/stat). cutime/cstime hold the children this process has waited for.
    qint64 utime = 0;
    qint64 stime = 0;
    qint64 cutime = 0;
    qint64 cstime = 0;

    // The process's own time plus that of its reaped children: it only grows, even when a child exits.
    qint64 treeTicks() const { return utime + stime + cutime + cstime; }
};

Result<ProcStat> parseProcStat(QByteArrayView line);

// A small file of /proc or /sys read whole (they report size 0, so QFile::size() cannot be trusted), at most
// maxBytes; empty when it cannot be read (a process that exited meanwhile).
QByteArray readKernelFile(const QString& path, qsizetype maxBytes = 4096);

// The numeric directories of a /proc tree: one per process.
QList<qint64> listPids(const QString& procRoot);

// Every process of the tree whose stat file reads and parses; a process that exits during the scan is
// skipped.
QList<ProcStat> readAllProcStats(const QString& procRoot);

// `root` and all the processes that descend from it, found through the ppid fields of a scan.
QSet<qint64> processTree(qint64 root, const QList<ProcStat>& processes);

} // namespace gleaner::agent
