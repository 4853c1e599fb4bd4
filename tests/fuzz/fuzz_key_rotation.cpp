// Fuzzes what an agent reads when its coordinator names a new signing key (shared/crypto/KeyRotation): the
// input is {"target": FINGERPRINT, "rotations": [...]}, read with listFromJson and walked with follow() from
// the fixed pinned key. Nothing here can forge a signature, so the corpus holds a chain that make-corpus.py
// signed with RFC 8032's first, second and third test keys (pinned -> second -> third); mutations of its
// statements and signatures must never move trust.
// Promises checked: a refusal has a message; a path that is followed starts at the pinned key, ends at the
// target, never repeats a key, and has no more steps than the chain has statements.

#include "FuzzKeys.h"
#include "FuzzSupport.h"

#include "crypto/KeyRotation.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    fuzz::coordinatorKey();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QJsonObject input = QJsonDocument::fromJson(fuzz::bytes(data, size)).object();
    const auto chain = KeyRotation::listFromJson(input.value(QStringLiteral("rotations")));
    if (!chain) {
        fuzz::check(!chain.error().isEmpty(), "a refused list has a message");
        return 0;
    }
    static const VerifyKey pinned = fuzz::coordinatorKey().publicKey();
    const QString target = input.value(QStringLiteral("target")).toString();
    const auto path = KeyRotation::follow(pinned, *chain, target);
    if (!path) {
        fuzz::check(!path.error().isEmpty(), "a refused chain has a message");
        return 0;
    }
    fuzz::check(!path->isEmpty() && path->first() == pinned, "a followed path starts at the pinned key");
    fuzz::check(path->last().fingerprint() == target, "a followed path ends at the target", target);
    fuzz::check(path->size() <= chain->size() + 1, "a followed path has at most one step per statement");
    QSet<QString> seen;
    for (const VerifyKey& key : *path) {
        fuzz::check(!seen.contains(key.fingerprint()), "a followed path never repeats a key", key.fingerprint());
        seen.insert(key.fingerprint());
    }
    return 0;
}
