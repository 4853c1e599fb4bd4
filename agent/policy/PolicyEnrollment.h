#pragma once
// Enrollment from the organisation's policy file: a managed fleet gets one package and one file, and each
// machine's system agent enrolls itself the first time it starts. The file's "enrollment" object:
//
//   "enrollment": {
//     "url": "https://coordinator.example:8443",
//     "token_file": "/etc/gleaner/enrollment-token",        (or "token": "...": see docs/fleet.md)
//     "certificate_sha256": "3A:F0:...:9C",                  (optional: pins that certificate)
//     "name_prefix": "office-"                               (optional: prefix of the host name the admin sees)
//   }
//
// With "certificate_sha256" the agent reads the certificate the coordinator presents, keeps the one whose
// SHA-256 fingerprint (as `gleaner-coordinator init` prints it, colons and case optional) matches, and pins it
// as its only trust anchor, exactly as `gleaner-agent enroll --ca FILE` would. Without it the system's
// authorities must vouch for the coordinator. Every error names the file and the key.

#include "Result.h"

#include <QJsonValue>
#include <QString>

#include <optional>

namespace gleaner::agent {

struct PolicyEnrollment
{
    QString url;
    QString token;     // read from "token_file" when the file names one
    QString tokenFile; // empty when the token is inline
    QString certificateSha256; // 64 uppercase hex digits, no colons; empty: trust the system's authorities
    QString namePrefix;

    // The "enrollment" value of `policyFile`, checked (the token file is not read here). Nothing when the
    // value is absent.
    static Result<std::optional<PolicyEnrollment>> parse(const QJsonValue& value, const QString& policyFile);
    // Reads `policyFile` (missing: nothing) and parses its "enrollment"; reads the token file too.
    static Result<std::optional<PolicyEnrollment>> read(const QString& policyFile);

    // "3a:f0 ..." or "3AF0...": 64 uppercase hex digits, or empty when it is not a SHA-256 fingerprint.
    static QString normalizeFingerprint(const QString& text);
};

} // namespace gleaner::agent
