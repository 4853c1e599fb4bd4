#pragma once
// A throwaway Redis 7 server for a test or a benchmark: listening on 127.0.0.1 only, on a free port, with its
// folder (and its append-only file, when asked for) in a temporary folder. It is stopped by its process id
// when the object goes, and dies with the process that started it. Asked to, it requires a password (random,
// in a 0600 file in its folder, as installers/scale-out/local-redis.sh sets a server up), and its URL names
// that file (?password_file=...).

#include <QProcess>
#include <QString>
#include <QTemporaryDir>

#include <memory>

namespace gleaner::test {

class RedisServer
{
public:
    RedisServer() = default;
    ~RedisServer() { stop(); }
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    // Empty when redis-server is installed; else the message to skip with, naming the package.
    static QString missing();

    // Empty once the server answers PING (within 30 s); else why not, with the end of its log. `appendOnly`:
    // every write goes to its append-only file, fsynced every second (as a deployment runs it). `password`:
    // every client must authenticate (requirepass) with the password in passwordFile().
    QString start(bool appendOnly = false, bool password = false);
    // redis://127.0.0.1:PORT/DB, with ?password_file=... when the server requires a password.
    QString url(int database = 0) const;
    // The same without the password file: what a client that does not know the password uses.
    QString urlWithoutPassword(int database = 0) const;
    // Empty unless the server requires a password.
    QString passwordFile() const { return m_passwordFile; }
    QByteArray password() const { return m_password; }
    int port() const { return m_port; }
    qint64 pid() const { return m_server.processId(); }
    // An outage: the server stops (SIGKILL: nothing saved, its clients' connections end) and, with resume(),
    // starts again on the same port and folder, with only what its append-only file kept; empty once it
    // answers again.
    void halt();
    QString resume();
    // SIGTERM, then SIGKILL when it has not stopped within 10 s; the folder is removed.
    void stop();

private:
    QString logTail() const;
    // Waits for PING to be answered; empty then, else why not.
    QString waitUntilReady(bool* exited);

    std::unique_ptr<QTemporaryDir> m_dir;
    QProcess m_server;
    int m_port = 0;
    QByteArray m_password;
    QString m_passwordFile;
};

} // namespace gleaner::test
