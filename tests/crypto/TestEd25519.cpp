#include "crypto/Ed25519.h"

#include "crypto/Sha256.h"

#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTest>

#include <sys/stat.h>

using namespace gleaner;

class TestEd25519 : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void rfc8032Vectors_data();
    void rfc8032Vectors();
    void generatedKeysSignAndVerify();
    void flippedBitFails_data();
    void flippedBitFails();
    void wrongLengthSignatureFails_data();
    void wrongLengthSignatureFails();
    void emptyMessage();
    void nullKeysFailClosed();
    void pemRoundTrip();
    void pkcs8FromRfcSeed();
    void badPemIsRefused_data();
    void badPemIsRefused();
    void savedKeyFileIsMode0600();
    void saveRefusesSymlink();
    void loadChecksFileMode_data();
    void loadChecksFileMode();
    void loadNamesAMissingPath();
    void openSslSignaturesVerifyHere();
    void ourSignaturesVerifyInOpenSsl();
};

namespace {

QByteArray hex(const char* text)
{
    return QByteArray::fromHex(QByteArray(text));
}

// A message with every kind of byte a manifest might carry: NUL, newline, high bytes.
constexpr char kMessageBytes[] = "{\"job\":\"fashion\",\"nonce\":\"\xc3\xa9\"}\n\x00\xff tail";
const QByteArray kMessage(kMessageBytes, sizeof(kMessageBytes) - 1);

// Runs the openssl command-line tool; false with the reason in `log` when it is missing or fails. Missing is
// a failure, never a skip: the package is a build dependency and interoperability is what these tests prove.
bool runOpenSsl(const QStringList& arguments, QString* log)
{
    const QString program = QStandardPaths::findExecutable(QStringLiteral("openssl"));
    if (program.isEmpty()) {
        *log = QStringLiteral("the openssl command-line tool is not on PATH; install the openssl package "
                              "(a build dependency of Gleaner)");
        return false;
    }
    QProcess process;
    process.start(program, arguments);
    const bool finished = process.waitForFinished(30000);
    *log = QStringLiteral("openssl %1 -> exit %2\n%3%4")
               .arg(arguments.join(u' '))
               .arg(process.exitCode())
               .arg(QString::fromLocal8Bit(process.readAllStandardOutput()),
                    QString::fromLocal8Bit(process.readAllStandardError()));
    return finished && process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0;
}

} // namespace

void TestEd25519::rfc8032Vectors_data()
{
    QTest::addColumn<QByteArray>("seed");
    QTest::addColumn<QByteArray>("publicKey");
    QTest::addColumn<QByteArray>("message");
    QTest::addColumn<QByteArray>("signature");
    // RFC 8032 section 7.1.
    QTest::newRow("TEST 1") << hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                            << hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
                            << QByteArray()
                            << hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
                                   "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b");
    QTest::newRow("TEST 2") << hex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
                            << hex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
                            << hex("72")
                            << hex("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
                                   "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00");
    QTest::newRow("TEST 3") << hex("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
                            << hex("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025")
                            << hex("af82")
                            << hex("6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
                                   "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a");
}

void TestEd25519::rfc8032Vectors()
{
    QFETCH(QByteArray, seed);
    QFETCH(QByteArray, publicKey);
    QFETCH(QByteArray, message);
    QFETCH(QByteArray, signature);

    const Result<SigningKey> key = SigningKey::fromRawSeed(seed);
    QVERIFY2(key.ok(), qPrintable(key.error()));
    QCOMPARE(key->publicKey().raw().toHex(), publicKey.toHex());
    QCOMPARE(key->sign(message).toHex(), signature.toHex());

    const Result<VerifyKey> verifyKey = VerifyKey::fromRaw(publicKey);
    QVERIFY2(verifyKey.ok(), qPrintable(verifyKey.error()));
    QVERIFY(verifyKey->verify(message, signature));
    QCOMPARE(verifyKey->fingerprint(), Sha256::toHex(Sha256::hash(publicKey)));
}

void TestEd25519::generatedKeysSignAndVerify()
{
    const Result<SigningKey> first = SigningKey::generate();
    const Result<SigningKey> second = SigningKey::generate();
    QVERIFY2(first.ok() && second.ok(), qPrintable(first.error() + second.error()));
    QVERIFY(first->publicKey() != second->publicKey());
    QCOMPARE(first->publicKey().raw().size(), VerifyKey::kRawSize);

    const QByteArray signature = first->sign(kMessage);
    QCOMPARE(signature.size(), VerifyKey::kSignatureSize);
    QCOMPARE(first->sign(kMessage), signature); // Ed25519 is deterministic
    QVERIFY(first->publicKey().verify(kMessage, signature));
    QVERIFY(!second->publicKey().verify(kMessage, signature));
    QVERIFY(!first->publicKey().verify(kMessage, second->sign(kMessage)));
}

