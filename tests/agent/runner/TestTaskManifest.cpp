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
const LeaseId kLease = *LeaseId::parse(u"7b3c102bd7aaa0f6f236ef8f745fe280");
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
        {QStringLiteral("lease_id"), kLease.toString()},
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
    void freshness_data();
    void freshness();

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
    QCOMPARE(task->leaseId.toString(), kLease.toString());
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
    QVERIFY(task->weightsPatches.isEmpty());

    // Patches offered beside the weights are read with the rest.
    QJsonObject withPatches = manifest();
    withPatches.insert(QStringLiteral("weights_patches"),
                       QJsonArray{QJsonObject{{QStringLiteral("from_sha256"), QString(64, QLatin1Char('d'))},
                                              {QStringLiteral("sha256"), QString(64, QLatin1Char('e'))},
                                              {QStringLiteral("size"), 300}}});
    auto patched = check(withPatches);
    QVERIFY2(patched, qPrintable(patched.error()));
    QCOMPARE(patched->weightsPatches.size(), 1);
    QCOMPARE(patched->weightsPatches[0].fromSha256, QString(64, QLatin1Char('d')));
    QCOMPARE(patched->weightsPatches[0].size, 300);
    QVERIFY(!task->scriptModel);

    // A TorchScript model named by the model file's hash: the agent places that file in the task folder.
    QJsonObject scripted = manifest();
    scripted.insert(QStringLiteral("model"),
                    QJsonObject{{QStringLiteral("torchscript"), QString(QStringLiteral("sha256:") + QString(64, u'a'))}});
    auto script = check(scripted);
    QVERIFY2(script, qPrintable(script.error()));
    QVERIFY(script->scriptModel);
}

