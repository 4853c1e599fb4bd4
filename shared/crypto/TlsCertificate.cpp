#include "crypto/TlsCertificate.h"

#include "crypto/OpenSslError.h"
#include "crypto/SecureFile.h"

#include <QDateTime>
#include <QFileInfo>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace gleaner {
namespace {

// A chain of a few certificates is a few kilobytes; the caps keep a wrong path (a log, a dataset) from being
// read whole.
constexpr qsizetype kMaxCertificateFileSize = 1024 * 1024;
constexpr qsizetype kMaxKeyFileSize = 64 * 1024;
constexpr int kMaxValidDays = 36500;
// X.509's upper bound for a common name (RFC 5280 ub-common-name); OpenSSL refuses longer ones.
constexpr qsizetype kMaxCommonNameLength = 64;
// RFC 1035: 253 characters of text for a whole name, 63 for one label.
constexpr qsizetype kMaxHostNameLength = 253;
constexpr qsizetype kMaxLabelLength = 63;

using namespace crypto_detail;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;

// One subjectAltName: the text a person gave and reads back, and what goes into the certificate.
struct AltName
{
    bool isIp = false;
    QString text;       // lowercased DNS name, or the address as given
    QByteArray encoded; // DNS name in ASCII, or the 4 or 16 raw address bytes
};

QString openSslFailure(const char* what)
{
    return QStringLiteral("OpenSSL could not %1: %2")
        .arg(QLatin1StringView(what), crypto_detail::takeOpenSslErrors());
}

// Empty when `label` is a valid host name label, else why not.
QString labelProblem(QStringView label)
{
    if (label.isEmpty())
        return QStringLiteral("it has an empty label (two dots in a row, or a dot at an end)");
    if (label.size() > kMaxLabelLength)
        return QStringLiteral("the label \"%1\" is longer than %2 characters")
            .arg(label)
            .arg(kMaxLabelLength);
    if (label.startsWith(u'-') || label.endsWith(u'-'))
        return QStringLiteral("the label \"%1\" starts or ends with '-'").arg(label);
    for (const QChar c : label) {
        const bool allowed = (c >= u'a' && c <= u'z') || (c >= u'0' && c <= u'9') || c == u'-';
        if (!allowed) {
            if (c.unicode() > 0x7f)
                return QStringLiteral("'%1' is not ASCII; give an internationalised name in its xn-- form")
                    .arg(c);
            return QStringLiteral("'%1' is not allowed in a host name (letters, digits, '-' and '.' are)")
                .arg(c);
        }
    }
    return {};
}

// Sorts one name into an IP or DNS subjectAltName, or says why it is neither.
Result<AltName> parseAltName(const QString& name)
{
    const auto refuse = [&name](const QString& why) {
        return fail(QStringLiteral("\"%1\" is not a host name or IP address: %2").arg(name, why));
    };
    if (name.isEmpty())
        return fail(QStringLiteral("an empty name cannot go into a certificate"));

    // inet_pton is strict: dotted quads only for IPv4 (no "127.1"), no zone ("%eth0") and no brackets for
    // IPv6, so nothing ambiguous becomes an IP entry.
    const QByteArray latin1 = name.toLatin1();
    unsigned char address[16] = {};
    if (::inet_pton(AF_INET, latin1.constData(), address) == 1)
        return AltName{true, name, QByteArray(reinterpret_cast<const char*>(address), 4)};
    if (::inet_pton(AF_INET6, latin1.constData(), address) == 1)
        return AltName{true, name, QByteArray(reinterpret_cast<const char*>(address), 16)};

    // Host names compare without case; lowercase keeps the SAN list canonical and duplicates findable.
    const QString host = name.toLower();
    if (host.size() > kMaxHostNameLength)
        return refuse(QStringLiteral("it is longer than %1 characters").arg(kMaxHostNameLength));
    const bool wildcard = host.startsWith(u"*.");
    const QStringList labels = QStringView(host).mid(wildcard ? 2 : 0).toString().split(u'.');
    for (const QString& label : labels) {
        if (const QString problem = labelProblem(label); !problem.isEmpty())
            return refuse(problem);
    }
    // "1.2.3.4.5" or "300.1.1.1": a mistyped address must not silently become a DNS name no one can resolve.
    const bool allNumeric = std::all_of(labels.cbegin(), labels.cend(), [](const QString& label) {
        return std::all_of(label.cbegin(), label.cend(), [](QChar c) { return c.isDigit(); });
    });
    if (allNumeric)
        return refuse(QStringLiteral("it looks like an IPv4 address, but is not a valid one"));
    // Clients refuse a wildcard directly under a top-level domain ("*.org"), so it would never match.
    if (wildcard && labels.size() < 2)
        return refuse(
            QStringLiteral("a wildcard needs at least two labels after \"*.\", as in *.example.org"));
    return AltName{false, host, host.toLatin1()};
}

Status addExtension(X509* certificate, X509V3_CTX* context, int nid, const char* value)
{
    ExtensionPtr extension(X509V3_EXT_conf_nid(nullptr, context, nid, value));
    if (!extension || X509_add_ext(certificate, extension.get(), -1) != 1)
        return fail(QStringLiteral("OpenSSL could not add the %1 extension: %2")
                        .arg(QLatin1StringView(OBJ_nid2sn(nid)), crypto_detail::takeOpenSslErrors()));
    return {};
}

Status addAltNames(X509* certificate, const QList<AltName>& names)
{
    GeneralNamesPtr list(GENERAL_NAMES_new());
    if (!list)
        return fail(openSslFailure("allocate the subjectAltName list"));
    for (const AltName& name : names) {
        ASN1_STRING* value = name.isIp ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new();
        GENERAL_NAME* entry = value ? GENERAL_NAME_new() : nullptr;
        if (!entry || ASN1_STRING_set(value, name.encoded.constData(), int(name.encoded.size())) != 1) {
            ASN1_STRING_free(value);
            GENERAL_NAME_free(entry);
            return fail(openSslFailure("build a subjectAltName"));
        }
        // The entry owns `value` from here on, and the list owns the entry once pushed.
        GENERAL_NAME_set0_value(entry, name.isIp ? GEN_IPADD : GEN_DNS, value);
        if (sk_GENERAL_NAME_push(list.get(), entry) <= 0) {
            GENERAL_NAME_free(entry);
            return fail(openSslFailure("build the subjectAltName list"));
        }
    }
    if (X509_add1_ext_i2d(certificate, NID_subject_alt_name, list.get(), 0, X509V3_ADD_DEFAULT) != 1)
        return fail(openSslFailure("add the subjectAltName extension"));
    return {};
}

// A random positive 127-bit serial: RFC 5280 wants serials unique per issuer, and random ones stay unique
// without any record of the serials already used.
Status setRandomSerial(X509* certificate)
{
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof(bytes)) != 1)
        return fail(openSslFailure("draw a random serial number"));
    bytes[0] &= 0x7f;
    bytes[sizeof(bytes) - 1] |= 0x01; // never zero, which some clients refuse
    BignumPtr serial(BN_bin2bn(bytes, sizeof(bytes), nullptr));
    if (!serial || !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate)))
        return fail(openSslFailure("set the serial number"));
    return {};
}

