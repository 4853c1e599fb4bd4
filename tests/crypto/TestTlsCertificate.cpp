#include "crypto/TlsCertificate.h"

#include "TestSupport.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTest>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <sys/stat.h>

using namespace gleaner;

class TestTlsCertificate : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void altNames_data();
    void altNames();
    void invalidNamesAreRefused_data();
    void invalidNamesAreRefused();
    void badArgumentsAreRefused();
    void certificateFields();
    void openSslShowsCaAndNames();
    void openSslVerifiesAsOwnCa();
    void fingerprintMatchesOpenSsl();
    void saveWritesModes0644And0600();
    void saveRefusesMismatchedPair();
    void loadRefuses_data();
    void loadRefuses();
    void handshake_data();
    void handshake();
};

namespace {

template <auto FreeFunction> struct Deleter
{
    template <typename T> void operator()(T* pointer) const { FreeFunction(pointer); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, Deleter<SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, Deleter<SSL_free>>;

const QStringList kAllNames{QStringLiteral("localhost"), QStringLiteral("127.0.0.1"), QStringLiteral("::1"),
                            QStringLiteral("a.example.org"), QStringLiteral("*.example.org")};

X509Ptr certificateOf(const QByteArray& pem)
{
    BioPtr bio(BIO_new_mem_buf(pem.constData(), int(pem.size())));
    return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr keyOf(const QByteArray& pem)
{
    BioPtr bio(BIO_new_mem_buf(pem.constData(), int(pem.size())));
    return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

QByteArray pemOf(X509* certificate)
{
    BioPtr bio(BIO_new(BIO_s_mem()));
    PEM_write_bio_X509(bio.get(), certificate);
    char* data = nullptr;
    const long length = BIO_get_mem_data(bio.get(), &data);
    return QByteArray(data, qsizetype(length));
}

TlsIdentity generate(const QStringList& names = kAllNames)
{
    Result<TlsIdentity> identity = TlsCertificate::generateSelfSigned(names);
    if (!identity.ok())
        qFatal("generateSelfSigned failed: %s", qPrintable(identity.error()));
    return std::move(identity).value();
}

// The same certificate with its validity moved by whole days and signed again by its own key: how an expired
// or not-yet-valid certificate is made without waiting.
QByteArray withValidity(const TlsIdentity& identity, long fromDays, long toDays)
{
    X509Ptr certificate = certificateOf(identity.certificatePem);
    PkeyPtr key = keyOf(identity.privateKeyPem);
    X509_time_adj_ex(X509_getm_notBefore(certificate.get()), int(fromDays), 0, nullptr);
    X509_time_adj_ex(X509_getm_notAfter(certificate.get()), int(toDays), 0, nullptr);
    X509_sign(certificate.get(), key.get(), EVP_sha256());
    return pemOf(certificate.get());
}

// Runs the openssl command-line tool; false with the reason in `log` when it is missing or fails. Missing is
// a failure, never a skip: the package is a build dependency and interoperability is what these tests prove.
// `options` are words separated by spaces; `paths` follow them, whatever characters they hold.
bool runOpenSsl(const char* options, const QStringList& paths, QString* log, QString* output = nullptr)
{
    const QStringList arguments = QString::fromLatin1(options).split(u' ') + paths;
    const QString program = QStandardPaths::findExecutable(QStringLiteral("openssl"));
    if (program.isEmpty()) {
        *log = QStringLiteral("the openssl command-line tool is not on PATH; install the openssl package "
                              "(a build dependency of Gleaner)");
        return false;
    }
    QProcess process;
    process.start(program, arguments);
    const bool finished = process.waitForFinished(30000);
    const QString standardOutput = QString::fromLocal8Bit(process.readAllStandardOutput());
    if (output)
        *output = standardOutput;
    *log = QStringLiteral("openssl %1 -> exit %2\n%3%4")
               .arg(arguments.join(u' '))
               .arg(process.exitCode())
               .arg(standardOutput, QString::fromLocal8Bit(process.readAllStandardError()));
    return finished && process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0;
}

struct Handshake
{
    bool connected = false;
    long verifyResult = -1;
    QString log;
};

// A real TLS handshake in memory: a server presenting `server`, a client whose ONLY trust anchor is
// `trustedPem` and which checks `host` (a DNS name, or an IP address when `isIp`), as an agent given
// `--ca FILE` does. The two SSL objects talk through a BIO pair, so no port or thread is needed.
Handshake runHandshake(const TlsIdentity& server, const QByteArray& trustedPem, const QString& host,
                       bool isIp, int maxVersion)
{
    Handshake result;
    SslCtxPtr serverContext(SSL_CTX_new(TLS_server_method()));
    SslCtxPtr clientContext(SSL_CTX_new(TLS_client_method()));
    X509Ptr serverCertificate = certificateOf(server.certificatePem);
    PkeyPtr serverKey = keyOf(server.privateKeyPem);
    X509Ptr trusted = certificateOf(trustedPem);
    if (!serverContext || !clientContext || !serverCertificate || !serverKey || !trusted ||
        SSL_CTX_use_certificate(serverContext.get(), serverCertificate.get()) != 1 ||
        SSL_CTX_use_PrivateKey(serverContext.get(), serverKey.get()) != 1 ||
        X509_STORE_add_cert(SSL_CTX_get_cert_store(clientContext.get()), trusted.get()) != 1 ||
        SSL_CTX_set_max_proto_version(clientContext.get(), maxVersion) != 1) {
        result.log = QStringLiteral("setting up the TLS contexts failed");
        return result;
    }
    SSL_CTX_set_verify(clientContext.get(), SSL_VERIFY_PEER, nullptr);

    SslPtr client(SSL_new(clientContext.get()));
    SslPtr serverSsl(SSL_new(serverContext.get()));
    X509_VERIFY_PARAM* parameters = SSL_get0_param(client.get());
    const QByteArray hostBytes = host.toLatin1();
    const bool hostSet = isIp ? X509_VERIFY_PARAM_set1_ip_asc(parameters, hostBytes.constData()) == 1
                              : X509_VERIFY_PARAM_set1_host(parameters, hostBytes.constData(), 0) == 1 &&
                                    SSL_set_tlsext_host_name(client.get(), hostBytes.constData()) == 1;
    BIO* clientBio = nullptr;
    BIO* serverBio = nullptr;
    if (!client || !serverSsl || !hostSet || BIO_new_bio_pair(&clientBio, 0, &serverBio, 0) != 1) {
        result.log = QStringLiteral("setting up the TLS connection failed");
        return result;
    }
    SSL_set_bio(client.get(), clientBio, clientBio);
    SSL_set_bio(serverSsl.get(), serverBio, serverBio);
    SSL_set_connect_state(client.get());
    SSL_set_accept_state(serverSsl.get());

    const auto stuck = [](SSL* ssl, int returned) {
        const int error = SSL_get_error(ssl, returned);
        return returned != 1 && error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE;
    };
    bool failed = false;
    for (int round = 0; round < 50 && !failed; ++round) {
        const int clientDone = SSL_do_handshake(client.get());
        failed = stuck(client.get(), clientDone);
        const int serverDone = SSL_do_handshake(serverSsl.get());
        failed = failed || stuck(serverSsl.get(), serverDone);
        if (clientDone == 1 && serverDone == 1)
            break;
    }
    result.verifyResult = SSL_get_verify_result(client.get());
    result.log = QStringLiteral("verify: %1; %2")
                     .arg(QLatin1StringView(X509_verify_cert_error_string(result.verifyResult)),
                          QString::fromLatin1(ERR_reason_error_string(ERR_peek_error())));
    ERR_clear_error();
    if (failed || !SSL_is_init_finished(client.get()) || !SSL_is_init_finished(serverSsl.get()))
        return result;

    // Application data must flow too, or the "handshake" proved nothing about a usable connection.
    char received[4] = {};
    const bool echoed = SSL_write(client.get(), "ping", 4) == 4 &&
                        SSL_read(serverSsl.get(), received, sizeof(received)) == 4 &&
                        QByteArrayView(received, 4) == "ping";
    result.connected = echoed;
    return result;
}

} // namespace

void TestTlsCertificate::altNames_data()
{
    QTest::addColumn<QStringList>("names");
    QTest::addColumn<QStringList>("expected");
    const auto list = [](std::initializer_list<const char*> items) {
        QStringList result;
        for (const char* item : items)
            result.append(QString::fromLatin1(item));
        return result;
    };
    QTest::newRow("localhost") << list({"localhost"}) << list({"DNS:localhost"});
    QTest::newRow("IPv4") << list({"127.0.0.1"}) << list({"IP:127.0.0.1"});
    QTest::newRow("IPv6") << list({"::1"}) << list({"IP:::1"});
    QTest::newRow("DNS name") << list({"a.example.org"}) << list({"DNS:a.example.org"});
    QTest::newRow("wildcard") << list({"*.example.org"}) << list({"DNS:*.example.org"});
    QTest::newRow("all five") << kAllNames
                              << list({"DNS:localhost", "IP:127.0.0.1", "IP:::1", "DNS:a.example.org",
                                       "DNS:*.example.org"});
    QTest::newRow("lowercased, repeats dropped")
        << list({"Coordinator.LAN", "10.0.0.7", "coordinator.lan", "10.0.0.7"})
        << list({"DNS:coordinator.lan", "IP:10.0.0.7"});
    QTest::newRow("IPv6 long form is one address")
        << list({"::1", "0:0:0:0:0:0:0:1", "fd00::a"}) << list({"IP:::1", "IP:fd00::a"});
    QTest::newRow("digits, hyphens, xn--") << list({"gpu-01.lab3", "xn--bcher-kva.example"})
                                           << list({"DNS:gpu-01.lab3", "DNS:xn--bcher-kva.example"});
    const QString longest =
        QString(63, u'a') + u'.' + QString(63, u'b') + u'.' + QString(63, u'c') + u'.' + QString(61, u'd');
    QTest::newRow("253 characters") << QStringList{longest} << QStringList{QStringLiteral("DNS:") + longest};
}

void TestTlsCertificate::altNames()
{
    QFETCH(QStringList, names);
    QFETCH(QStringList, expected);
    const Result<TlsIdentity> identity = TlsCertificate::generateSelfSigned(names);
    QVERIFY2(identity.ok(), qPrintable(identity.error()));
    const Result<QStringList> altNames = TlsCertificate::subjectAltNames(identity->certificatePem);
    QVERIFY2(altNames.ok(), qPrintable(altNames.error()));
    QCOMPARE(*altNames, expected);

    // The subject (and issuer: self-signed) common name is the first name, or a label when it cannot fit.
    X509Ptr certificate = certificateOf(identity->certificatePem);
    QVERIFY(certificate);
    char commonName[256] = {};
    QVERIFY(X509_NAME_get_text_by_NID(X509_get_subject_name(certificate.get()), NID_commonName, commonName,
                                      sizeof(commonName)) > 0);
    const QString first = expected.first().mid(expected.first().indexOf(u':') + 1);
    QCOMPARE(QString::fromUtf8(commonName),
             first.size() <= 64 ? first : QStringLiteral("Gleaner coordinator"));
    QCOMPARE(X509_NAME_cmp(X509_get_subject_name(certificate.get()), X509_get_issuer_name(certificate.get())),
             0);
}

void TestTlsCertificate::invalidNamesAreRefused_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("reason");
    QTest::newRow("empty") << QString() << QStringLiteral("empty name");
    QTest::newRow("space") << QStringLiteral("a b") << QStringLiteral("' ' is not allowed");
    QTest::newRow("leading hyphen") << QStringLiteral("-x") << QStringLiteral("starts or ends with '-'");
    QTest::newRow("trailing hyphen") << QStringLiteral("x-.lan") << QStringLiteral("starts or ends with '-'");
    QTest::newRow("underscore") << QStringLiteral("exa_mple") << QStringLiteral("'_' is not allowed");
    QTest::newRow("five numbers") << QStringLiteral("1.2.3.4.5") << QStringLiteral("IPv4 address");
    QTest::newRow("octet over 255") << QStringLiteral("300.1.1.1") << QStringLiteral("IPv4 address");
    QTest::newRow("empty label") << QStringLiteral("a..b") << QStringLiteral("empty label");
    QTest::newRow("trailing dot") << QStringLiteral("example.org.") << QStringLiteral("empty label");
    QTest::newRow("bare star") << QStringLiteral("*") << QStringLiteral("'*' is not allowed");
    QTest::newRow("wildcard on a TLD") << QStringLiteral("*.org") << QStringLiteral("at least two labels");
    QTest::newRow("inner wildcard") << QStringLiteral("a.*.org") << QStringLiteral("'*' is not allowed");
    QTest::newRow("bracketed IPv6") << QStringLiteral("[::1]") << QStringLiteral("'[' is not allowed");
    QTest::newRow("IPv6 zone") << QStringLiteral("fe80::1%eth0") << QStringLiteral("':' is not allowed");
    QTest::newRow("URL") << QStringLiteral("https://coordinator") << QStringLiteral("':' is not allowed");
    QTest::newRow("unicode") << QStringLiteral("b\u00fccher.example") << QStringLiteral("xn-- form");
    QTest::newRow("label of 64") << QString(64, u'a') << QStringLiteral("longer than 63");
    QTest::newRow("name of 254") << (QString(63, u'a') + u'.' + QString(63, u'b') + u'.' + QString(63, u'c') +
                                     u'.' + QString(62, u'd'))
                                 << QStringLiteral("longer than 253");
}

void TestTlsCertificate::invalidNamesAreRefused()
{
    QFETCH(QString, name);
    QFETCH(QString, reason);
    // A valid name first: the bad entry is refused wherever it is in the list.
    const Result<TlsIdentity> identity =
        TlsCertificate::generateSelfSigned({QStringLiteral("localhost"), name});
    QVERIFY2(!identity.ok(), "an invalid name was accepted");
    QVERIFY2(identity.error().contains(reason), qPrintable(identity.error()));
    if (!name.isEmpty())
        QVERIFY2(identity.error().contains(u'"' + name + u'"'), qPrintable(identity.error()));
}

void TestTlsCertificate::badArgumentsAreRefused()
{
    const Result<TlsIdentity> none = TlsCertificate::generateSelfSigned({});
    QVERIFY(!none.ok());
    QVERIFY2(none.error().contains(u"at least one"), qPrintable(none.error()));
    for (const int days : {0, -1, 36501}) {
        const Result<TlsIdentity> identity =
            TlsCertificate::generateSelfSigned({QStringLiteral("localhost")}, days);
        QVERIFY(!identity.ok());
        QVERIFY2(identity.error().contains(QString::number(days)), qPrintable(identity.error()));
    }
    QVERIFY(!TlsCertificate::fingerprint("not a certificate").ok());
    QVERIFY(!TlsCertificate::subjectAltNames({}).ok());
}

void TestTlsCertificate::certificateFields()
{
    const TlsIdentity first = generate();
    const TlsIdentity second = generate();
    QVERIFY(first.certificatePem.startsWith("-----BEGIN CERTIFICATE-----\n"));
    QVERIFY(first.privateKeyPem.startsWith("-----BEGIN PRIVATE KEY-----\n"));
    X509Ptr certificate = certificateOf(first.certificatePem);
    X509Ptr other = certificateOf(second.certificatePem);
    QVERIFY(certificate && other);

    QCOMPARE(X509_get_version(certificate.get()), long(X509_VERSION_3));
    QCOMPARE(X509_get_signature_nid(certificate.get()), NID_ecdsa_with_SHA256);
    EVP_PKEY* publicKey = X509_get0_pubkey(certificate.get());
    QVERIFY(EVP_PKEY_is_a(publicKey, "EC"));
    char curve[64] = {};
    QVERIFY(EVP_PKEY_get_utf8_string_param(publicKey, "group", curve, sizeof(curve), nullptr) == 1);
    QCOMPARE(QByteArrayView(curve), QByteArrayView("prime256v1"));

    // Random, positive, at most 128 bits, different every time.
    const ASN1_INTEGER* serial = X509_get0_serialNumber(certificate.get());
    QCOMPARE(ASN1_STRING_type(serial), V_ASN1_INTEGER); // V_ASN1_NEG_INTEGER would be negative
    QVERIFY(ASN1_STRING_length(serial) >= 8 && ASN1_STRING_length(serial) <= 16);
    QVERIFY(ASN1_INTEGER_cmp(serial, X509_get0_serialNumber(other.get())) != 0);

    // Valid from an hour ago (clock skew) for 825 days.
    int days = 0;
    int seconds = 0;
    QVERIFY(ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notBefore(certificate.get())) == 1);
    QVERIFY2(days == 0 && seconds <= -3590 && seconds >= -3700, qPrintable(QString::number(seconds)));
    QVERIFY(ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(certificate.get())) == 1);
    QVERIFY2(days == 824 || (days == 825 && seconds <= 10), qPrintable(QString::number(days)));

    // Self-issued and self-signed, with the key identifiers chain builders use to find the issuer.
    QCOMPARE(X509_check_issued(certificate.get(), certificate.get()), X509_V_OK);
    QCOMPARE(X509_verify(certificate.get(), publicKey), 1);
    QCOMPARE(X509_check_ca(certificate.get()), 1);
    const ASN1_OCTET_STRING* subjectKeyId = X509_get0_subject_key_id(certificate.get());
    const ASN1_OCTET_STRING* authorityKeyId = X509_get0_authority_key_id(certificate.get());
    QVERIFY(subjectKeyId && authorityKeyId);
    QCOMPARE(ASN1_OCTET_STRING_cmp(subjectKeyId, authorityKeyId), 0);
    QCOMPARE(X509_get_key_usage(certificate.get()), uint32_t(KU_DIGITAL_SIGNATURE | KU_KEY_CERT_SIGN));
    QCOMPARE(X509_get_extended_key_usage(certificate.get()), uint32_t(XKU_SSL_SERVER));
    QCOMPARE(X509_check_purpose(certificate.get(), X509_PURPOSE_SSL_SERVER, 0), 1);
}

void TestTlsCertificate::openSslShowsCaAndNames()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("c.pem"));
    QVERIFY(gleaner::test::writeFile(path, generate().certificatePem));
    QString log;
    QString text;
    QVERIFY2(runOpenSsl("x509 -noout -text -in", {path}, &log, &text), qPrintable(log));
    const char* expected[] = {"Version: 3 (0x2)",
                              "Signature Algorithm: ecdsa-with-SHA256",
                              "Subject: CN = localhost",
                              "Issuer: CN = localhost",
                              "NIST CURVE: P-256",
                              "X509v3 Basic Constraints: critical",
                              "CA:TRUE",
                              "X509v3 Key Usage: critical",
                              "Digital Signature, Certificate Sign",
                              "TLS Web Server Authentication",
                              "X509v3 Subject Key Identifier",
                              "X509v3 Authority Key Identifier",
                              "DNS:localhost, IP Address:127.0.0.1, IP Address:",
                              "DNS:a.example.org, DNS:*.example.org"};
    for (const char* line : expected)
        QVERIFY2(text.contains(QLatin1StringView(line)), qPrintable(QLatin1StringView(line) + u'\n' + text));
}

