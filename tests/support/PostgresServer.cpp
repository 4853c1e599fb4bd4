#include "PostgresServer.h"

#include "TestSupport.h"

#include <QDeadlineTimer>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcessEnvironment>
#include <QUrl>
#include <QUuid>

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <utility>

namespace gleaner::test {
namespace {

const QString kBin = QStringLiteral("/usr/lib/postgresql/15/bin/");
constexpr int kStartMs = 60'000;

struct Account
{
    uid_t uid;
    gid_t gid;
};

// Who runs initdb and postgres: the `postgres` user when we are root (they refuse root), else ourselves.
std::optional<Account> serverAccount()
{
    if (::geteuid() != 0)
        return std::nullopt;
    const passwd* user = ::getpwnam("postgres");
    if (!user)
        return std::nullopt;
    return Account{user->pw_uid, user->pw_gid};
}

QString lastLines(const QByteArray& text, int count)
{
    QStringList lines = QString::fromUtf8(text).trimmed().split(u'\n');
    return lines.mid(qMax(0, int(lines.size()) - count)).join(u'\n');
}

} // namespace

QString PostgresServer::missing()
{
    for (const char* program : {"initdb", "postgres", "pg_isready", "createdb"})
        if (!QFileInfo(kBin + QLatin1StringView(program)).isExecutable())
            return QStringLiteral(
                       "PostgreSQL 15 is not installed (no %1%2): install the package postgresql-15 "
                       "(./test.sh does) to run the PostgreSQL tests")
                .arg(kBin, QLatin1StringView(program));
    if (::geteuid() == 0 && !serverAccount())
        return QStringLiteral(
            "the test runs as root, which PostgreSQL refuses, and there is no postgres user "
            "to run it as: install the package postgresql-15, which creates that user");
    return {};
}

void PostgresServer::prepare(QProcess& process) const
{
    process.setWorkingDirectory(m_dir->path()); // postgres's user may not enter ours
    const std::optional<Account> account = serverAccount();
    process.setChildProcessModifier([account] {
        if (account &&
            (::setgroups(0, nullptr) != 0 || ::setgid(account->gid) != 0 || ::setuid(account->uid) != 0))
            ::_exit(126);
        // After setuid, which clears it: a test that dies does not leave its server running.
        ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
    });
}

QString PostgresServer::run(const QString& program, const QStringList& arguments, int timeoutMs)
{
    QProcess process;
    prepare(process);
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(kBin + program, arguments);
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished(5'000);
        return QStringLiteral("%1 did not finish within %2 s").arg(program).arg(timeoutMs / 1000);
    }
    if (process.exitStatus() != QProcess::NormalExit || process.exitCode() != 0)
        return QStringLiteral("%1 failed (exit code %2): %3")
            .arg(program)
            .arg(process.exitCode())
            .arg(lastLines(process.readAll(), 10));
    return {};
}

QString PostgresServer::logFile() const
{
    return m_dir ? m_dir->filePath(QStringLiteral("postgres.log")) : QString();
}

QString PostgresServer::logTail() const
{
    QFile log(logFile());
    return log.open(QIODevice::ReadOnly) ? lastLines(log.readAll(), 15) : QString();
}

QString PostgresServer::start(bool password)
{
    if (const QString why = missing(); !why.isEmpty())
        return why;
    m_dir = std::make_unique<QTemporaryDir>(QDir::tempPath() + QStringLiteral("/gleaner-pg-XXXXXX"));
    if (!m_dir->isValid())
        return QStringLiteral("cannot create a folder for PostgreSQL under %1").arg(QDir::tempPath());
    if (const auto account = serverAccount();
        account && ::chown(QFile::encodeName(m_dir->path()).constData(), account->uid, account->gid) != 0)
        return QStringLiteral("cannot hand %1 to the postgres user").arg(m_dir->path());
    const QString data = m_dir->filePath(QStringLiteral("data"));
    QStringList initdb{QStringLiteral("-D"), data, QStringLiteral("-U"), user(), QStringLiteral("--auth=trust"),
                       QStringLiteral("--encoding=UTF8"), QStringLiteral("--no-locale"),
                       QStringLiteral("--no-sync"), QStringLiteral("--no-instructions")};
    m_passfile.clear();
    QString pwfile;
    if (password) {
        // The password for initdb (read as the server's user) and the same in libpq's format for clients.
        const QByteArray secret = QUuid::createUuid().toByteArray(QUuid::Id128);
        pwfile = m_dir->filePath(QStringLiteral("superuser.password"));
        m_passfile = m_dir->filePath(QStringLiteral("gleaner.pgpass"));
        for (const auto& [path, bytes] : {std::pair<QString, QByteArray>{pwfile, secret + '\n'},
                                          std::pair<QString, QByteArray>{m_passfile, "*:*:*:" + user().toUtf8() + ':' + secret + '\n'}}) {
            QFile file(path);
            if (!file.open(QIODevice::WriteOnly) ||
                !file.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner) ||
                file.write(bytes) != bytes.size())
                return QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
        }
        if (const auto account = serverAccount();
            account && ::chown(QFile::encodeName(pwfile).constData(), account->uid, account->gid) != 0)
            return QStringLiteral("cannot hand %1 to the postgres user").arg(pwfile);
        initdb[4] = QStringLiteral("--auth=scram-sha-256");
        initdb << QStringLiteral("--pwfile=") + pwfile;
    }
    const QString initialised = run(QStringLiteral("initdb"), initdb, 120'000);
    if (!pwfile.isEmpty())
        QFile::remove(pwfile);
    if (!initialised.isEmpty())
        return initialised;

    for (int attempt = 1;; ++attempt) {
        m_port = freeLoopbackPort();
        // A throwaway cluster: nothing in it needs to survive a power cut.
        m_server.setProgram(kBin + QStringLiteral("postgres"));
        m_server.setArguments({QStringLiteral("-D"), data, QStringLiteral("-p"), QString::number(m_port),
                               QStringLiteral("-k"), m_dir->path(), QStringLiteral("-c"),
                               QStringLiteral("listen_addresses=127.0.0.1"), QStringLiteral("-c"),
                               QStringLiteral("fsync=off"), QStringLiteral("-c"),
                               QStringLiteral("synchronous_commit=off"), QStringLiteral("-c"),
                               QStringLiteral("full_page_writes=off")});
        prepare(m_server);
        m_server.setProcessChannelMode(QProcess::MergedChannels);
        m_server.setStandardOutputFile(logFile(), QIODevice::Append);
        m_server.start();
        if (!m_server.waitForStarted(10'000))
            return QStringLiteral("postgres did not start: %1").arg(m_server.errorString());

        const QDeadlineTimer deadline(kStartMs);
        bool exited = false;
        while (!deadline.hasExpired()) {
            QProcess ready;
            ready.start(kBin + QStringLiteral("pg_isready"),
                        {QStringLiteral("-q"), QStringLiteral("-h"), QStringLiteral("127.0.0.1"),
                         QStringLiteral("-p"), QString::number(m_port), QStringLiteral("-U"), user(),
                         QStringLiteral("-d"), QStringLiteral("postgres"), QStringLiteral("-t"),
                         QStringLiteral("2")});
            if (ready.waitForFinished(5'000) && ready.exitStatus() == QProcess::NormalExit &&
                ready.exitCode() == 0)
                return {};
            exited = m_server.waitForFinished(100) || m_server.state() == QProcess::NotRunning;
            if (exited)
                break;
        }
        const QString tail = logTail();
        if (exited && attempt < 3 && tail.contains(u"could not bind"))
            continue;                // another process took the port in the meantime
        m_dir->setAutoRemove(false); // the log the message names stays
        const QString log = logFile();
        stop();
        return QStringLiteral("PostgreSQL %1; see %2:\n%3")
            .arg(exited ? QStringLiteral("stopped while starting")
                        : QStringLiteral("did not accept connections within %1 s").arg(kStartMs / 1000),
                 log, tail);
    }
}

QString PostgresServer::restart()
{
    if (!m_dir || m_server.state() == QProcess::NotRunning)
        return QStringLiteral("the server is not running");
    const auto pid = static_cast<pid_t>(m_server.processId());
    ::kill(pid, SIGINT); // fast shutdown: the open sessions are ended, as a restart of a real server ends them
    if (!m_server.waitForFinished(15'000))
        return QStringLiteral("postgres (pid %1) did not stop within 15 s").arg(pid);
    m_server.start(); // the same folder, port and settings
    if (!m_server.waitForStarted(10'000))
        return QStringLiteral("postgres did not start again: %1").arg(m_server.errorString());
    const QDeadlineTimer deadline(kStartMs);
    while (!deadline.hasExpired()) {
        QProcess ready;
        ready.start(kBin + QStringLiteral("pg_isready"),
                    {QStringLiteral("-q"), QStringLiteral("-h"), QStringLiteral("127.0.0.1"), QStringLiteral("-p"),
                     QString::number(m_port), QStringLiteral("-U"), user(), QStringLiteral("-d"),
                     QStringLiteral("postgres"), QStringLiteral("-t"), QStringLiteral("2")});
        if (ready.waitForFinished(5'000) && ready.exitStatus() == QProcess::NormalExit && ready.exitCode() == 0)
            return {};
        if (m_server.waitForFinished(100))
            break;
    }
    return QStringLiteral("PostgreSQL did not come back after a restart; see %1:\n%2").arg(logFile(), logTail());
}

QString PostgresServer::createDatabase(const QString& name, const QString& copyOf)
{
    QProcess create;
    create.setProcessChannelMode(QProcess::MergedChannels);
    if (!m_passfile.isEmpty()) {
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        environment.insert(QStringLiteral("PGPASSFILE"), m_passfile);
        create.setProcessEnvironment(environment);
    }
    QStringList arguments{QStringLiteral("-h"), QStringLiteral("127.0.0.1"), QStringLiteral("-p"),
                          QString::number(m_port), QStringLiteral("-U"), user()};
    if (!copyOf.isEmpty())
        arguments << QStringLiteral("-T") << copyOf;
    create.start(kBin + QStringLiteral("createdb"), arguments << name);
    if (!create.waitForFinished(30'000) || create.exitStatus() != QProcess::NormalExit ||
        create.exitCode() != 0)
        return QStringLiteral("createdb %1 failed: %2").arg(name, lastLines(create.readAll(), 5));
    return {};
}

QString PostgresServer::url(const QString& database, const QString& password) const
{
    const QString secret =
        password.isEmpty() ? QString() : u':' + QString::fromLatin1(QUrl::toPercentEncoding(password));
    // Joined, not .arg()'d: the encoded password holds %-sequences of its own.
    const QString url = QStringLiteral("postgresql://") + user() + secret + QStringLiteral("@127.0.0.1:") +
                        QString::number(m_port) + u'/' + database;
    if (!password.isEmpty() || m_passfile.isEmpty())
        return url;
    return url + QStringLiteral("?passfile=") + QString::fromLatin1(QUrl::toPercentEncoding(m_passfile, "/"));
}

QString PostgresServer::urlWithoutPassword(const QString& database) const
{
    return QStringLiteral("postgresql://") + user() + QStringLiteral("@127.0.0.1:") + QString::number(m_port) +
           u'/' + database;
}

QString PostgresServer::socketUrl(const QString& database) const
{
    return QStringLiteral("postgresql://") + user() + QStringLiteral("@:") + QString::number(m_port) + u'/' +
           database + QStringLiteral("?host=") +
           QString::fromLatin1(QUrl::toPercentEncoding(m_dir->path(), "/")) +
           (m_passfile.isEmpty() ? QString()
                                 : QStringLiteral("&passfile=") +
                                       QString::fromLatin1(QUrl::toPercentEncoding(m_passfile, "/")));
}

void PostgresServer::stop()
{
    if (m_server.state() != QProcess::NotRunning) {
        const auto pid = static_cast<pid_t>(m_server.processId());
        ::kill(pid, SIGINT);
        if (!m_server.waitForFinished(15'000)) {
            ::kill(pid, SIGKILL);
            m_server.waitForFinished(5'000);
        }
    }
    m_dir.reset();
}

} // namespace gleaner::test
