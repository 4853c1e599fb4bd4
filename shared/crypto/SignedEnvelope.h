#pragma once
// A task manifest as it travels from the coordinator to an agent: the exact JSON bytes the coordinator signed
// and its Ed25519 signature. The agent checks the signature with the pinned coordinator key over those exact
// bytes BEFORE it parses them, so a JSON parser never sees input from anyone but the coordinator, and only
// then reads the fields. Inside a lease reply the manifest travels as a JSON string, not as a nested object:
// re-serialising an object can reorder keys or reformat numbers, which would break the signature, while a
// string gives back the same bytes.

#include "Result.h"
#include "crypto/Ed25519.h"

#include <QByteArray>
#include <QJsonObject>

namespace gleaner {

struct SignedEnvelope
{
    QByteArray manifest;  // the exact UTF-8 JSON bytes that were signed
    QByteArray signature; // canonical base64 text of the 64-byte Ed25519 signature of `manifest`

    // `manifestJson` must be UTF-8 (all JSON is); its bytes are signed as they are, never re-serialised.
    static SignedEnvelope sign(const SigningKey& key, QByteArray manifestJson);

    // The manifest's JSON object, or a message saying what failed and what to do. Order: the signature is
    // decoded strictly (canonical base64 of exactly 64 bytes), then verified over the exact manifest bytes,
    // and only then is the manifest parsed, which must give a JSON object.
    static Result<QJsonObject> verify(const VerifyKey& key, const SignedEnvelope& envelope);

    // {"manifest": "<the manifest JSON text as a string>", "signature": "<base64>"}, for a lease reply.
    QJsonObject toJson() const;
    // Reads what toJson() wrote; both fields must be strings. Checks the shape only: call verify() next.
    static Result<SignedEnvelope> fromJson(const QJsonObject& json);
};

} // namespace gleaner
