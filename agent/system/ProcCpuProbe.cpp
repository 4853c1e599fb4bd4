#include "ProcCpuProbe.h"

#include "ProcStat.h"

#include <QLoggingCategory>

#include <utility>

namespace gleaner::agent {

namespace {
Q_LOGGING_CATEGORY(lcCpu, "gleaner.agent.system")
}

ProcCpuProbe::ProcCpuProbe(QString procRoot, qint64 ownPid) : m_root(std::move(procRoot)), m_ownPid(ownPid) {}

std::optional<ProcCpuProbe::Reading> ProcCpuProbe::read()
{
    const QString statPath = m_root + u"/stat";
    const QByteArray stat = readKernelFile(statPath, 1024);
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice": guest time is already inside
    // user and nice, so it is not added again. Kernels before 2.6.33 stop earlier; missing fields count as 0.
    const QList<QByteArray> fields = stat.left(stat.indexOf('\n')).simplified().split(' ');
    if (fields.size() < 5 || fields[0] != "cpu") {
        if (!m_warned)
            qCWarning(lcCpu).noquote()
                << QStringLiteral("%1 has no \"cpu\" summary line, so other programs' CPU "
                                  "use is unknown; is /proc mounted?")
                       .arg(statPath);
        m_warned = true;
        return std::nullopt;
    }
    qint64 values[8] = {};
    for (int i = 0; i < 8 && i + 1 < fields.size(); ++i)
        values[i] = fields[i + 1].toLongLong();
    Reading r;
    for (const qint64 v : values)
        r.total += v;
    r.busy = r.total - values[3] - values[4];

    const QList<ProcStat> processes = readAllProcStats(m_root);
    const QSet<qint64> ours = processTree(m_ownPid, processes);
    for (const ProcStat& p : processes) {
        if (ours.contains(p.pid))
            r.ours += p.treeTicks();
    }
    return r;
}

CpuObservation ProcCpuProbe::sample()
{
    const std::optional<Reading> now = read();
    if (!now) {
        m_last.reset();
        m_lastObservation = {};
        return {};
    }
    if (!m_last) {
        m_last = now;
        return {};
    }
    const qint64 totalDelta = now->total - m_last->total;
    if (totalDelta <= 0)
        return m_lastObservation; // called again within one clock tick: nothing new to say
    const qint64 busyDelta = now->busy - m_last->busy;
    // Our tree's delta can exceed the machine's by a tick or two: the readings are not taken at one instant.
    const qint64 oursDelta = now->ours - m_last->ours;
    m_last = now;
    m_lastObservation.known = true;
    m_lastObservation.otherPercent = qBound(
        0.0, 100.0 * static_cast<double>(busyDelta - oursDelta) / static_cast<double>(totalDelta), 100.0);
    return m_lastObservation;
}

} // namespace gleaner::agent