void TestTaskManifest::refusesAnAlteredManifest()
{
    const SignedEnvelope envelope = SignedEnvelope::sign(*m_key, bytes(manifest()));
    QByteArray altered = envelope.manifest;
    altered.replace("\"samples\":500", "\"samples\":501");
    QVERIFY(altered != envelope.manifest);
    auto task = checkManifest(m_key->publicKey(), altered, envelope.signature, {kAgent, kLease, kUrl});
    QVERIFY(!task);
    QVERIFY2(task.error().contains(u"was refused") && task.error().contains(kLease.toString()),
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
                                 << QStringLiteral("names lease \"1111\"");
    QTest::newRow("signed lease id is a path") << with("lease_id", QStringLiteral("../../victim"))
                                               << QStringLiteral("names lease \"../../victim\"");
    QTest::newRow("other coordinator") << with("coordinator", QStringLiteral("https://evil.example:18443"))
                                       << QStringLiteral("names coordinator https://evil.example:18443");
    QTest::newRow("other port") << with("coordinator", QStringLiteral("https://localhost:9"))
                                << QStringLiteral("names coordinator");
    QTest::newRow("no nonce") << with("nonce", QJsonValue::Undefined) << QStringLiteral("manifest.nonce");
    QTest::newRow("nonce not hex") << with("nonce", QStringLiteral("F9E7BA5C922DFA993B0564DDB94C1748"))
                                   << QStringLiteral("manifest.nonce is not 32 lowercase hex digits");
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
    const QJsonObject patch{{QStringLiteral("from_sha256"), QString(64, QLatin1Char('d'))},
                            {QStringLiteral("sha256"), QStringLiteral("../../victim")},
                            {QStringLiteral("size"), 300}};
    QTest::newRow("patch hash is a path") << with("weights_patches", QJsonArray{patch})
                                          << QStringLiteral("manifest.weights_patches[0].sha256");
    QTest::newRow("patches not a list") << with("weights_patches", QStringLiteral("x"))
                                        << QStringLiteral("manifest.weights_patches");
    QJsonArray many;
    for (int i = 0; i < 17; ++i)
        many.append(patch);
    QTest::newRow("too many patches") << with("weights_patches", many) << QStringLiteral("at most 16");
    QTest::newRow("job not an object") << with("job", QStringLiteral("1")) << QStringLiteral("manifest.job");
    // A TorchScript model is the model file: the spec must name exactly that file's hash, or the worker would load
    // an archive nobody checked against the signature.
    QTest::newRow("torchscript names another file")
        << with("model", QJsonObject{{QStringLiteral("torchscript"), QString(QStringLiteral("sha256:") + QString(64, u'b'))}})
        << QStringLiteral("manifest.model.torchscript does not name the model file");
    QTest::newRow("torchscript names a path")
        << with("model", QJsonObject{{QStringLiteral("torchscript"), QStringLiteral("/etc/passwd")}})
        << QStringLiteral("manifest.model.torchscript does not name the model file");
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
    // HTTPS's own port, written or not, is one coordinator (a public URL behind a load balancer).
    QJsonObject balanced = manifest();
    balanced.insert(QStringLiteral("coordinator"), QStringLiteral("https://gleaner.example.org"));
    QVERIFY(check(balanced, {kAgent, kLease, QStringLiteral("https://gleaner.example.org:443")}));
    QVERIFY(!check(balanced, {kAgent, kLease, QStringLiteral("https://gleaner.example.org:8443")}));
}

void TestTaskManifest::freshness_data()
{
    // A manifest issued at 1000 ms with its deadline at 61000 ms, checked when it is leased at `now`.
    QTest::addColumn<qint64>("issued");
    QTest::addColumn<qint64>("deadline");
    QTest::addColumn<qint64>("now");
    QTest::addColumn<QString>("refusal"); // empty: accepted
    const qint64 slack = kManifestClockSlackMs;
    QTest::newRow("fresh") << qint64(1000) << qint64(61000) << qint64(2000) << QString();
    QTest::newRow("past its deadline within the clock slack")
        << qint64(1000) << qint64(61000) << 61000 + slack << QString();
    QTest::newRow("expired: a replayed old manifest")
        << qint64(1000) << qint64(61000) << 61000 + slack + 1 << QStringLiteral("expired");
    QTest::newRow("a year old") << qint64(1000) << qint64(61000) << qint64(365) * 24 * 3600 * 1000
                                << QStringLiteral("expired");
    QTest::newRow("issued in the future within the slack")
        << slack + 1000 << slack + 61000 << qint64(1000) << QString();
    QTest::newRow("issued in the future") << slack + 1001 << slack + 61001 << qint64(0)
                                          << QStringLiteral("in the future");
    QTest::newRow("deadline before issue") << qint64(61000) << qint64(1000) << qint64(2000)
                                           << QStringLiteral("outside the protocol's");
    QTest::newRow("a lease longer than the protocol allows")
        << qint64(1000) << 1000 + kManifestMaxLeaseMs + 1 << qint64(2000) << QStringLiteral("outside the protocol's");
}

void TestTaskManifest::freshness()
{
    QFETCH(qint64, issued);
    QFETCH(qint64, deadline);
    QFETCH(qint64, now);
    QFETCH(QString, refusal);
    QJsonObject object = manifest();
    object.insert(QStringLiteral("issued_ms"), issued);
    object.insert(QStringLiteral("deadline_ms"), deadline);
    auto task = check(object); // signed: the signature alone does not make an old manifest good
    QVERIFY2(task, qPrintable(task.error()));
    const Status fresh = checkManifestFresh(*task, now);
    if (refusal.isEmpty()) {
        QVERIFY2(fresh.ok(), qPrintable(fresh.error()));
    } else {
        QVERIFY(!fresh.ok());
        QVERIFY2(fresh.error().contains(refusal) && fresh.error().contains(kLease.toString()),
                 qPrintable(fresh.error()));
    }
}

QTEST_GUILESS_MAIN(TestTaskManifest)
#include "TestTaskManifest.moc"
