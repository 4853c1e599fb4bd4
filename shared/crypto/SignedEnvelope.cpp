#include "crypto/SignedEnvelope.h"

#include <QJsonDocument>
#include <QJsonParseError>
#include <QJsonValue>

namespace gleaner {
namespace {

const QString kManifestField = QStringLiteral("manifest");
const QString kSignatureField = QStringLiteral("signature");

} // namespace

SignedEnvelope SignedEnvelope::sign(const SigningKey& key, QByteArray manifestJson)
{
    SignedEnvelope envelope;
    envelope.signature = key.sign(manifestJson).toBase64();
    envelope.manifest = std::move(manifestJson);
    return envelope;
}

Result<QJsonObject> SignedEnvelope::verify(const VerifyKey& key, const SignedEnvelope& envelope)
{
    if (key.isNull())
        return fail(QStringLiteral("cannot check the manifest signature: no coordinator key is pinned; "
                                   "enroll the agent again or set the coordinator key in its policy"));
    if (envelope.signature.isEmpty())
        return fail(QStringLiteral("the manifest has no signature; it was not run. The coordinator must sign "
                                   "every manifest"));

    const auto decoded = QByteArray::fromBase64Encoding(
        envelope.signature, QByteArray::Base64Encoding | QByteArray::AbortOnBase64DecodingErrors);
    // Qt accepts missing padding and stray low bits; requiring the canonical spelling keeps one signature to
    // one text, so logs and caches that compare signature strings cannot be fooled by a respelling.
    if (decoded.decodingStatus != QByteArray::Base64DecodingStatus::Ok ||
        decoded.decoded.toBase64() != envelope.signature)
        return fail(QStringLiteral("the manifest signature is not canonical base64 (%1 characters received); "
                                   "the lease reply is damaged or was not written by a Gleaner coordinator")
                        .arg(envelope.signature.size()));
    if (decoded.decoded.size() != VerifyKey::kSignatureSize)
        return fail(
            QStringLiteral("the manifest signature is %1 bytes, but an Ed25519 signature is %2; the lease "
                           "reply is damaged or was not written by a Gleaner coordinator")
                .arg(decoded.decoded.size())
                .arg(VerifyKey::kSignatureSize));

    // The signature covers the bytes as received: nothing is parsed or normalised before this check.
    if (!key.verify(envelope.manifest, decoded.decoded))
        return fail(
            QStringLiteral("manifest signature does not verify with the pinned coordinator key "
                           "(fingerprint %1): the task was altered or signed by another coordinator; "
                           "it was not run. If the coordinator's key was replaced on purpose, pin the "
                           "new key")
                .arg(key.fingerprint()));

    QJsonParseError parseError;
    const QJsonDocument document = QJsonDocument::fromJson(envelope.manifest, &parseError);
    if (parseError.error != QJsonParseError::NoError)
        return fail(QStringLiteral("the manifest is correctly signed but is not valid JSON (%1 at byte %2); "
                                   "the coordinator wrote a broken manifest: report it to its operator")
                        .arg(parseError.errorString())
                        .arg(parseError.offset));
    if (!document.isObject())
        return fail(QStringLiteral("the manifest is correctly signed but is a JSON %1, not an object; the "
                                   "coordinator wrote a broken manifest: report it to its operator")
                        .arg(document.isArray() ? QStringLiteral("array") : QStringLiteral("value")));
    return document.object();
}

QJsonObject SignedEnvelope::toJson() const
{
    return QJsonObject{
        {kManifestField, QString::fromUtf8(manifest)},
        {kSignatureField, QString::fromUtf8(signature)},
    };
}

Result<SignedEnvelope> SignedEnvelope::fromJson(const QJsonObject& json)
{
    const QJsonValue manifest = json.value(kManifestField);
    const QJsonValue signature = json.value(kSignatureField);
    if (!manifest.isString())
        return fail(QStringLiteral("the task has no \"manifest\" string (the signed manifest travels as JSON "
                                   "text); the coordinator speaks another protocol version or the reply is "
                                   "damaged"));
    if (!signature.isString())
        return fail(
            QStringLiteral("the task has no \"signature\" string; the coordinator speaks another protocol "
                           "version or the reply is damaged"));
    SignedEnvelope envelope;
    envelope.manifest = manifest.toString().toUtf8();
    // Base64 is ASCII; anything else is kept as UTF-8 here and refused by verify() as not base64.
    envelope.signature = signature.toString().toUtf8();
    return envelope;
}

} // namespace gleaner
