#include "config/SigningKeys.h"

#include "crypto/SecureFile.h"
#include "util/Durability.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QMutexLocker>

#include <algorithm>
#include <cstdio>

namespace gleaner::coordinator {

namespace {

constexpr qsizetype kMaxChainFile = 4 * 1024 * 1024;

Result<QList<KeyRotation>> readChain(const QString& path)
{
    if (!QFileInfo::exists(path))
        return QList<KeyRotation>();
    auto bytes = SecureFile::read(path, QStringLiteral("signing key rotations"), kMaxChainFile);
    if (!bytes)
        return fail(bytes.error());
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(*bytes, &error);
    if (error.error != QJsonParseError::NoError)
        return fail(QStringLiteral("%1: not valid JSON (%2); restore it from a backup")
                        .arg(path, error.errorString()));
    auto chain = KeyRotation::listFromJson(doc.object().value(QStringLiteral("rotations")), kMaxChainFile);
    if (!chain)
        return fail(QStringLiteral("%1: %2; restore it from a backup").arg(path, chain.error()));
    return chain;
}

// The key the last statement of `chain` announces (null for an empty chain or an unreadable statement).
VerifyKey announced(const QList<KeyRotation>& chain)
{
    if (chain.isEmpty())
        return {};
    const QJsonObject o = QJsonDocument::fromJson(chain.last().statement).object();
    auto key = VerifyKey::fromPem(o.value(QStringLiteral("key")).toString().toLatin1());
    return key ? *key : VerifyKey();
}

} // namespace

SigningKeys::SigningKeys(const DataDirectory& dir, SigningKey key, QList<KeyRotation> chain)
    : m_dir(dir), m_key(std::move(key)), m_public(m_key.publicKey()), m_chain(std::move(chain))
{
}

SigningKeys::SigningKeys(SigningKeys&& other) noexcept
    : m_dir(other.m_dir), m_key(std::move(other.m_key)), m_public(other.m_public),
      m_chain(std::move(other.m_chain))
{
}

Result<SigningKeys> SigningKeys::load(const DataDirectory& dir)
{
    auto chain = readChain(dir.signingKeyRotationsPath());
    if (!chain)
        return fail(chain.error());
    const VerifyKey last = announced(*chain);
    if (QFileInfo::exists(dir.nextSigningKeyPath())) {
        auto next = SigningKey::loadFromFile(dir.nextSigningKeyPath());
        if (next && !last.isNull() && next->publicKey() == last) {
            // Interrupted after the chain announced it: the new key is the one in force.
            SigningKeys keys(dir, std::move(*next), *chain);
            if (auto s = keys.install(keys.m_public); !s)
                return fail(s.error());
            std::fprintf(stderr,
                         "gleaner-coordinator: finished the signing key rotation a stop interrupted; "
                         "the key in force is %s\n",
                         qPrintable(keys.m_public.fingerprint()));
            return keys;
        }
        // Interrupted before the chain named it: no agent was told of it, so it is dropped.
        QFile::remove(dir.nextSigningKeyPath());
        (void)Durability::syncFolder(dir.root());
    }
    auto key = SigningKey::loadFromFile(dir.signingKeyPath());
    if (!key)
        return fail(key.error());
    if (!last.isNull() && !(key->publicKey() == last))
        return fail(
            QStringLiteral("%1 holds key %2, but %3 says the key in force is %4: restore both files from "
                           "the same backup")
                .arg(dir.signingKeyPath(), key->publicKey().fingerprint(), dir.signingKeyRotationsPath(),
                     last.fingerprint()));
    // The public half is written last in a rotation: a stop just before it leaves the old one there.
    const QByteArray publicPem = key->publicKey().toPem();
    QFile publicFile(dir.signingPublicKeyPath());
    if (!publicFile.open(QIODevice::ReadOnly) || publicFile.read(64 * 1024) != publicPem)
        if (auto s = SecureFile::write(dir.signingPublicKeyPath(), publicPem, 0644,
                                       QStringLiteral("signing public key"));
            !s)
            return fail(s.error());
    return SigningKeys(dir, std::move(*key), std::move(*chain));
}

VerifyKey SigningKeys::publicKey() const
{
    QMutexLocker lock(&m_mutex);
    return m_public;
}

QJsonObject SigningKeys::toJson() const
{
    QMutexLocker lock(&m_mutex);
    // The newest statements an agent reads: one that pinned a key from before them must enroll again.
    const QList<KeyRotation> newest =
        m_chain.mid(std::max<qsizetype>(0, m_chain.size() - KeyRotation::kMaxChain));
    return {{QStringLiteral("key"), QString::fromLatin1(m_public.toPem())},
            {QStringLiteral("fingerprint"), m_public.fingerprint()},
            {QStringLiteral("rotations"), KeyRotation::toJson(newest)}};
}

Status SigningKeys::writeChain(const QList<KeyRotation>& chain) const
{
    const QJsonObject file{{QStringLiteral("rotations"), KeyRotation::toJson(chain)}};
    if (auto s = SecureFile::write(m_dir.signingKeyRotationsPath(), QJsonDocument(file).toJson(), 0644,
                                   QStringLiteral("signing key rotations"));
        !s)
        return s;
    return Durability::syncFolder(m_dir.root());
}

Status SigningKeys::install(const VerifyKey& key) const
{
    if (::rename(QFile::encodeName(m_dir.nextSigningKeyPath()).constData(),
                 QFile::encodeName(m_dir.signingKeyPath()).constData()) != 0)
        return fail(QStringLiteral("cannot move %1 over %2: %3")
                        .arg(m_dir.nextSigningKeyPath(), m_dir.signingKeyPath(), qt_error_string(errno)));
    if (auto s = Durability::syncFolder(m_dir.root()); !s)
        return s;
    Durability::faultPoint("key.installed");
    return SecureFile::write(m_dir.signingPublicKeyPath(), key.toPem(), 0644,
                             QStringLiteral("signing public key"));
}

Result<QJsonObject> SigningKeys::rotate(qint64 nowMs)
{
    auto next = SigningKey::generate();
    if (!next)
        return fail(QStringLiteral("cannot make a new signing key: %1").arg(next.error()));
    const VerifyKey nextPublic = next->publicKey();
    if (auto s = next->saveToFile(m_dir.nextSigningKeyPath()); !s)
        return fail(s.error());
    if (auto s = Durability::syncFolder(m_dir.root()); !s)
        return fail(s.error());
    Durability::faultPoint("key.next.written");

    QList<KeyRotation> chain = m_chain;
    chain.append(KeyRotation::announce(m_key, nextPublic, nowMs));
    if (auto s = writeChain(chain); !s) {
        QFile::remove(m_dir.nextSigningKeyPath());
        return fail(s.error());
    }
    Durability::faultPoint("key.announced");
    // From here on the new key is the one in force, on disk at the next start if not now.
    const QString previous = m_public.fingerprint();
    if (auto s = install(nextPublic); !s)
        return fail(
            QStringLiteral("%1; the rotation completes when the coordinator next starts").arg(s.error()));
    m_key = std::move(*next);
    {
        QMutexLocker lock(&m_mutex);
        m_public = nextPublic;
        m_chain = chain;
    }
    return QJsonObject{{QStringLiteral("fingerprint"), nextPublic.fingerprint()},
                       {QStringLiteral("previous_fingerprint"), previous},
                       {QStringLiteral("rotations"), chain.size()}};
}

} // namespace gleaner::coordinator
