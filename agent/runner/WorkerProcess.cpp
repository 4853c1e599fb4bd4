#include "runner/WorkerProcess.h"

#include <QFile>
#include <QJsonDocument>
#include <QLoggingCategory>

#include <algorithm>
#include <csignal>
#include <unistd.h>

namespace gleaner::agent {
namespace {

Q_LOGGING_CATEGORY(lcWorker, "gleaner.agent.worker")

constexpr int kMemoryCheckMs = 500;
constexpr qsizetype kStderrTailLines = 20;
constexpr qsizetype kMaxLine = 1 << 20;

QString megabytes(qint64 bytes)
{
    return QStringLiteral("%1 MB").arg(double(bytes) / (1024.0 * 1024.0), 0, 'f', 0);
}

} // namespace

WorkerProcess::WorkerProcess(WorkerLaunch launch, QObject* parent)
    : QObject(parent), m_launch(std::move(launch))
{
    m_process.setProgram(m_launch.program);
    m_process.setArguments(arguments(m_launch));
    m_process.setProcessChannelMode(QProcess::SeparateChannels);
    connect(&m_process, &QProcess::readyReadStandardOutput, this, &WorkerProcess::readEvents);
    connect(&m_process, &QProcess::readyReadStandardError, this, &WorkerProcess::readErrors);
    connect(&m_process, &QProcess::finished, this, &WorkerProcess::onFinished);
    connect(&m_process, &QProcess::errorOccurred, this, &WorkerProcess::onError);
    m_memoryTimer.setInterval(kMemoryCheckMs);
    connect(&m_memoryTimer, &QTimer::timeout, this, &WorkerProcess::checkMemory);
}

WorkerProcess::~WorkerProcess()
{
    // The owner decides when a worker ends; one still running here is killed rather than left behind, and its
    // checkpoint stays for the next start.
    if (m_process.state() != QProcess::NotRunning) {
        m_ended = true;
        m_process.kill();
        m_process.waitForFinished(2000);
    }
}

QStringList WorkerProcess::arguments(const WorkerLaunch& launch)
{
    QStringList args{QStringLiteral("--task"), launch.taskDir};
    if (launch.threads > 0)
        args << QStringLiteral("--threads") << QString::number(launch.threads);
    args << QStringLiteral("--cpu-share") << QString::number(launch.cpuShare)
         << QStringLiteral("--checkpoint-interval") << QString::number(launch.checkpointIntervalSeconds)
         << QStringLiteral("--device") << launch.device;
    if (launch.kernelMemoryCapBytes > 0) // whole MiB, rounded up so that the kernel's cap never undercuts ours
        args << QStringLiteral("--max-memory-mb")
             << QString::number((launch.kernelMemoryCapBytes + (1 << 20) - 1) / (1 << 20));
    if (launch.allowUnconfinedModels)
        args << QStringLiteral("--allow-unconfined-models");
    return args;
}

QString WorkerProcess::kernelCapReason(qint64 capBytes)
{
    return QStringLiteral("the worker exceeded its memory cap of %1 MB: the kernel refused it more memory; use a "
                          "smaller model or batch size, or raise the memory limit (memory_idle_mb)")
        .arg((capBytes + (1 << 20) - 1) / (1 << 20));
}

qint64 WorkerProcess::residentBytesOf(qint64 pid)
{
    QFile statm(QStringLiteral("/proc/%1/statm").arg(pid));
    if (!statm.open(QIODevice::ReadOnly))
        return -1;
    const QList<QByteArray> fields = statm.readLine().simplified().split(' ');
    if (fields.size() < 2)
        return -1;
    bool ok = false;
    const qint64 pages = fields[1].toLongLong(&ok);
    return ok ? pages * qint64(sysconf(_SC_PAGESIZE)) : -1;
}

void WorkerProcess::start()
{
    qCInfo(lcWorker).noquote() << "starting" << m_launch.program << arguments(m_launch).join(u' ');
    m_process.start(QIODevice::ReadWrite);
    if (m_launch.memoryCapBytes > 0)
        m_memoryTimer.start();
}

void WorkerProcess::setMemoryCap(qint64 bytes)
{
    m_launch.memoryCapBytes = std::max<qint64>(0, bytes);
    if (m_launch.memoryCapBytes > 0 && running() && !m_memoryTimer.isActive())
        m_memoryTimer.start();
}

void WorkerProcess::send(const QByteArray& command)
{
    // Written while the process is still starting too: QProcess holds it until the pipe is open, so a `pause`
    // sent right after start() is not lost.
    if (m_process.state() != QProcess::NotRunning)
        m_process.write(command + '\n');
}

void WorkerProcess::kill()
{
    if (m_process.state() != QProcess::NotRunning)
        m_process.kill();
}

void WorkerProcess::readEvents()
{
    m_stdoutBuffer += m_process.readAllStandardOutput();
    for (qsizetype newline; (newline = m_stdoutBuffer.indexOf('\n')) >= 0;) {
        const QByteArray line = m_stdoutBuffer.left(newline).trimmed();
        m_stdoutBuffer.remove(0, newline + 1);
        if (line.isEmpty())
            continue;
        const QJsonObject object = QJsonDocument::fromJson(line).object();
        if (object.isEmpty()) {
            qCWarning(lcWorker).noquote()
                << "not an event from the worker:" << QString::fromUtf8(line.left(200));
            continue;
        }
        if (object.value(QStringLiteral("event")).toString() == u"error") {
            m_errorEvent = object.value(QStringLiteral("message")).toString();
            m_memoryCapHit = object.value(QStringLiteral("memory_cap")).toBool();
        }
        Q_EMIT event(object);
    }
    if (m_stdoutBuffer.size() > kMaxLine)
        m_stdoutBuffer.clear(); // a runaway line: the worker is broken; its exit says so
}

void WorkerProcess::readErrors()
{
    m_stderrBuffer += m_process.readAllStandardError();
    for (qsizetype newline; (newline = m_stderrBuffer.indexOf('\n')) >= 0;) {
        const QString line = QString::fromUtf8(m_stderrBuffer.left(newline)).trimmed();
        m_stderrBuffer.remove(0, newline + 1);
        if (line.isEmpty())
            continue;
        qCInfo(lcWorker).noquote() << "worker" << m_process.processId() << ":" << line;
        m_stderrTail.append(line);
        if (m_stderrTail.size() > kStderrTailLines)
            m_stderrTail.removeFirst();
    }
    if (m_stderrBuffer.size() > kMaxLine)
        m_stderrBuffer.clear();
}

void WorkerProcess::checkMemory()
{
    const qint64 pid = m_process.processId();
    if (pid <= 0)
        return;
    const qint64 rss = residentBytesOf(pid);
    if (rss < 0)
        return;
    m_rss = rss;
    if (m_launch.memoryCapBytes > 0 && rss > m_launch.memoryCapBytes && m_overMemory.isEmpty()) {
        m_overMemory = QStringLiteral("the worker used %1 of memory, over the cap of %2; it was stopped")
                           .arg(megabytes(rss), megabytes(m_launch.memoryCapBytes));
        qCWarning(lcWorker).noquote() << m_overMemory;
        m_process.kill();
    }
}

void WorkerProcess::onFinished(int exitCode, QProcess::ExitStatus status)
{
    m_memoryTimer.stop();
    readEvents();
    readErrors();
    if (m_ended)
        return;
    m_ended = true;
    WorkerEnd end;
    end.exitCode = exitCode;
    // An allocation refused under the kernel's cap ends the worker with an error event that says so, or, where
    // it failed outside libtorch (a thread's stack, Qt), with a crash whose last words name the failure.
    const QString lastWords = m_stderrTail.isEmpty() ? QString() : m_stderrTail.last();
    const bool allocationFailed = lastWords.contains(u"bad_alloc") || lastWords.contains(u"Cannot allocate memory") ||
                                  lastWords.contains(u"Thread creation failed");
    const bool kernelCap = m_launch.kernelMemoryCapBytes > 0 && (status == QProcess::CrashExit || exitCode != 0) &&
                           (m_memoryCapHit || (m_errorEvent.isEmpty() && allocationFailed));
    if (!m_overMemory.isEmpty()) {
        end.kind = WorkerEnd::Kind::OverMemory;
        end.reason = m_overMemory;
    } else if (kernelCap) {
        end.kind = WorkerEnd::Kind::OverMemory;
        end.reason = kernelCapReason(m_launch.kernelMemoryCapBytes);
        qCWarning(lcWorker).noquote() << end.reason << "(" << (m_errorEvent.isEmpty() ? lastWords : m_errorEvent)
                                      << ")";
    } else if (status == QProcess::CrashExit) {
        end.kind = WorkerEnd::Kind::Crashed;
        end.reason = QStringLiteral("the worker crashed (%1)").arg(m_process.errorString());
        if (!m_stderrTail.isEmpty())
            end.reason += QStringLiteral("; its last words: ") + m_stderrTail.last();
    } else if (exitCode == 0) {
        end.kind = WorkerEnd::Kind::Done;
    } else if (exitCode == 3) {
        end.kind = WorkerEnd::Kind::Stopped;
    } else if (exitCode == 4) {
        end.kind = WorkerEnd::Kind::Cancelled;
    } else {
        end.kind = exitCode == 1 ? WorkerEnd::Kind::Failed : WorkerEnd::Kind::Crashed;
        end.reason =
            !m_errorEvent.isEmpty() ? m_errorEvent
            : !m_stderrTail.isEmpty()
                ? QStringLiteral("the worker exited with code %1: %2").arg(exitCode).arg(m_stderrTail.last())
                : QStringLiteral("the worker exited with code %1").arg(exitCode);
    }
    Q_EMIT ended(end);
}

void WorkerProcess::onError(QProcess::ProcessError error)
{
    if (error != QProcess::FailedToStart || m_ended)
        return;
    m_ended = true;
    m_memoryTimer.stop();
    WorkerEnd end;
    end.kind = WorkerEnd::Kind::NotStarted;
    end.reason = QStringLiteral("cannot start the worker %1: %2; reinstall Gleaner or pass --worker")
                     .arg(m_launch.program, m_process.errorString());
    Q_EMIT ended(end);
}

} // namespace gleaner::agent