void TestEd25519::flippedBitFails_data()
{
    QTest::addColumn<bool>("inSignature");
    QTest::addColumn<int>("byte");
    QTest::addColumn<int>("bit");
    QTest::newRow("message first bit") << false << 0 << 0;
    QTest::newRow("message middle") << false << 20 << 3;
    QTest::newRow("message NUL byte") << false << int(kMessage.indexOf('\0')) << 0;
    QTest::newRow("message last bit") << false << int(kMessage.size() - 1) << 7;
    QTest::newRow("signature R first bit") << true << 0 << 0;
    QTest::newRow("signature R last byte") << true << 31 << 7;
    QTest::newRow("signature S first bit") << true << 32 << 0;
    QTest::newRow("signature S middle") << true << 47 << 5;
    QTest::newRow("signature S low bit of top byte") << true << 63 << 0;
    // Sets S >= L: a non-canonical S must be refused, or signatures would be malleable.
    QTest::newRow("signature S top bit") << true << 63 << 7;
}

void TestEd25519::flippedBitFails()
{
    QFETCH(bool, inSignature);
    QFETCH(int, byte);
    QFETCH(int, bit);

    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    QByteArray message = kMessage;
    QByteArray signature = key->sign(message);
    QVERIFY(key->publicKey().verify(message, signature));

    QByteArray& target = inSignature ? signature : message;
    target[byte] = char(target[byte] ^ (1 << bit));
    QVERIFY(!key->publicKey().verify(message, signature));
}

void TestEd25519::wrongLengthSignatureFails_data()
{
    QTest::addColumn<int>("change");
    QTest::newRow("empty") << -64;
    QTest::newRow("one byte") << -63;
    QTest::newRow("last byte cut") << -1;
    QTest::newRow("one byte appended") << 1;
    QTest::newRow("signature twice") << 64;
}

void TestEd25519::wrongLengthSignatureFails()
{
    QFETCH(int, change);
    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    const QByteArray signature = key->sign(kMessage);
    const QByteArray altered =
        change < 0 ? signature.left(signature.size() + change)
                   : QByteArray(signature + (change == 64 ? signature : QByteArray(change, '\0')));
    QCOMPARE(altered.size(), VerifyKey::kSignatureSize + change);
    QVERIFY(!key->publicKey().verify(kMessage, altered));
    // The message must be exactly the signed bytes too: neither a prefix nor an extension verifies.
    QVERIFY(!key->publicKey().verify(kMessage.chopped(1), signature));
    QVERIFY(!key->publicKey().verify(QByteArray(kMessage + '\0'), signature));
}

void TestEd25519::emptyMessage()
{
    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    const QByteArray signature = key->sign({});
    QCOMPARE(signature.size(), VerifyKey::kSignatureSize);
    QVERIFY(key->publicKey().verify(QByteArray(), signature));
    QVERIFY(key->publicKey().verify(QByteArrayView(), signature));
    QVERIFY(!key->publicKey().verify("x", signature));
}

void TestEd25519::nullKeysFailClosed()
{
    const SigningKey none;
    QVERIFY(none.isNull());
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QStringLiteral("null SigningKey")));
    QVERIFY(none.sign(kMessage).isEmpty());
    QVERIFY(none.publicKey().isNull());
    QVERIFY(none.toPem().isEmpty());
    const auto dir = test::scratchDir();
    const QString neverWritten = dir->filePath(QStringLiteral("never-written.pem"));
    QVERIFY(!none.saveToFile(neverWritten).ok());
    QVERIFY(!QFile::exists(neverWritten));

    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    QVERIFY(!VerifyKey().verify(kMessage, key->sign(kMessage)));
    QVERIFY(VerifyKey().fingerprint().isEmpty());

    const Result<VerifyKey> shortRaw = VerifyKey::fromRaw(QByteArray(31, 'k'));
    QVERIFY(!shortRaw.ok());
    QVERIFY2(shortRaw.error().contains(u"32 bytes, got 31"), qPrintable(shortRaw.error()));
    const Result<SigningKey> longSeed = SigningKey::fromRawSeed(QByteArray(33, 's'));
    QVERIFY(!longSeed.ok());
    QVERIFY2(longSeed.error().contains(u"32 bytes, got 33"), qPrintable(longSeed.error()));
}