void TestTlsCertificate::openSslVerifiesAsOwnCa()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("c.pem"));
    const QString otherPath = dir->filePath(QStringLiteral("other.pem"));
    QVERIFY(gleaner::test::writeFile(path, generate().certificatePem));
    QVERIFY(gleaner::test::writeFile(otherPath, generate().certificatePem));
    QString log;
    QString output;
    QVERIFY2(runOpenSsl("verify -CAfile", {path, path}, &log, &output), qPrintable(log));
    QVERIFY2(output.contains(path + QStringLiteral(": OK")), qPrintable(log));
    // As a TLS server certificate for its names, under strict X.509 rules.
    QVERIFY2(runOpenSsl("verify -x509_strict -purpose sslserver -verify_hostname localhost -CAfile",
                        {path, path}, &log),
             qPrintable(log));
    QVERIFY2(runOpenSsl("verify -verify_ip ::1 -CAfile", {path, path}, &log), qPrintable(log));
    // The same checks fail where they should, so the successes above mean something.
    QVERIFY2(!runOpenSsl("verify -CAfile", {otherPath, path}, &log), qPrintable(log));
    QVERIFY2(!runOpenSsl("verify -verify_hostname other.example -CAfile", {path, path}, &log),
             qPrintable(log));
}

void TestTlsCertificate::fingerprintMatchesOpenSsl()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("c.pem"));
    const TlsIdentity identity = generate();
    QVERIFY(gleaner::test::writeFile(path, identity.certificatePem));
    QString log;
    QString output;
    QVERIFY2(runOpenSsl("x509 -noout -fingerprint -sha256 -in", {path}, &log, &output), qPrintable(log));
    // "sha256 Fingerprint=3A:F0:..." (the label's case differs between OpenSSL versions).
    const QString fromOpenSsl = output.section(u'=', 1).trimmed();

    const Result<QString> fingerprint = TlsCertificate::fingerprint(identity.certificatePem);
    QVERIFY2(fingerprint.ok(), qPrintable(fingerprint.error()));
    QCOMPARE(*fingerprint, fromOpenSsl);
    QVERIFY2(
        QRegularExpression(QStringLiteral("^([0-9A-F]{2}:){31}[0-9A-F]{2}$")).match(*fingerprint).hasMatch(),
        qPrintable(*fingerprint));
    QCOMPARE(TlsCertificate::fingerprint(generate().certificatePem).value() == *fingerprint, false);
    // A chain file: the fingerprint is the first (the server's) certificate's.
    QCOMPARE(TlsCertificate::fingerprint(identity.certificatePem + generate().certificatePem).value(),
             *fingerprint);
}

