// Signing-key rotation statements (shared/crypto/KeyRotation): an agent that pinned one key follows signed
// steps to the key a coordinator uses now, and nothing else moves its trust.

#include "TestSupport.h"
#include "crypto/KeyRotation.h"

#include <QJsonDocument>
#include <QTest>

using namespace gleaner;

namespace {

SigningKey freshKey()
{
    auto key = SigningKey::generate();
    if (!key)
        qFatal("cannot generate a key: %s", qPrintable(key.error()));
    return std::move(*key);
}

} // namespace

class TestKeyRotation : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void followsOneStep();
    void followsStepsInAnyOrder();
    void pinnedKeyIsTheTargetAlready();
    void stepSignedByAnotherKeyIsRefused();
    void statementNamingAnotherPreviousKeyIsRefused();
    void alteredStatementIsRefused();
    void cycleEnds();
    void malformedListsAreRefused_data();
    void malformedListsAreRefused();
    void roundTripsThroughJson();
    void fuzzSeedReachesTheTarget();
};

void TestKeyRotation::followsOneStep()
{
    const SigningKey k0 = freshKey();
    const SigningKey k1 = freshKey();
    const auto path = KeyRotation::follow(k0.publicKey(), {KeyRotation::announce(k0, k1.publicKey(), 1)},
                                          k1.publicKey().fingerprint());
    QVERIFY2(path.ok(), qPrintable(path.error()));
    QCOMPARE(path->size(), 2);
    QVERIFY(path->last() == k1.publicKey());
}

void TestKeyRotation::followsStepsInAnyOrder()
{
    const SigningKey k0 = freshKey(), k1 = freshKey(), k2 = freshKey(), k3 = freshKey();
    const QList<KeyRotation> chain{KeyRotation::announce(k2, k3.publicKey(), 3),
                                   KeyRotation::announce(k0, k1.publicKey(), 1),
                                   KeyRotation::announce(k1, k2.publicKey(), 2)};
    // From the first key, and from one in the middle (an agent that followed part of the chain before).
    auto fromStart = KeyRotation::follow(k0.publicKey(), chain, k3.publicKey().fingerprint());
    QVERIFY2(fromStart.ok(), qPrintable(fromStart.error()));
    QCOMPARE(fromStart->size(), 4);
    QVERIFY(fromStart->at(1) == k1.publicKey() && fromStart->at(2) == k2.publicKey());
    auto fromMiddle = KeyRotation::follow(k2.publicKey(), chain, k3.publicKey().fingerprint());
    QVERIFY2(fromMiddle.ok(), qPrintable(fromMiddle.error()));
    QCOMPARE(fromMiddle->size(), 2);
}

void TestKeyRotation::pinnedKeyIsTheTargetAlready()
{
    const SigningKey k0 = freshKey();
    auto path = KeyRotation::follow(k0.publicKey(), {}, k0.publicKey().fingerprint());
    QVERIFY(path.ok());
    QCOMPARE(path->size(), 1);
    // And an unknown target with no chain is an error that names both keys.
    auto lost = KeyRotation::follow(k0.publicKey(), {}, QString(64, u'a'));
    QVERIFY(!lost.ok());
    QVERIFY2(lost.error().contains(k0.publicKey().fingerprint()) && lost.error().contains(QString(64, u'a')),
             qPrintable(lost.error()));
}

void TestKeyRotation::stepSignedByAnotherKeyIsRefused()
{
    // The attacker signs a statement that claims to replace the pinned key.
    const SigningKey pinned = freshKey(), attacker = freshKey(), theirs = freshKey();
    KeyRotation forged = KeyRotation::announce(attacker, theirs.publicKey(), 1);
    auto path = KeyRotation::follow(pinned.publicKey(), {forged}, theirs.publicKey().fingerprint());
    QVERIFY(!path.ok());
    QVERIFY2(path.error().contains(u"no signed rotation leads"), qPrintable(path.error()));
    // The same statement made to claim it replaces the pinned key: its signature is checked, and refused.
    QJsonObject claim = QJsonDocument::fromJson(forged.statement).object();
    claim.insert(QStringLiteral("previous_key"), pinned.publicKey().fingerprint());
    forged.statement = QJsonDocument(claim).toJson(QJsonDocument::Compact);
    forged.signature = attacker.sign(forged.statement).toBase64();
    const QList<KeyRotation> many(KeyRotation::kMaxChain, forged); // a whole list of them costs one check each
    path = KeyRotation::follow(pinned.publicKey(), many, theirs.publicKey().fingerprint());
    QVERIFY(!path.ok());
    QVERIFY2(path.error().contains(u"does not verify"), qPrintable(path.error()));
}

