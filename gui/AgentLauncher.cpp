#include "AgentLauncher.h"

#include "GuiLogging.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>

#include <cerrno>
#include <csignal>

namespace gleaner::gui {

namespace {
constexpr qint64 kLogRotateBytes = 1 << 20;
}

AgentLauncher::~AgentLauncher() = default;

ProcessAgentLauncher::ProcessAgentLauncher(QString program) : m_program(std::move(program)) {}

Result<QString> ProcessAgentLauncher::findAgentProgram()
{
    const QString besideUs = QCoreApplication::applicationDirPath() + QStringLiteral("/gleaner-agent");
    if (QFileInfo(besideUs).isExecutable())
        return besideUs;
    const QString inPath = QStandardPaths::findExecutable(QStringLiteral("gleaner-agent"));
    if (!inPath.isEmpty())
        return inPath;
    return fail(
        QStringLiteral("the gleaner-agent program is neither next to gleaner (in %1) nor in PATH; install "
                       "the Gleaner agent, or add its folder to PATH")
            .arg(QDir::toNativeSeparators(QCoreApplication::applicationDirPath())));
}

QString ProcessAgentLauncher::logPath(const QString& dataDir)
{
    return QDir(dataDir).filePath(QStringLiteral("agent.log"));
}

QString ProcessAgentLauncher::lastLogLine(const QString& dataDir)
{
    QFile log(logPath(dataDir));
    if (!log.open(QIODevice::ReadOnly))
        return {};
    // The tail is enough: a daemon that could not start wrote its reason last.
    if (log.size() > 16384)
        log.seek(log.size() - 16384);
    const QList<QByteArray> lines = log.readAll().split('\n');
    for (auto it = lines.crbegin(); it != lines.crend(); ++it) {
        if (it->startsWith("==="))
            return {}; // the latest start's marker: nothing written since
        if (!it->trimmed().isEmpty())
            return QString::fromUtf8(it->trimmed());
    }
    return {};
}

Status ProcessAgentLauncher::start(const QString& dataDir)
{
    QString program = m_program;
    if (program.isEmpty()) {
        auto found = findAgentProgram();
        if (!found)
            return fail(found.error());
        program = *found;
    }
    if (!QFileInfo(dataDir).isDir())
        return fail(
            QStringLiteral("the agent's folder %1 does not exist; enroll this computer first").arg(dataDir));

    // A marker line, so the log shows where each start's output begins.
    const QString log = logPath(dataDir);
    // The agent's output is appended across starts; past 1 MiB the old part moves to agent.log.1, so the file
    // never grows without bound on a machine that runs for years.
    if (QFileInfo(log).size() > kLogRotateBytes) {
        QFile::remove(log + QStringLiteral(".1"));
        QFile::rename(log, log + QStringLiteral(".1"));
    }
    QFile marker(log);
    if (!marker.open(QIODevice::Append | QIODevice::Text))
        return fail(QStringLiteral("cannot write the agent's log %1: %2; check the folder's permissions")
                        .arg(log, marker.errorString()));
    marker.write(QStringLiteral("=== %1: gleaner starts %2 run --data-dir %3\n")
                     .arg(QDateTime::currentDateTime().toString(Qt::ISODate), program, dataDir)
                     .toUtf8());
    marker.close();

    QProcess process;
    process.setProgram(program);
    process.setArguments({QStringLiteral("run"), QStringLiteral("--data-dir"), dataDir});
    process.setWorkingDirectory(dataDir);
    process.setStandardInputFile(QProcess::nullDevice());
    process.setStandardOutputFile(log, QIODevice::Append);
    process.setStandardErrorFile(log, QIODevice::Append);
    qint64 pid = 0;
    if (!process.startDetached(&pid))
        return fail(QStringLiteral("could not run %1: %2").arg(program, process.errorString()));
    qCInfo(lcGui) << "started" << program << "for" << dataDir << "as pid" << pid;
    m_pid = pid;
    return {};
}

bool ProcessAgentLauncher::hasExited() const
{
    if (m_pid <= 0)
        return false;
    // Detached, the agent is not our child: init reaps it, and then its pid is gone ...
    if (::kill(pid_t(m_pid), 0) != 0)
        return errno == ESRCH;
    // ... or, in a container whose first process does not reap, it lingers as a zombie.
    QFile stat(QStringLiteral("/proc/%1/stat").arg(m_pid));
    if (!stat.open(QIODevice::ReadOnly))
        return false;
    const QByteArray line = stat.readAll();
    const qsizetype end = line.lastIndexOf(") ");
    return end > 0 && end + 2 < line.size() && (line.at(end + 2) == 'Z' || line.at(end + 2) == 'X');
}

} // namespace gleaner::gui
