#include "crypto/SignedEnvelope.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;

class TestSignedEnvelope : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void validRoundTrip();
    void tamperedManifestFails_data();
    void tamperedManifestFails();
    void tamperedSignatureFails();
    void otherKeyFails();
    void badSignatureEncoding_data();
    void badSignatureEncoding();
    void noPinnedKey();
    void verificationPrecedesParsing();
    void signedNonObjectIsRefused();
    void jsonCarriesExactBytes_data();
    void jsonCarriesExactBytes();
    void fromJsonChecksShape_data();
    void fromJsonChecksShape();

private:
    SigningKey m_coordinator;
    SigningKey m_stranger;
};

namespace {

// Deliberately not what QJsonDocument would write: a re-serialising transport would change these bytes.
const QByteArray kManifest =
    "{\"job\": \"fashion-mnist\", \"subtask\": 7,\n \"lr\": 1.0e-3, "
    "\"files\": [{\"sha256\": \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\","
    " \"role\": \"shard\"}], \"nonce\": \"Zm9v\"}";

QString signatureError(const VerifyKey& key)
{
    return QStringLiteral("does not verify with the pinned coordinator key (fingerprint %1)")
        .arg(key.fingerprint());
}

} // namespace

void TestSignedEnvelope::initTestCase()
{
    Result<SigningKey> coordinator = SigningKey::generate();
    Result<SigningKey> stranger = SigningKey::generate();
    QVERIFY2(coordinator.ok() && stranger.ok(), qPrintable(coordinator.error() + stranger.error()));
    m_coordinator = std::move(coordinator).value();
    m_stranger = std::move(stranger).value();
}

void TestSignedEnvelope::validRoundTrip()
{
    const SignedEnvelope envelope = SignedEnvelope::sign(m_coordinator, kManifest);
    QCOMPARE(envelope.manifest, kManifest);
    QCOMPARE(envelope.signature.size(), 88); // base64 of 64 bytes
    const Result<QJsonObject> manifest = SignedEnvelope::verify(m_coordinator.publicKey(), envelope);
    QVERIFY2(manifest.ok(), qPrintable(manifest.error()));
    QCOMPARE(manifest->value(u"job").toString(), QStringLiteral("fashion-mnist"));
    QCOMPARE(manifest->value(u"subtask").toInt(), 7);
    QCOMPARE(manifest->value(u"files").toArray().size(), 1);
}

void TestSignedEnvelope::tamperedManifestFails_data()
{
    QTest::addColumn<QByteArray>("manifest");
    QByteArray subtask = kManifest;
    subtask.replace("\"subtask\": 7", "\"subtask\": 8");
    QByteArray oneBit = kManifest;
    oneBit[10] = char(oneBit[10] ^ 0x01);
    QByteArray reserialised = QJsonDocument::fromJson(kManifest).toJson(QJsonDocument::Compact);
    QTest::newRow("one digit changed") << subtask;
    QTest::newRow("one bit flipped") << oneBit;
    QTest::newRow("byte appended") << QByteArray(kManifest + ' ');
    QTest::newRow("last byte removed") << kManifest.chopped(1);
    // Same JSON meaning, other bytes: the signature is over bytes, so this fails too.
    QTest::newRow("re-serialised") << reserialised;
    QTest::newRow("empty") << QByteArray();
}

void TestSignedEnvelope::tamperedManifestFails()
{
    QFETCH(QByteArray, manifest);
    QVERIFY(manifest != kManifest);
    SignedEnvelope envelope = SignedEnvelope::sign(m_coordinator, kManifest);
    envelope.manifest = manifest;
    const Result<QJsonObject> result = SignedEnvelope::verify(m_coordinator.publicKey(), envelope);
    QVERIFY(!result.ok());
    QVERIFY2(result.error().contains(signatureError(m_coordinator.publicKey())), qPrintable(result.error()));
    QVERIFY2(result.error().contains(u"altered or signed by another coordinator"),
             qPrintable(result.error()));
}

void TestSignedEnvelope::tamperedSignatureFails()
{
    SignedEnvelope envelope = SignedEnvelope::sign(m_coordinator, kManifest);
    QByteArray raw = QByteArray::fromBase64(envelope.signature);
    raw[5] = char(raw[5] ^ 0x40);
    envelope.signature = raw.toBase64();
    const Result<QJsonObject> result = SignedEnvelope::verify(m_coordinator.publicKey(), envelope);
    QVERIFY(!result.ok());
    QVERIFY2(result.error().contains(signatureError(m_coordinator.publicKey())), qPrintable(result.error()));
}

