#pragma once
// One connection to a Redis 7 server (hiredis underneath), for the state that several coordinators share: the
// server weights of running jobs (aggregation/SharedWeights). Blocking and binary-safe; one thread at a time.
//
// The address is a URL, redis://[USER@]HOST[:PORT][/DB][?password_file=/PATH] (port 6379, database 0 by
// default), named by the coordinator's config ("redis"). The password is kept out of the URL, and so out of
// config.json, command lines and messages: password_file names a file (mode 0600, no group or other
// permission) that holds it alone, as local-redis.sh writes it. It is read once, when the connection is opened,
// and sent (AUTH, with USER when the URL names one: a Redis 6 ACL user) on every connection and reconnection.
// A password written in the URL itself, redis://[USER]:PASSWORD@HOST, still works, for a server reached only
// from a private network; never both. describe() gives the URL without either.
//
// A command that fails at the connection (the server went away, a timeout) leaves it closed; the next command
// opens it again once before it runs. A command is never sent twice: after a failure its caller decides,
// since a write may have been carried out. Commands inside WATCH ... EXEC are tied to the connection they
// were sent on: a reconnect between them ends the transaction (its EXEC then fails, which the caller sees).

#include "Result.h"

#include <QByteArray>
#include <QString>

#include <memory>
#include <vector>

struct redisContext;

namespace gleaner::coordinator {

struct RedisReply
{
    enum class Type
    {
        Nil,
        String,
        Status,
        Integer,
        Array,
        Error
    };
    Type type = Type::Nil;
    QByteArray text; // String, Status and Error
    qint64 integer = 0;
    std::vector<RedisReply> elements; // Array

    bool isNil() const { return type == Type::Nil; }
};

class RedisConnection
{
public:
    ~RedisConnection();
    RedisConnection(const RedisConnection&) = delete;
    RedisConnection& operator=(const RedisConnection&) = delete;

    // Whether `url` is a Redis URL the coordinator can use; else why not, without repeating a password.
    static Status checkUrl(const QString& url);
    // How long connecting, and each reply, may take (both above zero).
    struct Timeouts
    {
        int connectMs = 5'000;
        int replyMs = 30'000;
    };
    // Reads the password file, connects (5 s at most), authenticates and selects the database; replies wait 30 s
    // at most. A server that asks for a password the URL does not give, or refuses the one it gives, is a
    // failure that names the file and what to do.
    static Result<std::unique_ptr<RedisConnection>> open(const QString& url);
    // The same with other timeouts: a connection whose user would rather lose a reply than wait.
    static Result<std::unique_ptr<RedisConnection>> open(const QString& url, Timeouts timeouts);

    // One command: its words go as they are (binary-safe). A Redis error reply is a failure too, with Redis's
    // own words.
    Result<RedisReply> command(const std::vector<QByteArray>& words);
    // Pipelining: queue several commands, send them at once, read their replies in order. `replies()` returns
    // one reply per queued command (error replies among them as RedisReply::Type::Error); it fails only when
    // the connection does.
    void queue(const std::vector<QByteArray>& words);
    Result<std::vector<RedisReply>> replies();

    // The server without its password, for messages: redis://HOST:PORT/DB.
    QString describe() const;
    // The bytes of one reply (String) as a number; fails naming `what` when it is not one.
    static Result<qint64> toInteger(const RedisReply& reply, const QString& what);

private:
    struct Address;
    explicit RedisConnection(std::unique_ptr<Address> address);
    Status connect();
    void close();
    Status ensureOpen();
    QString lostMessage() const;

    std::unique_ptr<Address> m_address;
    redisContext* m_context = nullptr;
    int m_queued = 0;
    bool m_queueFailed = false;
};

} // namespace gleaner::coordinator
