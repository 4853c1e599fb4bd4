#pragma once
// Signing-key rotation: how a coordinator replaces the key that signs its manifests without any agent having
// to enroll again. Each rotation is a statement naming the new public key, signed by the key it replaces:
//
//   {"format": "gleaner-key-rotation/1", "previous_key": "<fingerprint of the old key>",
//    "key": "<SubjectPublicKeyInfo PEM of the new key>", "issued_ms": 1795295651026}
//
// An agent that pinned key K0 and meets a coordinator signing with K2 follows the statements K0 -> K1 -> K2,
// verifying each with the key it already trusts, and pins K2. Nobody without K0's private key can write the
// first step, so a party that can alter the agent's traffic still cannot make it trust a key of its choosing.
// A statement is accepted only as a step from a key the agent trusts; its order in the list does not matter.

#include "Result.h"
#include "crypto/Ed25519.h"

#include <QByteArray>
#include <QJsonArray>
#include <QJsonObject>
#include <QList>

namespace gleaner {

struct KeyRotation
{
    QByteArray statement; // the exact UTF-8 JSON bytes that were signed
    QByteArray signature; // canonical base64 of the 64-byte Ed25519 signature, by the previous key

    // The most statements a chain may hold (and an agent reads): rotations are rare operator actions.
    static constexpr qsizetype kMaxChain = 256;
    // The longest statement or signature text read (a real statement is about 300 characters).
    static constexpr qsizetype kMaxStatement = 4096;

    static KeyRotation announce(const SigningKey& previous, const VerifyKey& next, qint64 issuedMs);

    QJsonObject toJson() const; // {"statement": "...", "signature": "..."}
    static Result<KeyRotation> fromJson(const QJsonObject& json);
    static QJsonArray toJson(const QList<KeyRotation>& chain);
    // Refuses a value that is not an array of well-formed entries, or one longer than `maxEntries` (what an
    // agent reads; the coordinator reads its own whole history).
    static Result<QList<KeyRotation>> listFromJson(const QJsonValue& json, qsizetype maxEntries = kMaxChain);

    // The keys from `pinned` to the key whose fingerprint is `target`, each step a statement signed by the key
    // before it: [pinned, K1, ..., target]. An error says why the chain does not lead there.
    static Result<QList<VerifyKey>> follow(const VerifyKey& pinned, const QList<KeyRotation>& chain,
                                           const QString& target);
};

} // namespace gleaner
