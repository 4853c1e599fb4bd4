#include "crypto/KeyRotation.h"

#include <QJsonDocument>
#include <QSet>

namespace gleaner {

namespace {

constexpr char16_t kFormat[] = u"gleaner-key-rotation/1";

struct Step
{
    QString previous; // fingerprint
    VerifyKey next;
};

// A statement whose signature verifies with `signer` and whose fields are well formed; otherwise an error.
Result<Step> read(const KeyRotation& rotation, const VerifyKey& signer)
{
    const auto signature = QByteArray::fromBase64Encoding(
        rotation.signature, QByteArray::Base64Encoding | QByteArray::AbortOnBase64DecodingErrors);
    if (!signature || !signer.verify(rotation.statement, *signature))
        return fail(QStringLiteral("its signature does not verify with key %1").arg(signer.fingerprint()));
    QJsonParseError error;
    const QJsonObject o = QJsonDocument::fromJson(rotation.statement, &error).object();
    if (error.error != QJsonParseError::NoError || o.isEmpty())
        return fail(QStringLiteral("it is signed but is not a JSON object"));
    if (o.value(QStringLiteral("format")).toString() != QStringView(kFormat))
        return fail(QStringLiteral("it is signed but its format is not %1").arg(QString::fromUtf16(kFormat)));
    auto key = VerifyKey::fromPem(o.value(QStringLiteral("key")).toString().toLatin1());
    if (!key)
        return fail(QStringLiteral("it is signed but its key is not an Ed25519 public key: %1").arg(key.error()));
    return Step{o.value(QStringLiteral("previous_key")).toString(), *key};
}

} // namespace

KeyRotation KeyRotation::announce(const SigningKey& previous, const VerifyKey& next, qint64 issuedMs)
{
    const QJsonObject statement{{QStringLiteral("format"), QString::fromUtf16(kFormat)},
                                {QStringLiteral("previous_key"), previous.publicKey().fingerprint()},
                                {QStringLiteral("key"), QString::fromLatin1(next.toPem())},
                                {QStringLiteral("issued_ms"), issuedMs}};
    KeyRotation rotation;
    rotation.statement = QJsonDocument(statement).toJson(QJsonDocument::Compact);
    rotation.signature = previous.sign(rotation.statement).toBase64();
    return rotation;
}

QJsonObject KeyRotation::toJson() const
{
    return {{QStringLiteral("statement"), QString::fromUtf8(statement)},
            {QStringLiteral("signature"), QString::fromLatin1(signature)}};
}

Result<KeyRotation> KeyRotation::fromJson(const QJsonObject& json)
{
    const QJsonValue statement = json.value(QStringLiteral("statement"));
    const QJsonValue signature = json.value(QStringLiteral("signature"));
    if (!statement.isString() || !signature.isString())
        return fail(QStringLiteral("a key rotation needs the strings \"statement\" and \"signature\""));
    if (statement.toString().size() > kMaxStatement || signature.toString().size() > kMaxStatement)
        return fail(QStringLiteral("a key rotation is longer than %1 characters").arg(kMaxStatement));
    return KeyRotation{statement.toString().toUtf8(), signature.toString().toLatin1()};
}

QJsonArray KeyRotation::toJson(const QList<KeyRotation>& chain)
{
    QJsonArray array;
    for (const KeyRotation& rotation : chain)
        array.append(rotation.toJson());
    return array;
}

Result<QList<KeyRotation>> KeyRotation::listFromJson(const QJsonValue& json, qsizetype maxEntries)
{
    if (!json.isArray())
        return fail(QStringLiteral("the key rotations are not a JSON array"));
    const QJsonArray array = json.toArray();
    if (array.size() > maxEntries)
        return fail(QStringLiteral("%1 key rotations are more than the %2 read here")
                        .arg(array.size())
                        .arg(maxEntries));
    QList<KeyRotation> chain;
    for (qsizetype i = 0; i < array.size(); ++i) {
        auto rotation = fromJson(array[i].toObject());
        if (!rotation)
            return fail(QStringLiteral("key rotation %1: %2").arg(i).arg(rotation.error()));
        chain.append(*rotation);
    }
    return chain;
}

Result<QList<VerifyKey>> KeyRotation::follow(const VerifyKey& pinned, const QList<KeyRotation>& chain,
                                             const QString& target)
{
    if (pinned.isNull())
        return fail(QStringLiteral("no key is pinned to start from"));
    if (chain.size() > kMaxChain)
        return fail(QStringLiteral("the chain of %1 key rotations is longer than %2").arg(chain.size()).arg(kMaxChain));
    // Which key each statement says it replaces, read without trusting it: only to pick the statements worth a
    // signature check, so a long or hostile list costs at most one verification per statement. Trust comes from
    // the verification alone (read() checks the signature before it believes a field).
    QList<QString> claimedPrevious;
    for (const KeyRotation& rotation : chain)
        claimedPrevious.append(
            QJsonDocument::fromJson(rotation.statement).object().value(QStringLiteral("previous_key")).toString());
    QList<VerifyKey> path{pinned};
    QSet<QString> seen{pinned.fingerprint()};
    QSet<qsizetype> used;
    QString lastRefusal;
    while (path.last().fingerprint() != target) {
        const VerifyKey trusted = path.last(); // a copy: path grows below
        const QString trustedPrint = trusted.fingerprint();
        bool stepped = false;
        for (qsizetype i = 0; i < chain.size() && !stepped; ++i) {
            if (used.contains(i) || claimedPrevious[i] != trustedPrint)
                continue;
            used.insert(i);
            auto step = read(chain[i], trusted);
            if (!step) {
                lastRefusal = QStringLiteral("rotation %1 names key %2 as the one it replaces, but %3")
                                  .arg(i)
                                  .arg(trustedPrint, step.error());
                continue;
            }
            if (step->previous != trustedPrint || seen.contains(step->next.fingerprint()))
                continue; // back to a key already passed: no progress
            seen.insert(step->next.fingerprint());
            path.append(step->next);
            stepped = true;
        }
        if (!stepped)
            return fail(QStringLiteral("no signed rotation leads from key %1 towards key %2%3")
                            .arg(trustedPrint, target,
                                 lastRefusal.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(lastRefusal)));
    }
    return path;
}

} // namespace gleaner