void TestKeyRotation::statementNamingAnotherPreviousKeyIsRefused()
{
    // Signed by the pinned key, but for a rotation of some other key (a statement taken out of its context).
    const SigningKey pinned = freshKey(), other = freshKey(), next = freshKey();
    KeyRotation rotation = KeyRotation::announce(other, next.publicKey(), 1);
    QJsonObject statement = QJsonDocument::fromJson(rotation.statement).object();
    rotation.statement = QJsonDocument(statement).toJson(QJsonDocument::Compact);
    rotation.signature = pinned.sign(rotation.statement).toBase64(); // signed by the pinned key, names `other`
    auto path = KeyRotation::follow(pinned.publicKey(), {rotation}, next.publicKey().fingerprint());
    QVERIFY(!path.ok());
    QVERIFY2(path.error().contains(u"no signed rotation leads"), qPrintable(path.error()));
}

void TestKeyRotation::alteredStatementIsRefused()
{
    const SigningKey k0 = freshKey(), k1 = freshKey(), swapped = freshKey();
    KeyRotation rotation = KeyRotation::announce(k0, k1.publicKey(), 1);
    QJsonObject statement = QJsonDocument::fromJson(rotation.statement).object();
    statement.insert(QStringLiteral("key"), QString::fromLatin1(swapped.publicKey().toPem()));
    rotation.statement = QJsonDocument(statement).toJson(QJsonDocument::Compact); // signature no longer matches
    QVERIFY(!KeyRotation::follow(k0.publicKey(), {rotation}, swapped.publicKey().fingerprint()).ok());
}

void TestKeyRotation::cycleEnds()
{
    // k0 -> k1 -> k0 again: following it never reaches a third key and ends with an error, not a loop.
    const SigningKey k0 = freshKey(), k1 = freshKey();
    const QList<KeyRotation> chain{KeyRotation::announce(k0, k1.publicKey(), 1),
                                   KeyRotation::announce(k1, k0.publicKey(), 2)};
    auto path = KeyRotation::follow(k0.publicKey(), chain, QString(64, u'b'));
    QVERIFY(!path.ok());
}

void TestKeyRotation::malformedListsAreRefused_data()
{
    QTest::addColumn<QByteArray>("json");
    QTest::newRow("object") << QByteArray(R"({"statement": "x", "signature": "y"})");
    QTest::newRow("entry without signature") << QByteArray(R"([{"statement": "{}"}])");
    QTest::newRow("entry of numbers") << QByteArray(R"([{"statement": 1, "signature": 2}])");
    QTest::newRow("statement longer than kMaxStatement")
        << QByteArray(R"([{"statement": ")") + QByteArray(KeyRotation::kMaxStatement + 1, 'x') +
               QByteArray(R"(", "signature": ""}])");
    QByteArray tooLong = "[";
    for (int i = 0; i <= KeyRotation::kMaxChain; ++i)
        tooLong += QByteArray(i ? "," : "") + R"({"statement": "{}", "signature": ""})";
    QTest::newRow("longer than kMaxChain") << tooLong + "]";
}

void TestKeyRotation::malformedListsAreRefused()
{
    QFETCH(QByteArray, json);
    const QJsonDocument doc = QJsonDocument::fromJson("{\"v\":" + json + "}");
    QVERIFY(!KeyRotation::listFromJson(doc.object().value(QStringLiteral("v"))).ok());
}

void TestKeyRotation::roundTripsThroughJson()
{
    const SigningKey k0 = freshKey(), k1 = freshKey();
    const QList<KeyRotation> chain{KeyRotation::announce(k0, k1.publicKey(), 1)};
    auto back = KeyRotation::listFromJson(KeyRotation::toJson(chain));
    QVERIFY2(back.ok(), qPrintable(back.error()));
    QCOMPARE(back->size(), 1);
    QCOMPARE(back->first().statement, chain.first().statement);
    QVERIFY(KeyRotation::follow(k0.publicKey(), *back, k1.publicKey().fingerprint()).ok());
}

void TestKeyRotation::fuzzSeedReachesTheTarget()
{
    // The fuzz target's valid seed (tests/fuzz/make-corpus.py, RFC 8032's test keys) must really be followed,
    // or the fuzzer would never reach the steps after the first signature check.
    auto pinned = SigningKey::fromRawSeed(
        QByteArray::fromHex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
    QVERIFY(pinned.ok());
    const QJsonObject seed = QJsonDocument::fromJson(
        test::readFile(test::sourceDir() + QStringLiteral("/tests/fuzz/corpus/key_rotation/valid-two-steps"))).object();
    auto chain = KeyRotation::listFromJson(seed.value(QStringLiteral("rotations")));
    QVERIFY2(chain.ok(), qPrintable(chain.error()));
    auto path = KeyRotation::follow(pinned->publicKey(), *chain, seed.value(QStringLiteral("target")).toString());
    QVERIFY2(path.ok(), qPrintable(path.error()));
    QCOMPARE(path->size(), 3);
}

QTEST_GUILESS_MAIN(TestKeyRotation)
#include "TestKeyRotation.moc"
