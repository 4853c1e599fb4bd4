#pragma once
// A throwaway PostgreSQL 15 server for a test: its own cluster (initdb) in a temporary folder, listening on
// 127.0.0.1 only, on a free port, and on a unix socket in that folder; the user `gleaner` connects without a
// password (trust), or, asked to, only with one (scram-sha-256, as installers/scale-out/local-postgres.sh sets a
// server up): random, in a 0600 password file that url() names (?passfile=...). It is stopped by its process id
// when the object goes, and the folder removed.
//
// initdb and postgres refuse to run as root: a test that runs as root (CI) runs them as the `postgres` system
// user that Debian's postgresql packages create, with the folder handed to that user; any other user runs
// them as itself.

#include <QProcess>
#include <QString>
#include <QTemporaryDir>

#include <memory>

namespace gleaner::test {

class PostgresServer
{
public:
    PostgresServer() = default;
    ~PostgresServer() { stop(); }
    PostgresServer(const PostgresServer&) = delete;
    PostgresServer& operator=(const PostgresServer&) = delete;

    // Empty when PostgreSQL 15's programs (and, for root, its user) are there; else the message to skip with,
    // naming the package to install.
    static QString missing();

    // Empty once the server accepts connections (within a minute); else why not, naming its log file, which
    // is then kept.
    // `password`: every connection, over TCP or the socket, must authenticate with the password in passfile().
    QString start(bool password = false);
    // Empty once the database exists (empty, owned by `gleaner`; or, with `copyOf`, a copy of that database,
    // which nobody may be connected to); else why not.
    QString createDatabase(const QString& name, const QString& copyOf = {});
    // postgresql://gleaner[:password]@127.0.0.1:PORT/DATABASE; on a server that requires a password and
    // without one given here, with ?passfile=... instead.
    QString url(const QString& database, const QString& password = {}) const;
    // The same with neither: what a client that does not know the password uses.
    QString urlWithoutPassword(const QString& database) const;
    // The password file (libpq's format) when the server requires a password; else empty.
    QString passfile() const { return m_passfile; }
    // postgresql://gleaner@:PORT/DATABASE?host=SOCKETDIR[&passfile=...]: the same server over its unix socket.
    QString socketUrl(const QString& database) const;
    QString user() const { return QStringLiteral("gleaner"); }
    int port() const { return m_port; }
    QString logFile() const;
    qint64 pid() const { return m_server.processId(); }

    // Stops the server (fast shutdown: its clients' connections end) and starts it again on the same folder and
    // port, as an admin's restart or a failover does; empty once it accepts connections again.
    QString restart();
    // SIGINT (PostgreSQL's fast shutdown: it ends the open sessions, where SIGTERM would wait for them to
    // go), then SIGKILL when it has not stopped within 15 s; the folder is removed.
    void stop();

private:
    // Runs one of PostgreSQL's programs to its end (at most `timeoutMs`); empty when it exited with 0.
    QString run(const QString& program, const QStringList& arguments, int timeoutMs);
    // The server's process: as `postgres` when we are root, and ended with us if we die first.
    void prepare(QProcess& process) const;
    QString logTail() const;

    std::unique_ptr<QTemporaryDir> m_dir;
    QProcess m_server;
    int m_port = 0;
    QString m_passfile;
};

} // namespace gleaner::test