void TestSignedEnvelope::otherKeyFails()
{
    const SignedEnvelope forged = SignedEnvelope::sign(m_stranger, kManifest);
    const Result<QJsonObject> result = SignedEnvelope::verify(m_coordinator.publicKey(), forged);
    QVERIFY(!result.ok());
    // The message names the pinned key, not the signer's, so the operator sees which key the agent trusts.
    QVERIFY2(result.error().contains(signatureError(m_coordinator.publicKey())), qPrintable(result.error()));
    QVERIFY(SignedEnvelope::verify(m_stranger.publicKey(), forged).ok());
}

void TestSignedEnvelope::badSignatureEncoding_data()
{
    QTest::addColumn<int>("mutation");
    QTest::addColumn<QString>("expected");
    QTest::newRow("empty") << 0 << QStringLiteral("no signature");
    QTest::newRow("not base64") << 1 << QStringLiteral("not canonical base64");
    QTest::newRow("line break inside") << 2 << QStringLiteral("not canonical base64");
    QTest::newRow("padding removed") << 3 << QStringLiteral("not canonical base64");
    QTest::newRow("base64url alphabet") << 4 << QStringLiteral("not canonical base64");
    QTest::newRow("63 bytes") << 5 << QStringLiteral("is 63 bytes, but an Ed25519 signature is 64");
    QTest::newRow("65 bytes") << 6 << QStringLiteral("is 65 bytes, but an Ed25519 signature is 64");
    QTest::newRow("stray low bits") << 7 << QStringLiteral("not canonical base64");
}

void TestSignedEnvelope::badSignatureEncoding()
{
    QFETCH(int, mutation);
    QFETCH(QString, expected);
    SignedEnvelope envelope = SignedEnvelope::sign(m_coordinator, kManifest);
    const QByteArray raw = QByteArray::fromBase64(envelope.signature);
    switch (mutation) {
    case 0:
        envelope.signature.clear();
        break;
    case 1:
        envelope.signature = "!!!! this is not base64 !!!!";
        break;
    case 2:
        envelope.signature.insert(40, '\n');
        break;
    case 3:
        envelope.signature.chop(2);
        break;
    case 4:
        envelope.signature = QByteArray(raw).fill('\xfb').toBase64(QByteArray::Base64UrlEncoding);
        break;
    case 5:
        envelope.signature = raw.left(63).toBase64();
        break;
    case 6:
        envelope.signature = QByteArray(raw + 'x').toBase64();
        break;
    case 7: {
        // 64 bytes end in "==": the last data character carries 4 unused bits, always zero in the canonical
        // text. Setting one gives text that Qt decodes to the same bytes, but a second spelling.
        QCOMPARE(envelope.signature.right(2), QByteArray("=="));
        const QByteArray alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const qsizetype last = alphabet.indexOf(envelope.signature.at(85));
        QCOMPARE(last % 16, 0);
        envelope.signature[85] = alphabet.at(last | 1);
        QCOMPARE(QByteArray::fromBase64(envelope.signature), raw);
        break;
    }
    }
    const Result<QJsonObject> result = SignedEnvelope::verify(m_coordinator.publicKey(), envelope);
    QVERIFY(!result.ok());
    QVERIFY2(result.error().contains(expected), qPrintable(result.error()));
}

void TestSignedEnvelope::noPinnedKey()
{
    const SignedEnvelope envelope = SignedEnvelope::sign(m_coordinator, kManifest);
    const Result<QJsonObject> result = SignedEnvelope::verify(VerifyKey(), envelope);
    QVERIFY(!result.ok());
    QVERIFY2(result.error().contains(u"no coordinator key is pinned"), qPrintable(result.error()));
}

void TestSignedEnvelope::verificationPrecedesParsing()
{
    const QByteArray broken = "{\"job\": \"fashion\", \"subtask\": ";
    // Correctly signed: the signature passes, then the parser reports the broken JSON.
    const SignedEnvelope signedBroken = SignedEnvelope::sign(m_coordinator, broken);
    const Result<QJsonObject> parsed = SignedEnvelope::verify(m_coordinator.publicKey(), signedBroken);
    QVERIFY(!parsed.ok());
    QVERIFY2(parsed.error().contains(u"correctly signed but is not valid JSON"), qPrintable(parsed.error()));
    QVERIFY2(parsed.error().contains(u"at byte"), qPrintable(parsed.error()));

    // The same bytes signed by someone else: the signature error comes first and the parser never runs.
    const SignedEnvelope forgedBroken = SignedEnvelope::sign(m_stranger, broken);
    const Result<QJsonObject> refused = SignedEnvelope::verify(m_coordinator.publicKey(), forgedBroken);
    QVERIFY(!refused.ok());
    QVERIFY2(refused.error().contains(signatureError(m_coordinator.publicKey())),
             qPrintable(refused.error()));
    QVERIFY2(!refused.error().contains(u"JSON"), qPrintable(refused.error()));
}

