// checkManifest: the order of docs/protocol.md 7.5 (signature before parsing) and every refusal an agent must
// make before it runs anything of a leased subtask.
#include "runner/TaskManifest.h"

#include "crypto/SignedEnvelope.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

const QString kAgent = QStringLiteral("5d5b2290c70b5e9b263be48386cb5c43");
const QString kLease = QStringLiteral("7b3c102bd7aaa0f6f236ef8f745fe280");
const QString kUrl = QStringLiteral("https://localhost:18443");

QJsonObject manifest()
{
    const auto file = [](const char* role, char digit, qint64 size) {
        return QJsonObject{{QStringLiteral("role"), QString::fromLatin1(role)},
                           {QStringLiteral("sha256"), QString(64, QLatin1Char(digit))},
                           {QStringLiteral("size"), size}};
    };
    return QJsonObject{
        {QStringLiteral("format"), QStringLiteral("gleaner-manifest/1")},
        {QStringLiteral("agent_id"), kAgent},
        {QStringLiteral("lease_id"), kLease},
        {QStringLiteral("coordinator"), kUrl},
        {QStringLiteral("nonce"), QStringLiteral("f9e7ba5c922dfa993b0564ddb94c1748")},
        {QStringLiteral("base_version"), 3},
        {QStringLiteral("issued_ms"), 1000},
        {QStringLiteral("deadline_ms"), 61000},
        {QStringLiteral("job"),
         QJsonObject{{QStringLiteral("id"), 1}, {QStringLiteral("name"), QStringLiteral("fashion")}}},
        {QStringLiteral("subtask"), QJsonObject{{QStringLiteral("workunit_id"), 9},
                                                {QStringLiteral("epoch"), 2},
                                                {QStringLiteral("shard"), 4},
                                                {QStringLiteral("samples"), 500}}},
        {QStringLiteral("files"),
         QJsonArray{file("model", 'a', 69), file("weights", 'b', 1000), file("shard", 'c', 2000)}},
        {QStringLiteral("model"), QJsonObject{{QStringLiteral("arch"), QStringLiteral("mlp")}}},
    };
}

QByteArray bytes(const QJsonObject& object)
{
    return QJsonDocument(object).toJson(QJsonDocument::Compact);
}

} // namespace

class TestTaskManifest : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void acceptsAGoodManifest();
    void refusesAnAlteredManifest();
    void refusesAnotherKeysSignature();
    void refusesABadlySpelledSignature();
    void refusesWhatIsNotForThisAgent_data();
    void refusesWhatIsNotForThisAgent();
    void loopbackNamesAreOneCoordinator();

private:
    Result<TaskManifest> check(const QJsonObject& object,
                               const ManifestExpectation& expected = {kAgent, kLease, kUrl});

    std::optional<SigningKey> m_key;
};

void TestTaskManifest::initTestCase()
{
    auto key = SigningKey::generate();
    QVERIFY(key);
    m_key.emplace(std::move(*key));
}

Result<TaskManifest> TestTaskManifest::check(const QJsonObject& object, const ManifestExpectation& expected)
{
    const SignedEnvelope envelope = SignedEnvelope::sign(*m_key, bytes(object));
    return checkManifest(m_key->publicKey(), envelope.manifest, envelope.signature, expected);
}

void TestTaskManifest::acceptsAGoodManifest()
{
    auto task = check(manifest());
    QVERIFY2(task, qPrintable(task.error()));
    QCOMPARE(task->leaseId, kLease);
    QCOMPARE(task->jobId, 1);
    QCOMPARE(task->jobName, QStringLiteral("fashion"));
    QCOMPARE(task->epoch, 2);
    QCOMPARE(task->shard, 4);
    QCOMPARE(task->samples, 500);
    QCOMPARE(task->baseVersion, 3);
    QCOMPARE(task->deadlineMs, 61000);
    QCOMPARE(task->files.size(), 3);
    QCOMPARE(task->file(u"shard")->size, 2000);
    QCOMPARE(task->file(u"weights")->sha256, QString(64, QLatin1Char('b')));
}

void TestTaskManifest::refusesAnAlteredManifest()
{
    const SignedEnvelope envelope = SignedEnvelope::sign(*m_key, bytes(manifest()));
    QByteArray altered = envelope.manifest;
    altered.replace("\"samples\":500", "\"samples\":501");
    QVERIFY(altered != envelope.manifest);
    auto task = checkManifest(m_key->publicKey(), altered, envelope.signature, {kAgent, kLease, kUrl});
    QVERIFY(!task);
    QVERIFY2(task.error().contains(u"was refused") && task.error().contains(kLease),
             qPrintable(task.error()));
}