void TestTlsCertificate::saveWritesModes0644And0600()
{
    const auto dir = test::scratchDir();
    const QString certPath = dir->filePath(QStringLiteral("coordinator.crt"));
    const QString keyPath = dir->filePath(QStringLiteral("coordinator.key"));
    // An old world-readable file at the key's path must not lend its mode to the new key.
    QVERIFY(gleaner::test::writeFile(keyPath, "old contents"));
    QVERIFY(::chmod(QFile::encodeName(keyPath).constData(), 0644) == 0);

    const TlsIdentity identity = generate();
    // With an empty umask, a file created with default permissions would be world-readable and writable.
    const mode_t previousUmask = ::umask(0);
    const Status saved = TlsCertificate::save(identity, certPath, keyPath);
    ::umask(previousUmask);
    QVERIFY2(saved.ok(), qPrintable(saved.error()));
    QCOMPARE(gleaner::test::fileMode(certPath), mode_t(0644));
    QCOMPARE(gleaner::test::fileMode(keyPath), mode_t(0600));
    QCOMPARE(QDir(dir->path()).entryList(QDir::Files | QDir::Hidden | QDir::System),
             (QStringList{QStringLiteral("coordinator.crt"), QStringLiteral("coordinator.key")}));

    const Result<TlsIdentity> loaded = TlsCertificate::load(certPath, keyPath);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    QCOMPARE(loaded->certificatePem, identity.certificatePem);
    QCOMPARE(loaded->privateKeyPem, identity.privateKeyPem);

    // Debian's ssl-cert convention: a key the group may read (0640) is accepted.
    QVERIFY(::chmod(QFile::encodeName(keyPath).constData(), 0640) == 0);
    const Result<TlsIdentity> groupReadable = TlsCertificate::load(certPath, keyPath);
    QVERIFY2(groupReadable.ok(), qPrintable(groupReadable.error()));
}

