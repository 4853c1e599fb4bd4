// Fuzzes the signed envelope as it arrives in a lease reply (shared/crypto/SignedEnvelope): the input is the
// JSON text {"manifest": "...", "signature": "..."}, read with fromJson, checked with verify and then, as
// the agent does, with checkManifest. Nothing here can forge a signature, so the corpus holds envelopes that
// make-corpus.py signed with the fixed key: mutations of their signature text reach the strict base64 rules,
// and mutations of the manifest text must all be refused.
// Promises checked: a refusal has a message; an envelope that verifies has the exact signature of its
// manifest bytes (canonical base64 of that signature, nothing else), and toJson() of it reads back the same.

#include "FuzzKeys.h"
#include "FuzzSupport.h"

#include "crypto/SignedEnvelope.h"

#include <QJsonDocument>

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    fuzz::coordinatorKey();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QJsonDocument document = QJsonDocument::fromJson(fuzz::bytes(data, size));
    const Result<SignedEnvelope> envelope = SignedEnvelope::fromJson(document.object());
    if (!envelope) {
        fuzz::check(!envelope.error().isEmpty(), "a refused envelope has a message");
        return 0;
    }
    static const VerifyKey pinned = fuzz::coordinatorKey().publicKey();
    const Result<QJsonObject> verified = SignedEnvelope::verify(pinned, *envelope);
    const Result<agent::TaskManifest> task =
        agent::checkManifest(pinned, envelope->manifest, envelope->signature, fuzz::expectation());
    fuzz::check(!task || verified, "checkManifest accepts only what verifies");
    if (!verified) {
        fuzz::check(!verified.error().isEmpty(), "a refused envelope has a message");
        return 0;
    }

    // Ed25519 signatures are deterministic: the one signature of these bytes, in its one spelling.
    const SignedEnvelope expected = SignedEnvelope::sign(fuzz::coordinatorKey(), envelope->manifest);
    fuzz::check(envelope->signature == expected.signature, "only the canonical signature text verifies",
                QString::fromLatin1(envelope->signature));
    const QByteArray wire = QJsonDocument(envelope->toJson()).toJson(QJsonDocument::Compact);
    const Result<SignedEnvelope> again = SignedEnvelope::fromJson(QJsonDocument::fromJson(wire).object());
    fuzz::check(again && again->manifest == envelope->manifest && again->signature == envelope->signature,
                "a verified envelope reads back the same from its lease-reply JSON");
    return 0;
}
