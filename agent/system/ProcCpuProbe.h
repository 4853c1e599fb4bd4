#pragma once
// Other programs' CPU share from Linux's /proc: the busy time of all cores (/proc/stat) minus the time of the
// agent and all its descendants (/proc/<pid>/stat), between two samples, as a share of all cores' time.
//
// The agent's own time counts utime + stime + cutime + cstime of every process in its tree: a worker that
// exits between two samples moves its time into its parent's cutime/cstime, so the sum never drops and the
// worker's last seconds are not mistaken for another program's. A process reparented away from the tree (a
// daemonising grandchild) takes its time with it; the agent's workers do not do that.
//
// Cost of a sample: one read of /proc/stat and one of /proc/<pid>/stat per process of the machine (a few
// hundred small reads, about a millisecond or two), because the tree is found through the ppid fields.

#include "CpuProbe.h"

#include <QCoreApplication>
#include <QString>

#include <optional>

namespace gleaner::agent {

class ProcCpuProbe final : public CpuProbe
{
public:
    explicit ProcCpuProbe(QString procRoot = QStringLiteral("/proc"),
                          qint64 ownPid = QCoreApplication::applicationPid());
    CpuObservation sample() override;

private:
    struct Reading
    {
        qint64 total = 0; // all cores, all states
        qint64 busy = 0;  // all but idle and iowait
        qint64 ours = 0;  // our process tree
    };
    std::optional<Reading> read();

    QString m_root;
    qint64 m_ownPid;
    std::optional<Reading> m_last;
    CpuObservation m_lastObservation;
    bool m_warned = false;
};

} // namespace gleaner::agent
