#pragma once
// Pinning a coordinator by its certificate's fingerprint, for enrollment from the organisation's policy file
// (policy/PolicyEnrollment.h). The agent connects, reads the certificates the server presents without
// verifying them (that is the point: the fingerprint is the verification), and keeps the one whose SHA-256
// matches. Nothing is sent over this connection; the enrollment that follows runs over a connection verified
// against the certificate found here, so a server that presents the right certificate without its key gets
// nowhere.

#include "Result.h"

#include <QByteArray>
#include <QString>
#include <QUrl>

namespace gleaner::agent {

// The PEM of the certificate in the chain `url`'s server presents whose SHA-256 fingerprint is `sha256`
// (PolicyEnrollment::normalizeFingerprint's form). The error names the URL and, on a mismatch, the
// fingerprints the server did present.
Result<QByteArray> presentedCertificate(const QUrl& url, const QString& sha256, int timeoutMs = 15000);

} // namespace gleaner::agent
