#pragma once
// Browser sessions of the admin dashboard (docs/dashboard.md, "Sessions"). Logging in with the admin token
// makes a session: a random 256-bit id that only the browser holds (an HttpOnly, Secure, SameSite=Strict
// cookie), and a CSRF token the page sends back in a header with every state-changing request. The
// coordinator keeps only the SHA-256 of the id, in memory: a restart logs every browser out, and nothing on
// disk can be replayed. The CSRF token is an HMAC of the id under a key made at start, so every tab of one
// session can ask for it again.
//
// A session ends when it was not used for `idleMs`, `lifetimeMs` after login, or at logout. Thread-safe: the
// HTTP threads look sessions up while admitting requests (a shared lock, and an atomic for the last use).

#include "util/Clock.h"

#include <QByteArray>
#include <QHash>
#include <QString>

#include <atomic>
#include <memory>
#include <optional>
#include <shared_mutex>

namespace gleaner::coordinator::dashboard {

class AdminSessions
{
public:
    struct Created
    {
        QByteArray id;        // the cookie's value
        QByteArray csrfToken; // for the X-Gleaner-CSRF header
        qint64 expiresMs = 0; // the latest it can live (lifetime)
    };
    struct Session
    {
        qint64 createdMs = 0;
        qint64 expiresMs = 0;
        std::shared_ptr<std::atomic<qint64>> lastUsedMs;
    };

    AdminSessions(const Clock& clock, qint64 idleMs, qint64 lifetimeMs, int maxSessions = 256);

    Created create();
    // The live session with this cookie value, marked as used now; nullopt when unknown or expired (an
    // expired one is forgotten here).
    std::optional<Session> use(QByteArrayView id);
    // The CSRF token of the session with this id.
    QByteArray csrfToken(QByteArrayView id) const;
    // True when `token` is the CSRF token of the session `id` (compared in constant time).
    bool csrfMatches(QByteArrayView id, QByteArrayView token) const;
    void remove(QByteArrayView id);
    int count() const;

    qint64 idleMs() const { return m_idleMs; }
    qint64 lifetimeMs() const { return m_lifetimeMs; }

private:
    bool expired(const Session& session, qint64 now) const;
    void sweep(qint64 now); // with the unique lock held

    const Clock& m_clock;
    const qint64 m_idleMs;
    const qint64 m_lifetimeMs;
    const int m_maxSessions;
    const QByteArray m_csrfKey;
    mutable std::shared_mutex m_mutex;
    QHash<QString, Session> m_sessions; // by SHA-256 hex of the id
};

} // namespace gleaner::coordinator::dashboard