void TestEd25519::pemRoundTrip()
{
    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    const QByteArray privatePem = key->toPem();
    QVERIFY2(privatePem.startsWith("-----BEGIN PRIVATE KEY-----\n"), privatePem.constData());
    QVERIFY(privatePem.endsWith("-----END PRIVATE KEY-----\n"));

    const Result<SigningKey> reloaded = SigningKey::fromPem(privatePem);
    QVERIFY2(reloaded.ok(), qPrintable(reloaded.error()));
    QVERIFY(reloaded->publicKey() == key->publicKey());
    QCOMPARE(reloaded->sign(kMessage), key->sign(kMessage));

    const QByteArray publicPem = key->publicKey().toPem();
    QVERIFY2(publicPem.startsWith("-----BEGIN PUBLIC KEY-----\n"), publicPem.constData());
    const Result<VerifyKey> publicKey = VerifyKey::fromPem(publicPem);
    QVERIFY2(publicKey.ok(), qPrintable(publicKey.error()));
    QVERIFY(*publicKey == key->publicKey());
    QCOMPARE(publicKey->toPem(), publicPem);
    QVERIFY(publicKey->verify(kMessage, key->sign(kMessage)));

    const QString fingerprint = publicKey->fingerprint();
    QVERIFY2(Sha256::isHexDigest(fingerprint), qPrintable(fingerprint));
    QCOMPARE(fingerprint, Sha256::toHex(Sha256::hash(publicKey->raw())));
}

void TestEd25519::pkcs8FromRfcSeed()
{
    // A PKCS#8 document built by hand around the RFC 8032 TEST 1 seed: the PEM reader must find the same key.
    const QByteArray der = hex("302e020100300506032b657004220420"
                               "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
    const QByteArray pem = "-----BEGIN PRIVATE KEY-----\n" + der.toBase64() + "\n-----END PRIVATE KEY-----\n";
    const Result<SigningKey> key = SigningKey::fromPem(pem);
    QVERIFY2(key.ok(), qPrintable(key.error()));
    QCOMPARE(key->publicKey().raw().toHex(),
             QByteArray("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"));
    QCOMPARE(key->toPem(), pem);
}

void TestEd25519::badPemIsRefused_data()
{
    QTest::addColumn<bool>("asPrivate");
    QTest::addColumn<QByteArray>("pem");
    QTest::addColumn<QString>("expected");
    const QByteArray x25519 = "-----BEGIN PRIVATE KEY-----\n"
                              "MC4CAQAwBQYDK2VuBCIEIND8PIJtCWtrzlIvgTbQfWIeSvKrh2dFmeklxenKRllq\n"
                              "-----END PRIVATE KEY-----\n";
    const QByteArray encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
                                 "MIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAjzWSSzhuwUvgICCAAw\n"
                                 "DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEKtf+WyaJ7qZzNHmptiDgTwEQJtl\n"
                                 "JQI0rkctiMnKFv6SudGlGRhOvQlxryQq585KE6/le+Rp61kAQi7CFYcABmpT8jWn\n"
                                 "rRGUvO5AUXb7kpZ7xtc=\n"
                                 "-----END ENCRYPTED PRIVATE KEY-----\n";
    const QByteArray ed25519 = "-----BEGIN PRIVATE KEY-----\n"
                               "MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n"
                               "-----END PRIVATE KEY-----\n";
    const QByteArray ed25519Public = "-----BEGIN PUBLIC KEY-----\n"
                                     "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
                                     "-----END PUBLIC KEY-----\n";
    QTest::newRow("private: empty") << true << QByteArray() << QStringLiteral("BEGIN PRIVATE KEY");
    QTest::newRow("private: garbage")
        << true << QByteArray("not a key") << QStringLiteral("BEGIN PRIVATE KEY");
    QTest::newRow("private: truncated") << true << ed25519.left(50) << QStringLiteral("BEGIN PRIVATE KEY");
    QTest::newRow("private: a public key") << true << ed25519Public << QStringLiteral("BEGIN PRIVATE KEY");
    QTest::newRow("private: X25519") << true << x25519 << QStringLiteral("X25519, not Ed25519");
    QTest::newRow("private: passphrase") << true << encrypted << QStringLiteral("passphrase");
    QTest::newRow("private: huge") << true << QByteArray(100000, 'A') << QStringLiteral("right file");
    QTest::newRow("public: empty") << false << QByteArray() << QStringLiteral("BEGIN PUBLIC KEY");
    QTest::newRow("public: garbage") << false << QByteArray("-----BEGIN PUBLIC KEY-----\nAAAA\n")
                                     << QStringLiteral("BEGIN PUBLIC KEY");
    QTest::newRow("public: a private key") << false << ed25519 << QStringLiteral("-pubout");
}

void TestEd25519::badPemIsRefused()
{
    QFETCH(bool, asPrivate);
    QFETCH(QByteArray, pem);
    QFETCH(QString, expected);
    const QString error = asPrivate ? SigningKey::fromPem(pem).error() : VerifyKey::fromPem(pem).error();
    QVERIFY2(!error.isEmpty(), "the PEM was accepted");
    QVERIFY2(error.contains(expected), qPrintable(error));
}

void TestEd25519::savedKeyFileIsMode0600()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("coordinator.key"));
    // An old world-readable file at the path must not lend its mode to the new key.
    QVERIFY(gleaner::test::writeFile(path, "old contents"));
    QVERIFY(QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner | QFile::ReadGroup |
                                            QFile::ReadOther));
    QCOMPARE(gleaner::test::fileMode(path), mode_t(0644));

    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    // With an empty umask a file created with default permissions would be world-readable.
    const mode_t previousUmask = ::umask(0);
    const Status saved = key->saveToFile(path);
    ::umask(previousUmask);
    QVERIFY2(saved.ok(), qPrintable(saved.error()));
    QCOMPARE(gleaner::test::fileMode(path), mode_t(0600));
    QCOMPARE(QFile::permissions(path) & ~(QFile::ReadUser | QFile::WriteUser | QFile::ExeUser),
             QFile::ReadOwner | QFile::WriteOwner);
    // The temporary file was renamed, not left behind.
    QCOMPARE(QDir(dir->path()).entryList(QDir::Files | QDir::Hidden | QDir::System),
             QStringList{QStringLiteral("coordinator.key")});

    const Result<SigningKey> loaded = SigningKey::loadFromFile(path);
    QVERIFY2(loaded.ok(), qPrintable(loaded.error()));
    QVERIFY(loaded->publicKey() == key->publicKey());
}