void TestTlsCertificate::saveRefusesMismatchedPair()
{
    const auto dir = test::scratchDir();
    const QString certPath = dir->filePath(QStringLiteral("c.pem"));
    const QString keyPath = dir->filePath(QStringLiteral("k.pem"));
    const TlsIdentity mismatched{generate().certificatePem, generate().privateKeyPem};
    const Status saved = TlsCertificate::save(mismatched, certPath, keyPath);
    QVERIFY(!saved.ok());
    QVERIFY2(saved.error().contains(u"does not belong"), qPrintable(saved.error()));
    const Status samePath = TlsCertificate::save(generate(), certPath, certPath);
    QVERIFY(!samePath.ok());
    QVERIFY2(samePath.error().contains(u"two files"), qPrintable(samePath.error()));
    QVERIFY(QDir(dir->path()).isEmpty(QDir::Files | QDir::Hidden | QDir::System));
}

void TestTlsCertificate::loadRefuses_data()
{
    // The row's name says what loadRefuses() breaks in a good pair.
    QTest::addColumn<bool>("namesKey"); // which path the message must name
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing certificate") << false << QStringLiteral("does not exist");
    QTest::newRow("missing key") << true << QStringLiteral("does not exist");
    QTest::newRow("garbage certificate") << false << QStringLiteral("-----BEGIN CERTIFICATE-----");
    QTest::newRow("key as certificate") << false << QStringLiteral("private key, not a certificate");
    QTest::newRow("garbage key") << true << QStringLiteral("-----BEGIN PRIVATE KEY-----");
    QTest::newRow("mismatched key") << true << QStringLiteral("does not belong to the certificate");
    QTest::newRow("world-readable key") << true << QStringLiteral("chmod 600");
    QTest::newRow("expired") << false << QStringLiteral("expired on");
    QTest::newRow("not yet valid") << false << QStringLiteral("check the clock");
}

