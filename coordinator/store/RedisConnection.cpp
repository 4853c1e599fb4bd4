#include "store/RedisConnection.h"

#include "crypto/SecureFile.h"

#include <QUrl>
#include <QUrlQuery>

#include <hiredis/hiredis.h>

#include <sys/time.h>

namespace gleaner::coordinator {
namespace {

RedisReply convert(const redisReply* reply)
{
    RedisReply out;
    if (!reply)
        return out;
    switch (reply->type) {
    case REDIS_REPLY_STRING:
        out.type = RedisReply::Type::String;
        out.text = QByteArray(reply->str, qsizetype(reply->len));
        break;
    case REDIS_REPLY_STATUS:
        out.type = RedisReply::Type::Status;
        out.text = QByteArray(reply->str, qsizetype(reply->len));
        break;
    case REDIS_REPLY_ERROR:
        out.type = RedisReply::Type::Error;
        out.text = QByteArray(reply->str, qsizetype(reply->len));
        break;
    case REDIS_REPLY_INTEGER:
        out.type = RedisReply::Type::Integer;
        out.integer = reply->integer;
        break;
    case REDIS_REPLY_ARRAY:
        out.type = RedisReply::Type::Array;
        out.elements.reserve(reply->elements);
        for (size_t i = 0; i < reply->elements; ++i)
            out.elements.push_back(convert(reply->element[i]));
        break;
    default:
        break;
    }
    return out;
}

struct ReplyDeleter
{
    void operator()(void* reply) const { freeReplyObject(reply); }
};

} // namespace

struct RedisConnection::Address
{
    QString host;
    int port = 6379;
    int database = 0;
    QString user;
    QByteArray password;
    QString passwordFile; // where the password came from, for messages; empty when the URL held it
    Timeouts timeouts;
};

RedisConnection::RedisConnection(std::unique_ptr<Address> address) : m_address(std::move(address)) {}

RedisConnection::~RedisConnection()
{
    close();
    SecureFile::wipe(m_address->password);
}

Status RedisConnection::checkUrl(const QString& url)
{
    const QUrl parsed(url, QUrl::StrictMode);
    if (!parsed.isValid() || parsed.scheme() != QLatin1StringView("redis"))
        return fail(QStringLiteral("not a Redis URL: write redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"));
    if (parsed.host().isEmpty())
        return fail(QStringLiteral("the Redis URL names no host: write redis://HOST[:PORT][/DB]"));
    if (parsed.port() == 0)
        return fail(QStringLiteral("the Redis URL's port must be between 1 and 65535"));
    const QString path = parsed.path();
    if (!path.isEmpty() && path != QLatin1StringView("/")) {
        bool ok = false;
        const int database = path.mid(1).toInt(&ok);
        if (!ok || database < 0)
            return fail(QStringLiteral("the Redis URL's database must be a number (redis://HOST:PORT/0)"));
    }
    if (parsed.hasFragment())
        return fail(QStringLiteral("the Redis URL takes no fragment (#...)"));
    const QUrlQuery query(parsed);
    for (const auto& [key, value] : query.queryItems())
        if (key != u"password_file")
            return fail(QStringLiteral("the Redis URL takes no option \"%1\" (only ?password_file=/PATH)").arg(key));
    if (query.hasQueryItem(QStringLiteral("password_file"))) {
        const QString file = query.queryItemValue(QStringLiteral("password_file"), QUrl::FullyDecoded);
        if (!file.startsWith(u'/'))
            return fail(QStringLiteral("the Redis URL's password_file must be an absolute path, not \"%1\"").arg(file));
        if (!parsed.password().isEmpty())
            return fail(QStringLiteral("the Redis URL gives both a password and a password_file; keep the "
                                       "password in the file only"));
    }
    return {};
}

Result<std::unique_ptr<RedisConnection>> RedisConnection::open(const QString& url)
{
    return open(url, Timeouts{});
}

Result<std::unique_ptr<RedisConnection>> RedisConnection::open(const QString& url, Timeouts timeouts)
{
    if (auto s = checkUrl(url); !s)
        return fail(s.error());
    const QUrl parsed(url, QUrl::StrictMode);
    auto address = std::make_unique<Address>();
    address->host = parsed.host();
    address->port = parsed.port(6379);
    if (parsed.path().size() > 1)
        address->database = parsed.path().mid(1).toInt();
    address->user = parsed.userName();
    address->password = parsed.password().toUtf8();
    address->passwordFile =
        QUrlQuery(parsed).queryItemValue(QStringLiteral("password_file"), QUrl::FullyDecoded);
    if (!address->passwordFile.isEmpty()) {
        auto secret = SecureFile::read(address->passwordFile, QStringLiteral("Redis password file"), 4096, 077,
                                       QStringLiteral("anyone who can read it can read and change every job's "
                                                      "weights in Redis"));
        if (!secret)
            return fail(QStringLiteral("Redis at redis://%1:%2: %3 (named by the Redis URL's password_file)")
                            .arg(address->host)
                            .arg(address->port)
                            .arg(secret.error()));
        // The password alone, on the first line; the line's end is not part of it.
        const qsizetype end = secret->indexOf('\n');
        address->password = end < 0 ? *secret : secret->left(end);
        if (address->password.endsWith('\r'))
            address->password.chop(1);
        SecureFile::wipe(*secret);
        if (address->password.isEmpty())
            return fail(QStringLiteral("the Redis password file %1 is empty; write the server's password in it "
                                       "(its first line), or start the server with local-redis.sh, which does")
                            .arg(address->passwordFile));
    }
    if (timeouts.connectMs <= 0 || timeouts.replyMs <= 0)
        return fail(QStringLiteral("Redis timeouts must be above zero"));
    address->timeouts = timeouts;
    std::unique_ptr<RedisConnection> connection(new RedisConnection(std::move(address)));
    if (auto s = connection->connect(); !s)
        return fail(s.error());
    return connection;
}

QString RedisConnection::describe() const
{
    return QStringLiteral("redis://%1:%2/%3")
        .arg(m_address->host)
        .arg(m_address->port)
        .arg(m_address->database);
}

QString RedisConnection::lostMessage() const
{
    return m_context && m_context->err ? QString::fromUtf8(m_context->errstr)
                                       : QStringLiteral("the connection was lost");
}

Status RedisConnection::connect()
{
    close();
    const auto interval = [](int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; };
    const timeval connectTimeout = interval(m_address->timeouts.connectMs);
    m_context =
        redisConnectWithTimeout(m_address->host.toUtf8().constData(), m_address->port, connectTimeout);
    if (!m_context || m_context->err) {
        const QString why =
            m_context ? QString::fromUtf8(m_context->errstr) : QStringLiteral("out of memory");
        close();
        return fail(QStringLiteral("cannot connect to Redis at %1: %2").arg(describe(), why));
    }
    const timeval replyTimeout = interval(m_address->timeouts.replyMs);
    redisSetTimeout(m_context, replyTimeout);
    redisEnableKeepAlive(m_context);
    // On every connection, the first one and each after a loss: a new connection is not authenticated.
    // Redis 6 and later take a user; older servers and the default user take the password alone.
    std::vector<QByteArray> auth;
    if (!m_address->password.isEmpty()) {
        auth.push_back("AUTH");
        if (!m_address->user.isEmpty())
            auth.push_back(m_address->user.toUtf8());
        auth.push_back(m_address->password);
    } else {
        // Nothing to send; a PING finds out now, with a message that says what to do, whether the server
        // wants a password, rather than the first real command with a bare NOAUTH.
        auth.push_back("PING");
    }
    auto reply = command(auth);
    if (!reply) {
        close();
        // Redis's words ("WRONGPASS invalid username-password pair", "NOAUTH Authentication required") name
        // no secret.
        if (m_address->password.isEmpty() && reply.error().contains(u"NOAUTH"))
            return fail(QStringLiteral("Redis at %1 asks for a password, and the coordinator's Redis URL gives "
                                       "none: add ?password_file=/PATH to it, naming a file (mode 0600) that "
                                       "holds the password (local-redis.sh writes DIR/password and prints the "
                                       "URL that names it)")
                            .arg(describe()));
        if (reply.error().contains(u"WRONGPASS") || reply.error().contains(u"invalid password"))
            return fail(QStringLiteral("Redis at %1 refused the password %2: %3; check that it is the server's "
                                       "(requirepass, or the ACL user's)")
                            .arg(describe(),
                                 m_address->passwordFile.isEmpty()
                                     ? QStringLiteral("in the URL")
                                     : QStringLiteral("in %1").arg(m_address->passwordFile),
                                 reply.error()));
        return fail(QStringLiteral("Redis at %1: %2").arg(describe(), reply.error()));
    }
    if (m_address->database != 0) {
        auto reply = command({"SELECT", QByteArray::number(m_address->database)});
        if (!reply) {
            close();
            return fail(QStringLiteral("Redis at %1: %2").arg(describe(), reply.error()));
        }
    }
    return {};
}

void RedisConnection::close()
{
    if (m_context)
        redisFree(m_context);
    m_context = nullptr;
    m_queued = 0;
    m_queueFailed = false;
}

Status RedisConnection::ensureOpen()
{
    if (m_context && !m_context->err)
        return {};
    return connect();
}

Result<RedisReply> RedisConnection::command(const std::vector<QByteArray>& words)
{
    queue(words);
    auto all = replies();
    if (!all)
        return fail(all.error());
    RedisReply reply = std::move(all->front());
    if (reply.type == RedisReply::Type::Error)
        return fail(QStringLiteral("Redis answered: %1").arg(QString::fromUtf8(reply.text)));
    return reply;
}

void RedisConnection::queue(const std::vector<QByteArray>& words)
{
    if (m_queued == 0 && !ensureOpen()) {
        m_queueFailed = true;
        ++m_queued;
        return;
    }
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    argv.reserve(words.size());
    lengths.reserve(words.size());
    for (const QByteArray& word : words) {
        argv.push_back(word.constData());
        lengths.push_back(size_t(word.size()));
    }
    if (!m_context ||
        redisAppendCommandArgv(m_context, int(argv.size()), argv.data(), lengths.data()) != REDIS_OK)
        m_queueFailed = true;
    ++m_queued;
}

Result<std::vector<RedisReply>> RedisConnection::replies()
{
    const int count = m_queued;
    m_queued = 0;
    if (m_queueFailed || !m_context) {
        const QString why = m_context ? lostMessage() : QStringLiteral("not connected");
        close();
        return fail(QStringLiteral("Redis at %1: %2").arg(describe(), why));
    }
    std::vector<RedisReply> out;
    out.reserve(size_t(count));
    for (int i = 0; i < count; ++i) {
        void* raw = nullptr;
        if (redisGetReply(m_context, &raw) != REDIS_OK || !raw) {
            const QString why = lostMessage();
            close(); // the replies still owed would answer the wrong questions
            return fail(QStringLiteral("Redis at %1: %2").arg(describe(), why));
        }
        std::unique_ptr<void, ReplyDeleter> owned(raw);
        out.push_back(convert(static_cast<const redisReply*>(raw)));
    }
    return out;
}

Result<qint64> RedisConnection::toInteger(const RedisReply& reply, const QString& what)
{
    if (reply.type == RedisReply::Type::Integer)
        return reply.integer;
    bool ok = false;
    const qint64 value = reply.text.toLongLong(&ok);
    if (reply.type != RedisReply::Type::String || !ok)
        return fail(QStringLiteral("%1 in Redis is not a number").arg(what));
    return value;
}

} // namespace gleaner::coordinator