void TestSignedEnvelope::signedNonObjectIsRefused()
{
    const SignedEnvelope array = SignedEnvelope::sign(m_coordinator, "[1, 2, 3]");
    const Result<QJsonObject> result = SignedEnvelope::verify(m_coordinator.publicKey(), array);
    QVERIFY(!result.ok());
    QVERIFY2(result.error().contains(u"JSON array, not an object"), qPrintable(result.error()));
}

void TestSignedEnvelope::jsonCarriesExactBytes_data()
{
    QTest::addColumn<QByteArray>("manifest");
    QTest::addColumn<QJsonDocument::JsonFormat>("format");
    const QByteArray unicode =
        "{\n\t\"name\": \"Gr\xc3\xbc\xc3\x9f"
        "e \xe2\x82\xac \xe6\x97\xa5\xe6\x9c\xac "
        "\xf0\x9f\x98\x80\",\r\n  \"escaped\": \"\\u00e9\\n\\\"\\/\",  \"n\": 1.50 }  \n";
    QTest::newRow("compact") << kManifest << QJsonDocument::Compact;
    QTest::newRow("indented") << kManifest << QJsonDocument::Indented;
    QTest::newRow("non-ASCII, escapes, CRLF") << unicode << QJsonDocument::Compact;
    QTest::newRow("non-ASCII, escapes, CRLF, indented") << unicode << QJsonDocument::Indented;
    QTest::newRow("control characters")
        << QByteArray("{\"a\": \"x\"}\x01\x1f\x7f", 13) << QJsonDocument::Compact;
}

void TestSignedEnvelope::jsonCarriesExactBytes()
{
    QFETCH(QByteArray, manifest);
    QFETCH(QJsonDocument::JsonFormat, format);
    const SignedEnvelope envelope = SignedEnvelope::sign(m_coordinator, manifest);

    // As a lease reply travels: nested in a larger object, serialised, sent, parsed.
    const QJsonObject reply{
        {QStringLiteral("tasks"), QJsonArray{QJsonObject{{QStringLiteral("lease_id"), QStringLiteral("L1")},
                                                         {QStringLiteral("task"), envelope.toJson()}}}}};
    const QByteArray wire = QJsonDocument(reply).toJson(format);
    QJsonParseError error;
    const QJsonDocument received = QJsonDocument::fromJson(wire, &error);
    QCOMPARE(error.error, QJsonParseError::NoError);
    const QJsonObject task =
        received.object().value(u"tasks").toArray().at(0).toObject().value(u"task").toObject();

    const Result<SignedEnvelope> back = SignedEnvelope::fromJson(task);
    QVERIFY2(back.ok(), qPrintable(back.error()));
    QCOMPARE(back->manifest, manifest);
    QCOMPARE(back->signature, envelope.signature);
    const Result<QJsonObject> verified = SignedEnvelope::verify(m_coordinator.publicKey(), *back);
    if (QJsonDocument::fromJson(manifest).isObject())
        QVERIFY2(verified.ok(), qPrintable(verified.error()));
    else // bytes after the object: the signature holds, the parser then refuses
        QVERIFY2(verified.error().contains(u"correctly signed"), qPrintable(verified.error()));
}

void TestSignedEnvelope::fromJsonChecksShape_data()
{
    QTest::addColumn<QJsonObject>("json");
    QTest::addColumn<QString>("expected");
    const QString manifest = QString::fromUtf8(kManifest);
    QTest::newRow("empty object") << QJsonObject() << QStringLiteral("\"manifest\"");
    QTest::newRow("manifest as object")
        << QJsonObject{{QStringLiteral("manifest"), QJsonDocument::fromJson(kManifest).object()},
                       {QStringLiteral("signature"), QStringLiteral("AAAA")}}
        << QStringLiteral("\"manifest\"");
    QTest::newRow("no signature") << QJsonObject{{QStringLiteral("manifest"), manifest}}
                                  << QStringLiteral("\"signature\"");
    QTest::newRow("signature as number")
        << QJsonObject{{QStringLiteral("manifest"), manifest}, {QStringLiteral("signature"), 12}}
        << QStringLiteral("\"signature\"");
}

void TestSignedEnvelope::fromJsonChecksShape()
{
    QFETCH(QJsonObject, json);
    QFETCH(QString, expected);
    const Result<SignedEnvelope> envelope = SignedEnvelope::fromJson(json);
    QVERIFY(!envelope.ok());
    QVERIFY2(envelope.error().contains(expected), qPrintable(envelope.error()));
}

QTEST_GUILESS_MAIN(TestSignedEnvelope)
#include "TestSignedEnvelope.moc"