void TestTaskManifest::refusesAnotherKeysSignature()
{
    auto other = SigningKey::generate();
    QVERIFY(other);
    const SignedEnvelope envelope = SignedEnvelope::sign(*other, bytes(manifest()));
    auto task =
        checkManifest(m_key->publicKey(), envelope.manifest, envelope.signature, {kAgent, kLease, kUrl});
    QVERIFY(!task);
    QVERIFY2(task.error().contains(u"signature"), qPrintable(task.error()));
}

void TestTaskManifest::refusesABadlySpelledSignature()
{
    const SignedEnvelope envelope = SignedEnvelope::sign(*m_key, bytes(manifest()));
    const QByteArray padded = envelope.signature + QByteArray("==");
    for (const QByteArray& signature : QList<QByteArray>{QByteArray(), envelope.signature.left(86), padded,
                                                         QByteArray(envelope.signature).replace('+', '-')}) {
        if (signature == envelope.signature)
            continue;
        auto task = checkManifest(m_key->publicKey(), envelope.manifest, signature, {kAgent, kLease, kUrl});
        QVERIFY2(!task, signature.constData());
    }
}

void TestTaskManifest::refusesWhatIsNotForThisAgent_data()
{
    QTest::addColumn<QJsonObject>("object");
    QTest::addColumn<QString>("expected");
    const auto with = [](const char* key, const QJsonValue& value) {
        QJsonObject m = manifest();
        if (value.isUndefined())
            m.remove(QString::fromLatin1(key));
        else
            m.insert(QString::fromLatin1(key), value);
        return m;
    };
    QTest::newRow("other agent") << with("agent_id", QStringLiteral("0000"))
                                 << QStringLiteral("not to this agent");
    QTest::newRow("other lease") << with("lease_id", QStringLiteral("1111"))
                                 << QStringLiteral("names lease 1111");
    QTest::newRow("other coordinator") << with("coordinator", QStringLiteral("https://evil.example:18443"))
                                       << QStringLiteral("names coordinator https://evil.example:18443");
    QTest::newRow("other port") << with("coordinator", QStringLiteral("https://localhost:9"))
                                << QStringLiteral("names coordinator");
    QTest::newRow("format") << with("format", QStringLiteral("gleaner-manifest/2"))
                            << QStringLiteral("update the agent");
    QTest::newRow("no files") << with("files", QJsonValue::Undefined) << QStringLiteral("manifest.files");
    QTest::newRow("two files") << with("files", QJsonArray{manifest()[QStringLiteral("files")].toArray()[0],
                                                           manifest()[QStringLiteral("files")].toArray()[1]})
                               << QStringLiteral("manifest.files");
    QJsonArray swapped = manifest()[QStringLiteral("files")].toArray();
    const QJsonValue first = swapped[1];
    swapped[1] = swapped[2];
    swapped[2] = first;
    QTest::newRow("roles out of order") << with("files", swapped) << QStringLiteral("expected \"weights\"");
    QJsonArray badHash = manifest()[QStringLiteral("files")].toArray();
    QJsonObject shard = badHash[2].toObject();
    shard.insert(QStringLiteral("sha256"), QStringLiteral("../../etc/passwd"));
    badHash[2] = shard;
    QTest::newRow("hash is a path") << with("files", badHash) << QStringLiteral("manifest.files[2].sha256");
    QTest::newRow("no deadline") << with("deadline_ms", QJsonValue::Undefined)
                                 << QStringLiteral("manifest.deadline_ms");
    QTest::newRow("job not an object") << with("job", QStringLiteral("1")) << QStringLiteral("manifest.job");
}

void TestTaskManifest::refusesWhatIsNotForThisAgent()
{
    QFETCH(QJsonObject, object);
    QFETCH(QString, expected);
    auto task = check(object);
    QVERIFY(!task);
    QVERIFY2(task.error().contains(expected), qPrintable(task.error()));
}

void TestTaskManifest::loopbackNamesAreOneCoordinator()
{
    QVERIFY(check(manifest(), {kAgent, kLease, QStringLiteral("https://127.0.0.1:18443")}));
    QVERIFY(check(manifest(), {kAgent, kLease, QStringLiteral("https://LOCALHOST:18443/")}));
    QVERIFY(!check(manifest(), {kAgent, kLease, QStringLiteral("https://127.0.0.1:18444")}));
}

QTEST_GUILESS_MAIN(TestTaskManifest)
#include "TestTaskManifest.moc"
