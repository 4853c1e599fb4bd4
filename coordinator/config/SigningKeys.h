#pragma once
// The coordinator's manifest signing key and the signed history of the keys it replaced (shared/crypto/
// KeyRotation.h), on disk and in memory.
//
// A rotation makes a fresh key, has the current key sign a statement naming it, and then signs every new
// manifest with the new key; agents follow the statements from the key they pinned at enrollment and never
// need to enroll again. The old private key is not kept: a key retired because it leaked must sign nothing
// more. Its durable steps, in order, each file written atomically and its folder synced:
//   1. signing-key.next.pem       the new private key (0600)
//   2. signing-key-rotations.json the chain with the new statement appended
//   3. signing-key.pem            replaced by the new key (a rename), then signing-key.pub.pem
// A crash before 2 leaves the old key in force and the next key is discarded at the next start; a crash after
// 2 is completed at the next start (the chain already announces the new key, so it must be the one in force).
//
// Threads: sign() and rotate() run on the coordinator's state thread; publicKey() and toJson() answer from
// any thread.

#include "Result.h"
#include "config/DataDirectory.h"
#include "crypto/Ed25519.h"
#include "crypto/KeyRotation.h"

#include <QJsonObject>
#include <QList>
#include <QMutex>

namespace gleaner::coordinator {

class SigningKeys
{
public:
    // Reads the key and the chain, finishes or undoes a rotation a crash interrupted, and checks that the
    // chain ends at the key in force.
    static Result<SigningKeys> load(const DataDirectory& dir);

    SigningKeys(SigningKeys&& other) noexcept;
    SigningKeys& operator=(SigningKeys&&) = delete;

    const SigningKey& current() const { return m_key; } // state thread
    VerifyKey publicKey() const;
    // {"key": PEM, "fingerprint": hex, "rotations": [{"statement", "signature"}, ...]}, oldest first.
    QJsonObject toJson() const;
    // Replaces the key as described above; answers {"fingerprint", "previous_fingerprint", "rotations"}.
    Result<QJsonObject> rotate(qint64 nowMs);

private:
    SigningKeys(const DataDirectory& dir, SigningKey key, QList<KeyRotation> chain);
    Status writeChain(const QList<KeyRotation>& chain) const;
    Status install(const VerifyKey& key) const; // step 3

    DataDirectory m_dir;
    SigningKey m_key;
    mutable QMutex m_mutex; // guards the public view below
    VerifyKey m_public;
    QList<KeyRotation> m_chain;
};

} // namespace gleaner::coordinator