QString formatTime(const ASN1_TIME* time)
{
    struct tm parts = {};
    if (!time || ASN1_TIME_to_tm(time, &parts) != 1)
        return QStringLiteral("an unreadable date");
    const QDateTime utc(QDate(parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday),
                        QTime(parts.tm_hour, parts.tm_min, parts.tm_sec), Qt::UTC);
    return utc.toString(Qt::ISODate);
}

Result<X509Ptr> parseCertificate(QByteArrayView pem)
{
    BioPtr bio = readBio(pem);
    // PEM_read skips blocks of other kinds, so a file that holds the key before the certificate still works.
    X509Ptr certificate(bio ? PEM_read_bio_X509(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!certificate) {
        const QString detail = crypto_detail::takeOpenSslErrors();
        if (pem.contains(QByteArrayView("PRIVATE KEY")) && !pem.contains(QByteArrayView("CERTIFICATE")))
            return fail(QStringLiteral("this is a private key, not a certificate"));
        return fail(QStringLiteral("not a PEM certificate (expected \"-----BEGIN CERTIFICATE-----\"): %1")
                        .arg(detail));
    }
    return certificate;
}

Result<PkeyPtr> parsePrivateKey(QByteArrayView pem)
{
    if (pem.contains(QByteArrayView("ENCRYPTED PRIVATE KEY")) ||
        pem.contains(QByteArrayView("Proc-Type: 4,")))
        return fail(
            QStringLiteral("the private key is protected by a passphrase, which a service cannot type; "
                           "write an unencrypted copy (`openssl pkey -in KEY -out NEW`) and protect it "
                           "with `chmod 600 NEW` instead"));
    BioPtr bio = readBio(pem);
    PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!key)
        return fail(QStringLiteral("not a PEM private key (expected \"-----BEGIN PRIVATE KEY-----\"): %1")
                        .arg(crypto_detail::takeOpenSslErrors()));
    return key;
}