void TestEd25519::saveRefusesSymlink()
{
    const auto dir = test::scratchDir();
    const QString target = dir->filePath(QStringLiteral("elsewhere.pem"));
    const QString link = dir->filePath(QStringLiteral("coordinator.key"));
    QVERIFY(QFile::link(target, link));
    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    const Status saved = key->saveToFile(link);
    QVERIFY(!saved.ok());
    QVERIFY2(saved.error().contains(link) && saved.error().contains(u"symbolic link"),
             qPrintable(saved.error()));
    QVERIFY(!QFile::exists(target));
    QVERIFY(QFileInfo(link).isSymLink());
}

void TestEd25519::loadChecksFileMode_data()
{
    QTest::addColumn<int>("mode");
    QTest::addColumn<bool>("accepted");
    QTest::newRow("0600") << 0600 << true;
    QTest::newRow("0400") << 0400 << true;
    QTest::newRow("0644 world readable") << 0644 << false;
    QTest::newRow("0640 group readable") << 0640 << false;
    QTest::newRow("0604 other readable") << 0604 << false;
    QTest::newRow("0620 group writable") << 0620 << false;
    QTest::newRow("0601 other executable") << 0601 << false;
}

void TestEd25519::loadChecksFileMode()
{
    QFETCH(int, mode);
    QFETCH(bool, accepted);
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("key.pem"));
    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    QVERIFY(key->saveToFile(path).ok());
    QVERIFY(::chmod(QFile::encodeName(path).constData(), mode_t(mode)) == 0);

    const Result<SigningKey> loaded = SigningKey::loadFromFile(path);
    QCOMPARE(loaded.ok(), accepted);
    if (accepted) {
        QVERIFY(loaded->publicKey() == key->publicKey());
    } else {
        QVERIFY2(loaded.error().contains(QStringLiteral("`chmod 600 %1`").arg(path)),
                 qPrintable(loaded.error()));
        QVERIFY2(loaded.error().contains(QString::number(mode, 8)), qPrintable(loaded.error()));
    }
}

void TestEd25519::loadNamesAMissingPath()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("missing.pem"));
    const Result<SigningKey> loaded = SigningKey::loadFromFile(path);
    QVERIFY(!loaded.ok());
    QVERIFY2(loaded.error().contains(path), qPrintable(loaded.error()));

    // A file that is not a key names the path too.
    QVERIFY(gleaner::test::writeFile(path, "hello"));
    QVERIFY(QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner));
    const Result<SigningKey> notKey = SigningKey::loadFromFile(path);
    QVERIFY(!notKey.ok());
    QVERIFY2(notKey.error().startsWith(path), qPrintable(notKey.error()));
}

