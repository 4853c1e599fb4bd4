#include "XvfbServer.h"

#include <QDeadlineTimer>
#include <QStandardPaths>

#include <signal.h>

namespace gleaner::test {

QString XvfbServer::start()
{
    if (QStandardPaths::findExecutable(QStringLiteral("Xvfb")).isEmpty())
        return QStringLiteral("Xvfb is not installed: install the package xvfb to run the X11 idle tests");
    // -displayfd 1: Xvfb chooses a free display and writes its number to stdout once it accepts connections,
    // so there is neither a fixed display that a parallel test could hold nor a race on its socket.
    m_process.setProgram(QStringLiteral("Xvfb"));
    m_process.setArguments({QStringLiteral("-displayfd"), QStringLiteral("1"), QStringLiteral("-nolisten"),
                            QStringLiteral("tcp"), QStringLiteral("-screen"), QStringLiteral("0"),
                            QStringLiteral("640x480x24")});
    m_process.setProcessChannelMode(QProcess::SeparateChannels);
    m_process.setStandardErrorFile(QProcess::nullDevice());
    m_process.start();
    if (!m_process.waitForStarted(10'000))
        return QStringLiteral("Xvfb did not start: %1").arg(m_process.errorString());
    QByteArray number;
    const QDeadlineTimer deadline(15'000);
    while (!number.contains('\n') && !deadline.hasExpired() && m_process.state() == QProcess::Running) {
        m_process.waitForReadyRead(static_cast<int>(qMax<qint64>(1, deadline.remainingTime())));
        number += m_process.readAllStandardOutput();
    }
    if (!number.contains('\n')) {
        kill();
        return QStringLiteral("Xvfb did not report its display within 15 s");
    }
    m_display = u':' + QString::fromLatin1(number.trimmed());
    return {};
}

void XvfbServer::kill()
{
    if (m_process.state() == QProcess::NotRunning)
        return;
    ::kill(static_cast<pid_t>(m_process.processId()), SIGKILL);
    m_process.waitForFinished(10'000);
}

QString XvfbServer::xdotoolMissing()
{
    if (QStandardPaths::findExecutable(QStringLiteral("xdotool")).isEmpty())
        return QStringLiteral(
            "xdotool is not installed: install the package xdotool to run the X11 input test");
    return {};
}

bool XvfbServer::xdotool(const QStringList& args) const
{
    QProcess tool;
    QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
    environment.insert(QStringLiteral("DISPLAY"), m_display);
    tool.setProcessEnvironment(environment);
    tool.start(QStringLiteral("xdotool"), args);
    return tool.waitForFinished(10'000) && tool.exitStatus() == QProcess::NormalExit && tool.exitCode() == 0;
}

} // namespace gleaner::test
