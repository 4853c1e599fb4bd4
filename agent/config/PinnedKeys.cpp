#include "config/PinnedKeys.h"

#include "config/AgentConfig.h"
#include "crypto/SecureFile.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace gleaner::agent {

namespace {

constexpr qsizetype kMaxKeyFile = 64 * 1024;
constexpr qsizetype kMaxHistoryFile = 1024 * 1024;

} // namespace

QString PinnedKeys::historyPath(const QString& dir)
{
    return QDir(dir).filePath(QStringLiteral("coordinator-key-history.json"));
}

PinnedKeys::PinnedKeys(QString dir, VerifyKey current, QList<VerifyKey> former)
    : m_dir(std::move(dir)), m_current(std::move(current)), m_former(std::move(former))
{
}

Result<PinnedKeys> PinnedKeys::load(const QString& dir)
{
    const QString pinPath = AgentConfig::signingKeyPath(dir);
    auto pem = SecureFile::read(pinPath, QStringLiteral("pinned coordinator key"), kMaxKeyFile);
    if (!pem)
        return fail(QStringLiteral("%1; enroll the agent again").arg(pem.error()));
    auto key = VerifyKey::fromPem(*pem);
    if (!key)
        return fail(QStringLiteral("%1: %2; enroll the agent again").arg(pinPath, key.error()));
    QList<VerifyKey> former;
    const QString history = historyPath(dir);
    if (QFileInfo::exists(history)) {
        auto bytes = SecureFile::read(history, QStringLiteral("coordinator key history"), kMaxHistoryFile);
        if (!bytes)
            return fail(bytes.error());
        const QJsonArray keys = QJsonDocument::fromJson(*bytes).object().value(QStringLiteral("keys")).toArray();
        for (const QJsonValue& value : keys) {
            auto old = VerifyKey::fromPem(value.toString().toLatin1());
            if (!old)
                return fail(QStringLiteral("%1: a key is not an Ed25519 public key (%2); delete the file to trust "
                                           "only the pinned key")
                                .arg(history, old.error()));
            former.append(*old);
        }
    }
    return PinnedKeys(dir, *key, former);
}

Status PinnedKeys::resetHistory(const QString& dir)
{
    const QString history = historyPath(dir);
    if (QFileInfo::exists(history) && !QFile::remove(history))
        return fail(QStringLiteral("%1: cannot remove the history of another coordinator's keys").arg(history));
    return {};
}

QList<VerifyKey> PinnedKeys::all() const
{
    return QList<VerifyKey>{m_current} + m_former;
}

Result<int> PinnedKeys::follow(const QList<KeyRotation>& rotations, const QString& target)
{
    auto path = KeyRotation::follow(m_current, rotations, target);
    if (!path)
        return fail(path.error());
    if (path->size() == 1)
        return 0;
    QList<VerifyKey> former;
    for (qsizetype i = path->size() - 2; i >= 0; --i) // newest first: the key just replaced, then older ones
        former.append(path->at(i));
    former += m_former;
    QJsonArray keys;
    for (const VerifyKey& key : former)
        keys.append(QString::fromLatin1(key.toPem()));
    if (auto s = SecureFile::write(historyPath(m_dir), QJsonDocument(QJsonObject{{QStringLiteral("keys"), keys}}).toJson(),
                                   0644, QStringLiteral("coordinator key history"));
        !s)
        return fail(s.error());
    if (auto s = SecureFile::write(AgentConfig::signingKeyPath(m_dir), path->last().toPem(), 0644,
                                   QStringLiteral("pinned coordinator key"));
        !s)
        return fail(s.error());
    m_current = path->last();
    m_former = former;
    return int(path->size() - 1);
}

} // namespace gleaner::agent
