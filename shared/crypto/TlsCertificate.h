#pragma once
// The coordinator's TLS certificate. Most coordinators run on a LAN or a lab machine with no public CA behind
// them, so Gleaner makes a self-signed certificate and agents trust it by pinning it (`--ca FILE`, or after
// an operator compared its fingerprint), never by switching verification off. The certificate is therefore
// its own CA (basicConstraints CA:TRUE): libcurl, Python's ssl module and OpenSSL chain verification all
// accept it as the only trust anchor and still check the host name against its subjectAltNames. Everything is
// PEM, so `openssl x509` and `openssl s_server` read what this class writes, and a certificate from a real CA
// (a Let's Encrypt fullchain.pem with its privkey.pem) loads here too.

#include "Result.h"

#include <QByteArray>
#include <QString>
#include <QStringList>

namespace gleaner {

struct TlsIdentity
{
    // One or more "-----BEGIN CERTIFICATE-----" blocks: the server's own certificate first, then any
    // intermediates it should send. Every function here looks at the first certificate only.
    QByteArray certificatePem;
    // Unencrypted private key PEM matching the first certificate. The owner of this struct should wipe it
    // (SecureFile::wipe) when done.
    QByteArray privateKeyPem;
};

class TlsCertificate
{
public:
    // 825 days: the longest lifetime Apple's TLS clients accept for a server certificate.
    static constexpr int kDefaultValidDays = 825;

    // A fresh ECDSA P-256 key and a self-signed X.509 v3 certificate for `names`, signed with SHA-256. The
    // first name becomes the subject's common name; every name becomes a subjectAltName: an IPv4 or IPv6
    // address ("127.0.0.1", "::1") as an IP entry, anything else as a DNS entry, which must be a host name
    // (ASCII letters, digits, '-' and '.', optionally "*." in front; IDN names in their xn-- form). DNS names
    // are lowercased and repeated names dropped. The certificate is valid from an hour ago, so a client whose
    // clock lags does not refuse it, for `validDays` (1 to 36500).
    static Result<TlsIdentity> generateSelfSigned(const QStringList& names,
                                                  int validDays = kDefaultValidDays);

    // Writes the private key (mode 0600) and then the certificate (mode 0644), each atomically through
    // SecureFile, after checking that they belong together. Refuses symbolic links.
    static Status save(const TlsIdentity& identity, const QString& certPath, const QString& keyPath);

    // Reads a certificate and its key, and refuses, with a message that names the file and what to do: a
    // missing or unreadable file, a file that is not PEM, a passphrase-protected key, a key file other users
    // can read (group read is allowed, for Debian's ssl-cert group), a key that does not belong to the
    // certificate, and a certificate that has expired or is not valid yet.
    static Result<TlsIdentity> load(const QString& certPath, const QString& keyPath);

    // SHA-256 of the first certificate's DER bytes as uppercase hex pairs joined by ':' ("3A:F0:...", 95
    // characters): what browsers and `openssl x509 -noout -fingerprint -sha256` show, so an operator can
    // compare the agent's "trust this certificate?" prompt with the coordinator's console.
    static Result<QString> fingerprint(const QByteArray& certificatePem);

    // The subjectAltNames of the first certificate, in order, as "DNS:name" or "IP:address" (other kinds as
    // "email:", "URI:" or "other").
    static Result<QStringList> subjectAltNames(const QByteArray& certificatePem);
};

} // namespace gleaner
