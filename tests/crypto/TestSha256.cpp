#include "crypto/Sha256.h"

#include "TestSupport.h"

#include <QBuffer>
#include <QFile>
#include <QRandomGenerator>
#include <QTest>

using namespace gleaner;

class TestSha256 : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void nistVectors_data();
    void nistVectors();
    void incrementalInOddPieces();
    void resultDoesNotEndTheHash();
    void moveKeepsTheState();
    void hashFileCrossesChunkBoundaries();
    void hashFileNamesAMissingPath();
    void hashFileRefusesADirectory();
    void hashDeviceStartsAtCurrentPosition();
    void hashDeviceRefusesUnreadableDevices();
    void isHexDigest_data();
    void isHexDigest();
};

namespace {

QByteArray randomBytes(qsizetype size, quint32 seed)
{
    QByteArray bytes(size, Qt::Uninitialized);
    QRandomGenerator generator(seed);
    for (char& byte : bytes)
        byte = char(generator.bounded(256));
    return bytes;
}

} // namespace

void TestSha256::nistVectors_data()
{
    QTest::addColumn<QByteArray>("message");
    QTest::addColumn<QString>("digest");
    // FIPS 180-2 appendix B and the NIST CAVS examples.
    QTest::newRow("empty") << QByteArray()
                           << QStringLiteral(
                                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    QTest::newRow("abc") << QByteArray("abc")
                         << QStringLiteral(
                                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    QTest::newRow("448 bits") << QByteArray("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                              << QStringLiteral(
                                     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    QTest::newRow("one million a") << QByteArray(1000000, 'a')
                                   << QStringLiteral(
                                          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

void TestSha256::nistVectors()
{
    QFETCH(QByteArray, message);
    QFETCH(QString, digest);

    const QByteArray oneShot = Sha256::hash(message);
    QCOMPARE(oneShot.size(), Sha256::kDigestSize);
    QCOMPARE(Sha256::toHex(oneShot), digest);
    QVERIFY(Sha256::isHexDigest(Sha256::toHex(oneShot)));

    Sha256 hasher;
    QVERIFY(hasher.isValid());
    hasher.addData(message);
    QCOMPARE(Sha256::toHex(hasher.result()), digest);
}

void TestSha256::incrementalInOddPieces()
{
    const QByteArray data = randomBytes(100003, 7);
    const QByteArray expected = Sha256::hash(data);
    // Sizes that straddle SHA-256's 64-byte blocks in every way: 1, a prime, exactly a block, block +- 1.
    for (qsizetype piece : {1, 13, 63, 64, 65, 4099}) {
        Sha256 hasher;
        for (qsizetype offset = 0; offset < data.size(); offset += piece)
            hasher.addData(QByteArrayView(data).sliced(offset, qMin(piece, data.size() - offset)));
        QVERIFY2(hasher.result() == expected, qPrintable(QStringLiteral("piece size %1").arg(piece)));
    }
}

void TestSha256::resultDoesNotEndTheHash()
{
    Sha256 hasher;
    hasher.addData("ab");
    QCOMPARE(hasher.result(), Sha256::hash("ab"));
    QCOMPARE(hasher.result(), Sha256::hash("ab"));
    hasher.addData("c");
    QCOMPARE(Sha256::toHex(hasher.result()),
             QStringLiteral("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    hasher.reset();
    QCOMPARE(hasher.result(), Sha256::hash(""));
}

void TestSha256::moveKeepsTheState()
{
    Sha256 first;
    first.addData("a");
    Sha256 second = std::move(first);
    second.addData("bc");
    QCOMPARE(second.result(), Sha256::hash("abc"));
    // A moved-from hasher fails closed: its empty result never matches a digest.
    QVERIFY(!first.isValid()); // NOLINT(bugprone-use-after-move): checking the moved-from state is the point
    QVERIFY(first.result().isEmpty());
    QVERIFY(!first.errorString().isEmpty());
    first.reset();
    QVERIFY(first.isValid());
    first.addData("abc");
    QCOMPARE(first.result(), Sha256::hash("abc"));
}

void TestSha256::hashFileCrossesChunkBoundaries()
{
    const auto dir = test::scratchDir();
    // 3.5 chunks: full chunks, then a partial one, so a bug at a chunk boundary or in the tail shows.
    const QByteArray data = randomBytes(Sha256::kChunkSize * 7 / 2, 42);
    const QString path = dir->filePath(QStringLiteral("shard.bin"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    QCOMPARE(file.write(data), data.size());
    file.close();

    const Result<QByteArray> digest = Sha256::hashFile(path);
    QVERIFY2(digest.ok(), qPrintable(digest.error()));
    QCOMPARE(*digest, Sha256::hash(data));
}

void TestSha256::hashFileNamesAMissingPath()
{
    const auto dir = test::scratchDir();
    const QString path = dir->filePath(QStringLiteral("no-such-shard.bin"));
    const Result<QByteArray> digest = Sha256::hashFile(path);
    QVERIFY(!digest.ok());
    QVERIFY2(digest.error().contains(path), qPrintable(digest.error()));
}

void TestSha256::hashFileRefusesADirectory()
{
    const auto dir = test::scratchDir();
    const Result<QByteArray> digest = Sha256::hashFile(dir->path());
    QVERIFY(!digest.ok());
    QVERIFY2(digest.error().contains(dir->path()), qPrintable(digest.error()));
}

void TestSha256::hashDeviceStartsAtCurrentPosition()
{
    QByteArray data("header:payload");
    QBuffer buffer(&data);
    QVERIFY(buffer.open(QIODevice::ReadOnly));
    QVERIFY(buffer.seek(7));
    const Result<QByteArray> digest = Sha256::hashDevice(&buffer);
    QVERIFY2(digest.ok(), qPrintable(digest.error()));
    QCOMPARE(*digest, Sha256::hash("payload"));
}

void TestSha256::hashDeviceRefusesUnreadableDevices()
{
    const Result<QByteArray> none = Sha256::hashDevice(nullptr);
    QVERIFY(!none.ok());
    QVERIFY(!none.error().isEmpty());

    QByteArray data("x");
    QBuffer closed(&data);
    const Result<QByteArray> notOpen = Sha256::hashDevice(&closed);
    QVERIFY(!notOpen.ok());
    QVERIFY2(notOpen.error().contains(u"not open for reading"), qPrintable(notOpen.error()));

    QBuffer writeOnly(&data);
    QVERIFY(writeOnly.open(QIODevice::WriteOnly));
    QVERIFY(!Sha256::hashDevice(&writeOnly).ok());
}

void TestSha256::isHexDigest_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("valid");
    const QString good = QStringLiteral("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    QTest::newRow("lowercase 64") << good << true;
    QTest::newRow("all zeros") << QString(64, u'0') << true;
    QTest::newRow("all f") << QString(64, u'f') << true;
    QTest::newRow("empty") << QString() << false;
    QTest::newRow("63 characters") << good.left(63) << false;
    QTest::newRow("65 characters") << good + u'0' << false;
    QTest::newRow("uppercase") << good.toUpper() << false;
    QTest::newRow("one uppercase letter") << QString(good).replace(2, 1, u'B') << false;
    QTest::newRow("letter g") << QString(good).replace(10, 1, u'g') << false;
    QTest::newRow("path traversal") << QStringLiteral("../") + good.left(61) << false;
    QTest::newRow("slash") << QString(good).replace(32, 1, u'/') << false;
    QTest::newRow("trailing newline") << good.left(63) + u'\n' << false;
    QTest::newRow("leading space") << u' ' + good.left(63) << false;
    QTest::newRow("NUL") << QString(good).replace(5, 1, QChar(0)) << false;
    // Arabic-Indic digit five: QChar::isDigit() says yes, a file name must say no.
    QTest::newRow("non-ASCII digit") << QString(good).replace(0, 1, QChar(0x0665)) << false;
    QTest::newRow("fullwidth a") << QString(good).replace(0, 1, QChar(0xFF41)) << false;
}

void TestSha256::isHexDigest()
{
    QFETCH(QString, text);
    QFETCH(bool, valid);
    QCOMPARE(Sha256::isHexDigest(text), valid);
}

QTEST_GUILESS_MAIN(TestSha256)
#include "TestSha256.moc"
