#include "RedisServer.h"

#include "TestSupport.h"

#include <QDeadlineTimer>
#include <QDir>
#include <QFile>
#include <QStandardPaths>
#include <QTcpSocket>
#include <QUrl>
#include <QUuid>

#include <utility>

#include <signal.h>
#include <sys/prctl.h>

namespace gleaner::test {
namespace {

constexpr int kStartMs = 30'000;

QString serverProgram()
{
    return QStandardPaths::findExecutable(QStringLiteral("redis-server"),
                                          {QStringLiteral("/usr/bin"), QStringLiteral("/usr/local/bin")});
}

// Whether a Redis server answers PING on 127.0.0.1:port (after AUTH with `password`, when given).
bool answersPing(int port, const QByteArray& password)
{
    QTcpSocket socket;
    socket.connectToHost(QStringLiteral("127.0.0.1"), quint16(port));
    if (!socket.waitForConnected(1'000))
        return false;
    if (!password.isEmpty()) {
        socket.write("AUTH " + password + "\r\n");
        QByteArray answer;
        while (!answer.contains('\n') && socket.waitForReadyRead(1'000))
            answer += socket.readAll();
        if (!answer.startsWith("+OK"))
            return false;
    }
    socket.write("PING\r\n");
    if (!socket.waitForBytesWritten(1'000))
        return false;
    QByteArray answer;
    while (!answer.contains('\n') && socket.waitForReadyRead(1'000))
        answer += socket.readAll();
    return answer.startsWith("+PONG");
}

} // namespace

QString RedisServer::missing()
{
    if (serverProgram().isEmpty())
        return QStringLiteral("Redis is not installed (no redis-server): install the package redis-server "
                              "(./test.sh does) to run the Redis tests");
    return {};
}

QString RedisServer::logTail() const
{
    QFile log(m_dir ? m_dir->filePath(QStringLiteral("redis.log")) : QString());
    if (!log.open(QIODevice::ReadOnly))
        return {};
    const QStringList lines = QString::fromUtf8(log.readAll()).trimmed().split(u'\n');
    return lines.mid(qMax(0, int(lines.size()) - 15)).join(u'\n');
}

QString RedisServer::start(bool appendOnly, bool password)
{
    if (const QString why = missing(); !why.isEmpty())
        return why;
    m_dir = std::make_unique<QTemporaryDir>(QDir::tempPath() + QStringLiteral("/gleaner-redis-XXXXXX"));
    if (!m_dir->isValid())
        return QStringLiteral("cannot create a folder for Redis under %1").arg(QDir::tempPath());
    QStringList arguments;
    m_password.clear();
    m_passwordFile.clear();
    if (password) {
        // As local-redis.sh does it: the password in a file of its own, and to the server through a
        // configuration file rather than the command line.
        m_password = QUuid::createUuid().toByteArray(QUuid::Id128);
        m_passwordFile = m_dir->filePath(QStringLiteral("password"));
        const QString config = m_dir->filePath(QStringLiteral("redis.conf"));
        for (const auto& [path, bytes] : {std::pair<QString, QByteArray>{m_passwordFile, m_password + '\n'},
                                          std::pair<QString, QByteArray>{config, "requirepass " + m_password + '\n'}}) {
            QFile file(path);
            if (!file.open(QIODevice::WriteOnly) ||
                !file.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner) ||
                file.write(bytes) != bytes.size())
                return QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
        }
        arguments << config;
    }
    for (int attempt = 1;; ++attempt) {
        m_port = freeLoopbackPort();
        // Nothing of the machine's /etc/redis: everything on the command line, the password in our own file.
        m_server.setProgram(serverProgram());
        m_server.setArguments(arguments + QStringList{QStringLiteral("--port"), QString::number(m_port), QStringLiteral("--bind"),
                               QStringLiteral("127.0.0.1"), QStringLiteral("--dir"), m_dir->path(),
                               QStringLiteral("--save"), QString(), QStringLiteral("--appendonly"),
                               appendOnly ? QStringLiteral("yes") : QStringLiteral("no"),
                               QStringLiteral("--logfile"), m_dir->filePath(QStringLiteral("redis.log")),
                               QStringLiteral("--daemonize"), QStringLiteral("no"),
                               QStringLiteral("--protected-mode"), QStringLiteral("yes")});
        m_server.setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGKILL); });
        m_server.setProcessChannelMode(QProcess::MergedChannels);
        m_server.start();
        if (!m_server.waitForStarted(10'000))
            return QStringLiteral("redis-server did not start: %1").arg(m_server.errorString());
        bool exited = false;
        const QString why = waitUntilReady(&exited);
        if (why.isEmpty())
            return {};
        if (exited && attempt < 3 && why.contains(u"Address already in use"))
            continue; // another process took the port in the meantime
        stop();
        return why;
    }
}

QString RedisServer::waitUntilReady(bool* exited)
{
    const QDeadlineTimer deadline(kStartMs);
    *exited = false;
    while (!deadline.hasExpired()) {
        if (answersPing(m_port, m_password))
            return {};
        if (m_server.waitForFinished(100)) {
            *exited = true;
            break;
        }
    }
    return QStringLiteral("Redis %1:\n%2")
        .arg(*exited ? QStringLiteral("stopped while starting")
                     : QStringLiteral("did not answer within %1 s").arg(kStartMs / 1000),
             logTail() + QString::fromUtf8(m_server.readAll()));
}

void RedisServer::halt()
{
    if (m_server.state() == QProcess::NotRunning)
        return;
    ::kill(static_cast<pid_t>(m_server.processId()), SIGKILL);
    m_server.waitForFinished(5'000);
}

QString RedisServer::resume()
{
    if (!m_dir)
        return QStringLiteral("the server was never started");
    m_server.start(); // the same program, port, folder and settings
    if (!m_server.waitForStarted(10'000))
        return QStringLiteral("redis-server did not start again: %1").arg(m_server.errorString());
    bool exited = false;
    return waitUntilReady(&exited);
}

QString RedisServer::url(int database) const
{
    if (m_passwordFile.isEmpty())
        return urlWithoutPassword(database);
    // Joined, not .arg()'d: the encoded path may hold %-sequences of its own.
    return urlWithoutPassword(database) + QStringLiteral("?password_file=") +
           QString::fromLatin1(QUrl::toPercentEncoding(m_passwordFile, "/"));
}

QString RedisServer::urlWithoutPassword(int database) const
{
    return QStringLiteral("redis://127.0.0.1:%1/%2").arg(m_port).arg(database);
}

void RedisServer::stop()
{
    if (m_server.state() != QProcess::NotRunning) {
        const auto pid = static_cast<pid_t>(m_server.processId());
        ::kill(pid, SIGTERM);
        if (!m_server.waitForFinished(10'000)) {
            ::kill(pid, SIGKILL);
            m_server.waitForFinished(5'000);
        }
    }
    m_dir.reset();
}

} // namespace gleaner::test