bool keyMatches(X509* certificate, EVP_PKEY* key)
{
    const bool matches = X509_check_private_key(certificate, key) == 1;
    // A mismatch leaves an entry on the queue; drop it so it is not blamed on the next caller.
    ERR_clear_error();
    return matches;
}

} // namespace

Result<TlsIdentity> TlsCertificate::generateSelfSigned(const QStringList& names, int validDays)
{
    if (names.isEmpty())
        return fail(QStringLiteral("a certificate needs at least one host name or IP address that agents use "
                                   "to reach the coordinator"));
    if (validDays < 1 || validDays > kMaxValidDays)
        return fail(QStringLiteral("a certificate's validity is 1 to %1 days, got %2")
                        .arg(kMaxValidDays)
                        .arg(validDays));
    QList<AltName> altNames;
    for (const QString& name : names) {
        Result<AltName> altName = parseAltName(name);
        if (!altName.ok())
            return fail(altName.error());
        const bool repeated = std::any_of(altNames.cbegin(), altNames.cend(), [&](const AltName& seen) {
            return seen.isIp == altName->isIp && seen.encoded == altName->encoded;
        });
        if (!repeated)
            altNames.append(std::move(altName).value());
    }

    // P-256 rather than RSA: every TLS client supports it, keys generate in a millisecond, handshakes are
    // cheap.
    PkeyPtr key(EVP_EC_gen("P-256"));
    X509Ptr certificate(X509_new());
    if (!key || !certificate)
        return fail(openSslFailure("generate an ECDSA P-256 key"));
    if (X509_set_version(certificate.get(), X509_VERSION_3) != 1 ||
        X509_set_pubkey(certificate.get(), key.get()) != 1)
        return fail(openSslFailure("start the certificate"));
    if (Status serial = setRandomSerial(certificate.get()); !serial.ok())
        return fail(serial.error());
    // An hour back, so an agent whose clock lags the coordinator's does not see a certificate from the
    // future.
    if (!X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -3600) ||
        !X509_time_adj_ex(X509_getm_notAfter(certificate.get()), validDays, 0, nullptr))
        return fail(openSslFailure("set the validity period"));

    // The common name is for people reading the certificate; clients match the subjectAltNames. A name too
    // long for a CN is still in the SANs, so a fixed label stands in for it.
    const QByteArray commonName = altNames.first().text.size() <= kMaxCommonNameLength
                                      ? altNames.first().text.toUtf8()
                                      : QByteArray("Gleaner coordinator");
    X509_NAME* subject = X509_get_subject_name(certificate.get());
    if (X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(commonName.constData()),
                                   int(commonName.size()), -1, 0) != 1 ||
        X509_set_issuer_name(certificate.get(), subject) != 1)
        return fail(openSslFailure("set the certificate's name"));

    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, certificate.get(), certificate.get(), nullptr, nullptr, 0);
    // CA:TRUE makes the certificate a well-formed trust anchor for the file agents pin (libcurl's --cacert,
    // Python's cafile=, `openssl verify -CAfile`) and lets it be imported as an authority where only CAs may
    // be (NSS). The cost: Firefox reports MOZILLA_PKIX_ERROR_CA_CERT_USED_AS_END_ENTITY for the dashboard
    // (an exception still works) and rustls/webpki refuse it. keyCertSign goes with CA:TRUE, and the subject
    // key identifier must exist before the authority key identifier that copies it.
    const std::pair<int, const char*> extensions[] = {
        {NID_basic_constraints, "critical,CA:TRUE"},
        {NID_key_usage, "critical,digitalSignature,keyCertSign"},
        {NID_ext_key_usage, "serverAuth"},
        {NID_subject_key_identifier, "hash"},
        {NID_authority_key_identifier, "keyid:always"},
    };
    for (const auto& [nid, value] : extensions) {
        if (Status added = addExtension(certificate.get(), &context, nid, value); !added.ok())
            return fail(added.error());
    }
    if (Status added = addAltNames(certificate.get(), altNames); !added.ok())
        return fail(added.error());
    if (X509_sign(certificate.get(), key.get(), EVP_sha256()) <= 0)
        return fail(openSslFailure("sign the certificate"));

    BioPtr certificateBio(BIO_new(BIO_s_mem()));
    // A secure-memory BIO is wiped when freed, so the key's PEM text leaves no copy in OpenSSL's buffers.
    BioPtr keyBio(BIO_new(BIO_s_secmem()));
    if (!certificateBio || !keyBio || PEM_write_bio_X509(certificateBio.get(), certificate.get()) != 1 ||
        PEM_write_bio_PKCS8PrivateKey(keyBio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
        return fail(openSslFailure("write the certificate and key as PEM"));
    return TlsIdentity{bioContents(certificateBio.get()), bioContents(keyBio.get())};
}

Status TlsCertificate::save(const TlsIdentity& identity, const QString& certPath, const QString& keyPath)
{
    if (QFileInfo(certPath).absoluteFilePath() == QFileInfo(keyPath).absoluteFilePath())
        return fail(QStringLiteral("the certificate and the private key must go to two files, both were %1")
                        .arg(certPath));
    // Checked before anything is written, so a mismatched pair never replaces a working one on disk.
    Result<X509Ptr> certificate = parseCertificate(identity.certificatePem);
    if (!certificate.ok())
        return fail(QStringLiteral("cannot save %1: %2").arg(certPath, certificate.error()));
    Result<PkeyPtr> key = parsePrivateKey(identity.privateKeyPem);
    if (!key.ok())
        return fail(QStringLiteral("cannot save %1: %2").arg(keyPath, key.error()));
    if (!keyMatches(certificate->get(), key->get()))
        return fail(
            QStringLiteral("cannot save %1 and %2: the private key does not belong to the certificate")
                .arg(certPath, keyPath));

    // The key first: a crash between the two writes leaves a new key beside the old certificate, which load()
    // reports as a mismatch, instead of a new certificate that a pinned agent would see with the old key.
    if (Status saved = SecureFile::write(keyPath, identity.privateKeyPem, S_IRUSR | S_IWUSR,
                                         QStringLiteral("TLS private key"));
        !saved.ok())
        return saved;
    return SecureFile::write(certPath, identity.certificatePem, S_IRUSR | S_IWUSR | S_IRGRP | S_IROTH,
                             QStringLiteral("TLS certificate"));
}

Result<TlsIdentity> TlsCertificate::load(const QString& certPath, const QString& keyPath)
{
    if (!QFileInfo::exists(certPath))
        return fail(QStringLiteral("the TLS certificate %1 does not exist; check the path, or generate a "
                                   "self-signed certificate for this host")
                        .arg(certPath));
    if (!QFileInfo::exists(keyPath))
        return fail(QStringLiteral("the TLS private key %1 does not exist; check the path, or generate a new "
                                   "certificate and key together")
                        .arg(keyPath));

    Result<QByteArray> certificatePem =
        SecureFile::read(certPath, QStringLiteral("TLS certificate"), kMaxCertificateFileSize);
    if (!certificatePem.ok())
        return fail(certificatePem.error());
    Result<X509Ptr> certificate = parseCertificate(*certificatePem);
    if (!certificate.ok())
        return fail(certPath + QStringLiteral(": ") + certificate.error());

    // Group read stays allowed: Debian gives TLS keys to services through the ssl-cert group (mode 0640).
    Result<QByteArray> keyPem = SecureFile::read(
        keyPath, QStringLiteral("TLS private key"), kMaxKeyFileSize, S_IRWXO,
        QStringLiteral("anyone who can read it can pose as this coordinator to every agent"));
    if (!keyPem.ok())
        return fail(keyPem.error());
    Result<PkeyPtr> key = parsePrivateKey(*keyPem);
    if (!key.ok()) {
        SecureFile::wipe(*keyPem);
        return fail(keyPath + QStringLiteral(": ") + key.error());
    }
    if (!keyMatches(certificate->get(), key->get())) {
        SecureFile::wipe(*keyPem);
        return fail(
            QStringLiteral("the private key %1 does not belong to the certificate %2; give the key that "
                           "was made with this certificate, or generate a new certificate and key")
                .arg(keyPath, certPath));
    }

    const ASN1_TIME* notBefore = X509_get0_notBefore(certificate->get());
    const ASN1_TIME* notAfter = X509_get0_notAfter(certificate->get());
    // X509_cmp_current_time: -1 when the time is before now, 1 after, 0 when it cannot be read.
    QString invalid;
    if (X509_cmp_current_time(notAfter) <= 0)
        invalid = QStringLiteral("the TLS certificate %1 expired on %2 UTC; renew it or generate a new one "
                                 "(agents that pinned the old certificate must then trust the new one)")
                      .arg(certPath, formatTime(notAfter));
    else if (X509_cmp_current_time(notBefore) >= 0)
        invalid =
            QStringLiteral("the TLS certificate %1 is valid only from %2 UTC, but this machine's clock says "
                           "%3 UTC; check the clock")
                .arg(certPath, formatTime(notBefore), QDateTime::currentDateTimeUtc().toString(Qt::ISODate));
    ERR_clear_error();
    if (!invalid.isEmpty()) {
        SecureFile::wipe(*keyPem);
        return fail(invalid);
    }
    return TlsIdentity{std::move(certificatePem).value(), std::move(keyPem).value()};
}

Result<QString> TlsCertificate::fingerprint(const QByteArray& certificatePem)
{
    Result<X509Ptr> certificate = parseCertificate(certificatePem);
    if (!certificate.ok())
        return fail(certificate.error());
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (X509_digest(certificate->get(), EVP_sha256(), digest, &length) != 1)
        return fail(openSslFailure("hash the certificate"));
    return QString::fromLatin1(
        QByteArray(reinterpret_cast<const char*>(digest), qsizetype(length)).toHex(':').toUpper());
}

Result<QStringList> TlsCertificate::subjectAltNames(const QByteArray& certificatePem)
{
    Result<X509Ptr> certificate = parseCertificate(certificatePem);
    if (!certificate.ok())
        return fail(certificate.error());
    int critical = 0;
    GeneralNamesPtr names(static_cast<GENERAL_NAMES*>(
        X509_get_ext_d2i(certificate->get(), NID_subject_alt_name, &critical, nullptr)));
    if (!names) {
        ERR_clear_error();
        // -1: the extension is absent, which is a valid (if useless to modern clients) certificate.
        if (critical == -1)
            return QStringList();
        return fail(QStringLiteral("the certificate's subjectAltName extension is damaged or repeated"));
    }

    QStringList result;
    for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
        const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
        int type = 0;
        const void* value = GENERAL_NAME_get0_value(name, &type);
        // Only these four kinds hold an ASN1_STRING; the others (directory names, other names) are
        // structures of their own and are only counted.
        const bool isString = type == GEN_DNS || type == GEN_IPADD || type == GEN_EMAIL || type == GEN_URI;
        if (!isString || !value) {
            result.append(QStringLiteral("other"));
            continue;
        }
        const auto* string = static_cast<const ASN1_STRING*>(value);
        const QByteArray bytes(reinterpret_cast<const char*>(ASN1_STRING_get0_data(string)),
                               ASN1_STRING_length(string));
        if (type == GEN_IPADD) {
            char text[INET6_ADDRSTRLEN] = {};
            const int family = bytes.size() == 4 ? AF_INET : bytes.size() == 16 ? AF_INET6 : 0;
            const bool readable = family != 0 && ::inet_ntop(family, bytes.constData(), text, sizeof(text));
            result.append(QStringLiteral("IP:") +
                          (readable ? QString::fromLatin1(text) : QString::fromLatin1(bytes.toHex())));
        } else {
            const QString prefix = type == GEN_DNS     ? QStringLiteral("DNS:")
                                   : type == GEN_EMAIL ? QStringLiteral("email:")
                                                       : QStringLiteral("URI:");
            result.append(prefix + QString::fromLatin1(bytes));
        }
    }
    return result;
}

} // namespace gleaner