void TestEd25519::openSslSignaturesVerifyHere()
{
    const auto dir = test::scratchDir();
    const QString keyPath = dir->filePath(QStringLiteral("key.pem"));
    const QString publicPath = dir->filePath(QStringLiteral("pub.pem"));
    const QString messagePath = dir->filePath(QStringLiteral("msg"));
    const QString signaturePath = dir->filePath(QStringLiteral("sig"));
    QVERIFY(gleaner::test::writeFile(messagePath, kMessage));
    QString log;
    QVERIFY2(runOpenSsl({QStringLiteral("genpkey"), QStringLiteral("-algorithm"), QStringLiteral("ed25519"),
                         QStringLiteral("-out"), keyPath},
                        &log),
             qPrintable(log));
    QVERIFY2(runOpenSsl({QStringLiteral("pkey"), QStringLiteral("-in"), keyPath, QStringLiteral("-pubout"),
                         QStringLiteral("-out"), publicPath},
                        &log),
             qPrintable(log));
    QVERIFY2(runOpenSsl({QStringLiteral("pkeyutl"), QStringLiteral("-sign"), QStringLiteral("-inkey"),
                         keyPath, QStringLiteral("-rawin"), QStringLiteral("-in"), messagePath,
                         QStringLiteral("-out"), signaturePath},
                        &log),
             qPrintable(log));

    const QByteArray signature = gleaner::test::readFile(signaturePath);
    QCOMPARE(signature.size(), VerifyKey::kSignatureSize);
    const Result<VerifyKey> publicKey = VerifyKey::fromPem(gleaner::test::readFile(publicPath));
    QVERIFY2(publicKey.ok(), qPrintable(publicKey.error()));
    QVERIFY(publicKey->verify(kMessage, signature));
    QCOMPARE(publicKey->toPem(), gleaner::test::readFile(publicPath));

    QVERIFY(QFile::setPermissions(keyPath, QFile::ReadOwner | QFile::WriteOwner));
    const Result<SigningKey> key = SigningKey::loadFromFile(keyPath);
    QVERIFY2(key.ok(), qPrintable(key.error()));
    QVERIFY(key->publicKey() == *publicKey);
    // Deterministic signatures: the same key signs the same bytes identically in both implementations.
    QCOMPARE(key->sign(kMessage).toHex(), signature.toHex());
}

void TestEd25519::ourSignaturesVerifyInOpenSsl()
{
    const auto dir = test::scratchDir();
    const QString keyPath = dir->filePath(QStringLiteral("key.pem"));
    const QString publicPath = dir->filePath(QStringLiteral("pub.pem"));
    const QString derivedPath = dir->filePath(QStringLiteral("derived.pem"));
    const QString messagePath = dir->filePath(QStringLiteral("msg"));
    const QString signaturePath = dir->filePath(QStringLiteral("sig"));

    const Result<SigningKey> key = SigningKey::generate();
    QVERIFY(key.ok());
    QVERIFY(key->saveToFile(keyPath).ok());
    QVERIFY(gleaner::test::writeFile(publicPath, key->publicKey().toPem()));
    QVERIFY(gleaner::test::writeFile(messagePath, kMessage));
    QVERIFY(gleaner::test::writeFile(signaturePath, key->sign(kMessage)));

    const QStringList verify{QStringLiteral("pkeyutl"),
                             QStringLiteral("-verify"),
                             QStringLiteral("-pubin"),
                             QStringLiteral("-inkey"),
                             publicPath,
                             QStringLiteral("-rawin"),
                             QStringLiteral("-in"),
                             messagePath,
                             QStringLiteral("-sigfile"),
                             signaturePath};
    QString log;
    QVERIFY2(runOpenSsl(verify, &log), qPrintable(log));
    QVERIFY2(log.contains(u"Signature Verified Successfully"), qPrintable(log));

    // openssl reads our private key file and derives the same public key, byte for byte.
    QVERIFY2(runOpenSsl({QStringLiteral("pkey"), QStringLiteral("-in"), keyPath, QStringLiteral("-pubout"),
                         QStringLiteral("-out"), derivedPath},
                        &log),
             qPrintable(log));
    QCOMPARE(gleaner::test::readFile(derivedPath), key->publicKey().toPem());

    // The same openssl check rejects a signature of other bytes, so the success above means something.
    QVERIFY(gleaner::test::writeFile(signaturePath, key->sign("other bytes")));
    QVERIFY2(!runOpenSsl(verify, &log), qPrintable(log));
}

QTEST_GUILESS_MAIN(TestEd25519)
#include "TestEd25519.moc"
