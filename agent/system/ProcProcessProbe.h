#pragma once
// Running programs from Linux's /proc. A name matches a process, case-insensitively, when it equals
//  - its kernel name (comm, from /proc/<pid>/stat, the same text as /proc/<pid>/comm): the kernel cuts it to
//  15
//    bytes, so a longer name matches on its first 15 characters ("gnome-disk-utility" runs as
//    "gnome-disk-util");
//  - the last component of argv[0] (/proc/<pid>/cmdline), split on '/' and on '\' so that a Wine program's
//    "C:\Program Files\Steam\steam.exe" gives "steam.exe";
//  - either of those without a ".exe" suffix, so "steam" also finds the Windows Steam running under Wine.
// The agent's own process and its descendants (the workers) are skipped: a pause list naming "gleaner-worker"
// must not stop the agent because of itself.
//
// Cost of a call: two small reads per process of the machine (stat and cmdline), a few milliseconds; the
// daemon need not call it more than every few seconds.

#include "ProcessProbe.h"

#include <QCoreApplication>
#include <QString>

namespace gleaner::agent {

class ProcProcessProbe final : public ProcessProbe
{
public:
    explicit ProcProcessProbe(QString procRoot = QStringLiteral("/proc"),
                              qint64 ownPid = QCoreApplication::applicationPid());
    QStringList running(const QStringList& names) override;

    // Whether a pause-list name matches a process with this comm and argv[0]; public for the tests' tables.
    static bool matches(const QString& name, const QString& comm, const QString& argv0);

private:
    QString m_root;
    qint64 m_ownPid;
};

} // namespace gleaner::agent