void TestTlsCertificate::loadRefuses()
{
    const QByteArrayView problem(QTest::currentDataTag());
    QFETCH(bool, namesKey);
    QFETCH(QString, expected);
    const auto dir = test::scratchDir();
    const QString certPath = dir->filePath(QStringLiteral("c.pem"));
    const QString keyPath = dir->filePath(QStringLiteral("k.pem"));
    const TlsIdentity identity = generate();
    QVERIFY(TlsCertificate::save(identity, certPath, keyPath).ok());
    QVERIFY(TlsCertificate::load(certPath, keyPath).ok());

    if (problem == "missing certificate")
        QVERIFY(QFile::remove(certPath));
    else if (problem == "missing key")
        QVERIFY(QFile::remove(keyPath));
    else if (problem == "garbage certificate")
        QVERIFY(gleaner::test::writeFile(certPath, "hello"));
    else if (problem == "key as certificate")
        QVERIFY(gleaner::test::writeFile(certPath, identity.privateKeyPem));
    else if (problem == "garbage key")
        QVERIFY(gleaner::test::writeFile(keyPath, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"));
    else if (problem == "mismatched key")
        QVERIFY(gleaner::test::writeFile(keyPath, generate().privateKeyPem));
    else if (problem == "world-readable key")
        QVERIFY(::chmod(QFile::encodeName(keyPath).constData(), 0644) == 0);
    else if (problem == "expired")
        QVERIFY(gleaner::test::writeFile(certPath, withValidity(identity, -30, -1)));
    else if (problem == "not yet valid")
        QVERIFY(gleaner::test::writeFile(certPath, withValidity(identity, 2, 30)));
    else
        QFAIL("unknown row");

    const Result<TlsIdentity> loaded = TlsCertificate::load(certPath, keyPath);
    QVERIFY2(!loaded.ok(), "the broken pair was accepted");
    QVERIFY2(loaded.error().contains(expected), qPrintable(loaded.error()));
    QVERIFY2(loaded.error().contains(namesKey ? keyPath : certPath), qPrintable(loaded.error()));
}

void TestTlsCertificate::handshake_data()
{
    QTest::addColumn<bool>("impostor"); // the server presents another certificate for the same names
    QTest::addColumn<QString>("host");
    QTest::addColumn<bool>("isIp");
    QTest::addColumn<int>("maxVersion");
    QTest::addColumn<long>("verifyResult");
    const long ok = X509_V_OK;
    QTest::newRow("localhost") << false << QStringLiteral("localhost") << false << TLS1_3_VERSION << ok;
    QTest::newRow("localhost, TLS 1.2")
        << false << QStringLiteral("localhost") << false << TLS1_2_VERSION << ok;
    QTest::newRow("127.0.0.1") << false << QStringLiteral("127.0.0.1") << true << TLS1_3_VERSION << ok;
    QTest::newRow("::1") << false << QStringLiteral("::1") << true << TLS1_3_VERSION << ok;
    QTest::newRow("a.example.org") << false << QStringLiteral("a.example.org") << false << TLS1_3_VERSION
                                   << ok;
    QTest::newRow("wildcard") << false << QStringLiteral("b.example.org") << false << TLS1_3_VERSION << ok;
    QTest::newRow("other.example") << false << QStringLiteral("other.example") << false << TLS1_3_VERSION
                                   << long(X509_V_ERR_HOSTNAME_MISMATCH);
    QTest::newRow("wildcard is one level") << false << QStringLiteral("x.b.example.org") << false
                                           << TLS1_3_VERSION << long(X509_V_ERR_HOSTNAME_MISMATCH);
    QTest::newRow("other IP") << false << QStringLiteral("10.0.0.1") << true << TLS1_3_VERSION
                              << long(X509_V_ERR_IP_ADDRESS_MISMATCH);
    QTest::newRow("impostor, same names") << true << QStringLiteral("localhost") << false << TLS1_3_VERSION
                                          << long(X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT);
    QTest::newRow("impostor, TLS 1.2") << true << QStringLiteral("127.0.0.1") << true << TLS1_2_VERSION
                                       << long(X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT);
}

void TestTlsCertificate::handshake()
{
    QFETCH(bool, impostor);
    QFETCH(QString, host);
    QFETCH(bool, isIp);
    QFETCH(int, maxVersion);
    QFETCH(long, verifyResult);
    const auto dir = test::scratchDir();
    const QString certPath = dir->filePath(QStringLiteral("c.pem"));
    const QString keyPath = dir->filePath(QStringLiteral("k.pem"));
    // Through the files, as the coordinator (load) and an agent (the pinned certificate file) get them.
    QVERIFY(TlsCertificate::save(generate(), certPath, keyPath).ok());
    const Result<TlsIdentity> server = TlsCertificate::load(certPath, keyPath);
    QVERIFY2(server.ok(), qPrintable(server.error()));
    QFile pinnedFile(certPath);
    QVERIFY(pinnedFile.open(QIODevice::ReadOnly));
    const QByteArray pinned = pinnedFile.readAll();

    const Handshake result = runHandshake(impostor ? generate() : *server, pinned, host, isIp, maxVersion);
    QCOMPARE(result.verifyResult, verifyResult);
    QVERIFY2(result.connected == (verifyResult == X509_V_OK), qPrintable(result.log));
}

QTEST_GUILESS_MAIN(TestTlsCertificate)
#include "TestTlsCertificate.moc"
