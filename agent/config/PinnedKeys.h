#pragma once
// The coordinator signing keys an agent trusts, in its data directory:
//   coordinator-key.pem           the key in force: every new manifest must verify with it
//   coordinator-key-history.json  {"keys": [PEM, ...]}: keys it replaced by following signed rotations
//                                 (shared/crypto/KeyRotation.h), newest first
// Enrollment pins the first key and clears the history. When a lease reply names another key, the agent reads
// the coordinator's rotations and follows them from the key it trusts (follow()); only a chain of statements,
// each signed by the key before it, moves the pin. The keys passed are kept to re-check the manifests of
// subtasks leased before the rotation, which the agent stored and still works on; a new lease must verify with
// the key in force.

#include "Result.h"
#include "crypto/Ed25519.h"
#include "crypto/KeyRotation.h"

#include <QList>
#include <QString>

namespace gleaner::agent {

class PinnedKeys
{
public:
    static QString historyPath(const QString& dir);
    // Reads both files; an unreadable pin is an error that says to enroll again.
    static Result<PinnedKeys> load(const QString& dir);
    // After enrollment: the new pin has no history.
    static Status resetHistory(const QString& dir);

    const VerifyKey& current() const { return m_current; }
    // The key in force first, then the keys it replaced, newest first.
    QList<VerifyKey> all() const;

    // Follows `rotations` from the key in force to the key with fingerprint `target`, and pins it: the history
    // is written first, then the pin, each atomically, so a crash leaves either the old pin or the new one.
    // Returns how many rotations were followed.
    Result<int> follow(const QList<KeyRotation>& rotations, const QString& target);

private:
    PinnedKeys(QString dir, VerifyKey current, QList<VerifyKey> former);

    QString m_dir;
    VerifyKey m_current;
    QList<VerifyKey> m_former;
};

} // namespace gleaner::agent
