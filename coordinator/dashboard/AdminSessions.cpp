#include "dashboard/AdminSessions.h"

#include "enrollment/Tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <mutex>

namespace gleaner::coordinator::dashboard {
namespace {

QByteArray randomKey()
{
    QByteArray key(32, Qt::Uninitialized);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), int(key.size())) != 1)
        qFatal("OpenSSL's random generator failed; refusing to make a guessable CSRF key");
    return key;
}

} // namespace

AdminSessions::AdminSessions(const Clock& clock, qint64 idleMs, qint64 lifetimeMs, int maxSessions)
    : m_clock(clock), m_idleMs(idleMs), m_lifetimeMs(lifetimeMs), m_maxSessions(maxSessions),
      m_csrfKey(randomKey())
{
}

QByteArray AdminSessions::csrfToken(QByteArrayView id) const
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    HMAC(EVP_sha256(), m_csrfKey.constData(), int(m_csrfKey.size()),
         reinterpret_cast<const unsigned char*>(id.data()), size_t(id.size()), mac, &length);
    return "glc_" + QByteArray(reinterpret_cast<const char*>(mac), int(length))
                        .toBase64(QByteArray::Base64UrlEncoding | QByteArray::OmitTrailingEquals);
}

bool AdminSessions::csrfMatches(QByteArrayView id, QByteArrayView token) const
{
    if (id.isEmpty() || token.isEmpty())
        return false;
    const QByteArray expected = csrfToken(id);
    return token.size() == expected.size() &&
           CRYPTO_memcmp(token.data(), expected.constData(), size_t(expected.size())) == 0;
}

bool AdminSessions::expired(const Session& session, qint64 now) const
{
    return now >= session.expiresMs || now - session.lastUsedMs->load(std::memory_order_relaxed) >= m_idleMs;
}

void AdminSessions::sweep(qint64 now)
{
    for (auto it = m_sessions.begin(); it != m_sessions.end();)
        it = expired(*it, now) ? m_sessions.erase(it) : std::next(it);
    // Bounded: past the limit the least recently used session makes room (only admins can log in, but a
    // script logging in in a loop must not grow memory forever).
    while (m_sessions.size() >= m_maxSessions) {
        auto oldest = m_sessions.begin();
        for (auto it = m_sessions.begin(); it != m_sessions.end(); ++it)
            if (it->lastUsedMs->load() < oldest->lastUsedMs->load())
                oldest = it;
        m_sessions.erase(oldest);
    }
}

AdminSessions::Created AdminSessions::create()
{
    const qint64 now = m_clock.nowMs();
    Created created;
    created.id = Tokens::generate("gls_");
    created.csrfToken = csrfToken(created.id);
    created.expiresMs = now + m_lifetimeMs;
    Session session;
    session.createdMs = now;
    session.expiresMs = created.expiresMs;
    session.lastUsedMs = std::make_shared<std::atomic<qint64>>(now);
    std::unique_lock lock(m_mutex);
    sweep(now);
    m_sessions.insert(Tokens::hash(created.id), session);
    return created;
}

std::optional<AdminSessions::Session> AdminSessions::use(QByteArrayView id)
{
    if (id.isEmpty())
        return std::nullopt;
    const QString key = Tokens::hash(id);
    const qint64 now = m_clock.nowMs();
    {
        std::shared_lock lock(m_mutex);
        auto it = m_sessions.constFind(key);
        if (it == m_sessions.cend())
            return std::nullopt;
        if (!expired(*it, now)) {
            it->lastUsedMs->store(now, std::memory_order_relaxed);
            return *it;
        }
    }
    std::unique_lock lock(m_mutex);
    m_sessions.remove(key);
    return std::nullopt;
}

void AdminSessions::remove(QByteArrayView id)
{
    std::unique_lock lock(m_mutex);
    m_sessions.remove(Tokens::hash(id));
}

int AdminSessions::count() const
{
    const qint64 now = m_clock.nowMs();
    std::shared_lock lock(m_mutex);
    int live = 0;
    for (const Session& session : m_sessions)
        live += expired(session, now) ? 0 : 1;
    return live;
}

} // namespace gleaner::coordinator::dashboard
