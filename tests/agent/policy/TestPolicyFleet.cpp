// What a managed fleet's policy file adds to the preferences: enrollment keys (checked, every error naming the
// file and the key) and locks a desk user cannot lift.
#include "TestSupport.h"

#include "policy/PolicyEnrollment.h"
#include "policy/PolicyLocks.h"
#include "policy/PreferenceStore.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

class TestPolicyFleet : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void parsesEnrollment();
    void refusesBadEnrollment_data();
    void refusesBadEnrollment();
    void readsTheTokenFile();
    void preferenceStoreChecksEnrollmentToo();
    void normalizesFingerprints();
    void locksHoldForDeskUsers();
    void reloadTakesEffectOrKeepsTheLastGoodPolicy();
};

namespace {
const QString kFile = QStringLiteral("/etc/gleaner/policy.json");
const QString kSha = QStringLiteral("3A:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:"
                                   "56:78:9A:BC");
} // namespace

void TestPolicyFleet::parsesEnrollment()
{
    QJsonObject value{{QStringLiteral("url"), QStringLiteral("https://coord.example:8443")},
                      {QStringLiteral("token"), QStringLiteral(" tok-1 \n")},
                      {QStringLiteral("certificate_sha256"), kSha.toLower()},
                      {QStringLiteral("name_prefix"), QStringLiteral("office-")}};
    auto parsed = PolicyEnrollment::parse(value, kFile);
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QVERIFY(parsed->has_value());
    const PolicyEnrollment& e = **parsed;
    QCOMPARE(e.url, QStringLiteral("https://coord.example:8443"));
    QCOMPARE(e.token, QStringLiteral("tok-1"));
    QCOMPARE(e.certificateSha256, QString(kSha).remove(u':'));
    QCOMPARE(e.namePrefix, QStringLiteral("office-"));

    auto absent = PolicyEnrollment::parse(QJsonValue(QJsonValue::Undefined), kFile);
    QVERIFY(absent.ok());
    QVERIFY(!absent->has_value());
}

void TestPolicyFleet::refusesBadEnrollment_data()
{
    QTest::addColumn<QByteArray>("json");
    QTest::addColumn<QString>("message");
    QTest::newRow("not an object") << QByteArray(R"({"e": 3})") << QStringLiteral("\"enrollment\" is not an object");
    QTest::newRow("plain http") << QByteArray(R"({"e": {"url": "http://c:1", "token": "t"}})")
                                << QStringLiteral("\"enrollment.url\" must be the coordinator's https");
    QTest::newRow("no token") << QByteArray(R"({"e": {"url": "https://c:1"}})")
                              << QStringLiteral("exactly one of \"token\" and \"token_file\"");
    QTest::newRow("both tokens") << QByteArray(R"({"e": {"url": "https://c:1", "token": "t", "token_file": "/t"}})")
                                 << QStringLiteral("exactly one of \"token\" and \"token_file\"");
    QTest::newRow("relative token file") << QByteArray(R"({"e": {"url": "https://c:1", "token_file": "t"}})")
                                         << QStringLiteral("\"enrollment.token_file\" must be an absolute path");
    QTest::newRow("typo") << QByteArray(R"({"e": {"url": "https://c:1", "token": "t", "fingerprint": "x"}})")
                          << QStringLiteral("unknown key \"enrollment.fingerprint\"");
    QTest::newRow("short fingerprint")
        << QByteArray(R"({"e": {"url": "https://c:1", "token": "t", "certificate_sha256": "3A:F0"}})")
        << QStringLiteral("\"enrollment.certificate_sha256\" is not a SHA-256 fingerprint");
    QTest::newRow("number") << QByteArray(R"({"e": {"url": "https://c:1", "token": 7}})")
                            << QStringLiteral("\"enrollment.token\" is not a string");
    QTest::newRow("bad prefix") << QByteArray(R"({"e": {"url": "https://c:1", "token": "t", "name_prefix": "a/b"}})")
                                << QStringLiteral("\"enrollment.name_prefix\"");
}

void TestPolicyFleet::refusesBadEnrollment()
{
    QFETCH(QByteArray, json);
    QFETCH(QString, message);
    auto parsed = PolicyEnrollment::parse(QJsonDocument::fromJson(json).object().value(QStringLiteral("e")), kFile);
    QVERIFY(!parsed.ok());
    QVERIFY2(parsed.error().startsWith(kFile + u':'), qPrintable(parsed.error()));
    QVERIFY2(parsed.error().contains(message), qPrintable(parsed.error()));
}

void TestPolicyFleet::readsTheTokenFile()
{
    const auto scratch = test::scratchDir();
    const QString policy = scratch->filePath(QStringLiteral("policy.json"));
    const QString token = scratch->filePath(QStringLiteral("token"));
    const QByteArray json = "{\"enrollment\": {\"url\": \"https://c:1\", \"token_file\": \"" + token.toUtf8() + "\"}}";
    QVERIFY(test::writeFile(policy, json));
    auto missing = PolicyEnrollment::read(policy);
    QVERIFY(!missing.ok());
    QVERIFY2(missing.error().contains(QStringLiteral("\"enrollment.token_file\" %1 cannot be read").arg(token)),
             qPrintable(missing.error()));
    QVERIFY(test::writeFile(token, "  \n"));
    auto empty = PolicyEnrollment::read(policy);
    QVERIFY(!empty.ok());
    QVERIFY2(empty.error().contains(QStringLiteral("holds no token")), qPrintable(empty.error()));
    QVERIFY(test::writeFile(token, "secret-token\n"));
    auto read = PolicyEnrollment::read(policy);
    QVERIFY2(read.ok(), qPrintable(read.error()));
    QCOMPARE((*read)->token, QStringLiteral("secret-token"));

    auto none = PolicyEnrollment::read(scratch->filePath(QStringLiteral("absent.json")));
    QVERIFY(none.ok());
    QVERIFY(!none->has_value());
}

void TestPolicyFleet::preferenceStoreChecksEnrollmentToo()
{
    const auto scratch = test::scratchDir();
    const QString policy = scratch->filePath(QStringLiteral("policy.json"));
    const QByteArray good = R"({"preferences": {"idle_seconds": 600}, "locked": ["idle_seconds"],
                                "enrollment": {"url": "https://c:1", "token": "t"}})";
    QVERIFY(test::writeFile(policy, good));
    auto store = PreferenceStore::open(scratch->filePath(QStringLiteral("prefs.json")), policy);
    QVERIFY2(store.ok(), qPrintable(store.error()));
    QVERIFY(store->isLocked(QStringLiteral("idle_seconds")));

    const QByteArray typoed = R"({"enrollment": {"url": "https://c:1", "token": "t", "pin": "x"}})";
    QVERIFY(test::writeFile(policy, typoed));
    auto typo = PreferenceStore::open(scratch->filePath(QStringLiteral("prefs.json")), policy);
    QVERIFY(!typo.ok());
    QVERIFY2(typo.error().contains(QStringLiteral("unknown key \"enrollment.pin\"")), qPrintable(typo.error()));
    QVERIFY(typo.error().contains(policy));
}

void TestPolicyFleet::normalizesFingerprints()
{
    const QString plain = QString(kSha).remove(u':');
    QCOMPARE(PolicyEnrollment::normalizeFingerprint(kSha), plain);
    QCOMPARE(PolicyEnrollment::normalizeFingerprint(plain.toLower()), plain);
    QCOMPARE(PolicyEnrollment::normalizeFingerprint(kSha.left(20)), QString());
    QCOMPARE(PolicyEnrollment::normalizeFingerprint(plain.left(63) + u'G'), QString());
}

void TestPolicyFleet::locksHoldForDeskUsers()
{
    PolicyOverrides none;
    PolicyOverrides flag;
    flag.policyFlag = QStringLiteral("/tmp/mine.json");
    PolicyOverrides environment;
    environment.policyEnvironment = QStringLiteral("/home/me/lax.json");
    PolicyOverrides dedicated;
    dedicated.dedicated = true;
    PolicyOverrides same;
    same.policyFlag = kFile; // naming the organisation's own file lifts nothing

    // A desk user on a managed machine: every way around the policy is refused, naming the file.
    QVERIFY(checkPolicyOverrides(none, kFile, true, false).ok());
    QVERIFY(checkPolicyOverrides(same, kFile, true, false).ok());
    for (const auto& [overrides, what] :
         {std::pair{flag, QStringLiteral("--policy-file /tmp/mine.json")},
          std::pair{environment, QStringLiteral("GLEANER_POLICY_FILE=/home/me/lax.json")},
          std::pair{dedicated, QStringLiteral("--dedicated")}}) {
        const Status refused = checkPolicyOverrides(overrides, kFile, true, false);
        QVERIFY(!refused.ok());
        QVERIFY2(refused.error().startsWith(kFile + QStringLiteral(" sets this machine's policy")),
                 qPrintable(refused.error()));
        QVERIFY2(refused.error().contains(what), qPrintable(refused.error()));
        // Root (or the service's own user) may; and where no organisation set a policy, anyone may.
        QVERIFY(checkPolicyOverrides(overrides, kFile, true, true).ok());
        QVERIFY(checkPolicyOverrides(overrides, kFile, false, false).ok());
    }
}

void TestPolicyFleet::reloadTakesEffectOrKeepsTheLastGoodPolicy()
{
    const auto scratch = test::scratchDir();
    const QString policy = scratch->filePath(QStringLiteral("policy.json"));
    const QString user = scratch->filePath(QStringLiteral("prefs.json"));
    QVERIFY(test::writeFile(policy, R"({"preferences": {"max_cores": 2}})"));
    auto store = PreferenceStore::open(user, policy);
    QVERIFY2(store.ok(), qPrintable(store.error()));
    QVERIFY(store->set(QJsonObject{{QStringLiteral("idle_seconds"), 120}}).ok()); // the desk user's own value
    QCOMPARE(store->current().value(QStringLiteral("idle_seconds")).toInt(), 120);

    // Unchanged file: nothing changes.
    auto same = store->reloadPolicy();
    QVERIFY(same.ok());
    QVERIFY(!*same);

    // The organisation locks idle_seconds at 900: the user's value no longer counts.
    QVERIFY(test::writeFile(policy, R"({"preferences": {"max_cores": 2, "idle_seconds": 900}, "locked": ["idle_seconds"]})"));
    auto locked = store->reloadPolicy();
    QVERIFY2(locked.ok(), qPrintable(locked.error()));
    QVERIFY(*locked);
    QVERIFY(store->isLocked(QStringLiteral("idle_seconds")));
    QCOMPARE(store->current().value(QStringLiteral("idle_seconds")).toInt(), 900);
    QVERIFY(!store->set(QJsonObject{{QStringLiteral("idle_seconds"), 60}}).ok());

    // A typo made while the agent runs: refused, naming the file and the key; the lock stays.
    QVERIFY(test::writeFile(policy, R"({"preferences": {"idle_seconds": 900}, "lockd": []})"));
    auto broken = store->reloadPolicy();
    QVERIFY(!broken.ok());
    QVERIFY2(broken.error().contains(policy) && broken.error().contains(QStringLiteral("\"lockd\"")),
             qPrintable(broken.error()));
    QVERIFY(store->isLocked(QStringLiteral("idle_seconds")));
    QCOMPARE(store->current().value(QStringLiteral("idle_seconds")).toInt(), 900);

    // The lock lifted by the organisation: the user's own value shows again.
    QVERIFY(test::writeFile(policy, R"({})"));
    auto lifted = store->reloadPolicy();
    QVERIFY(lifted.ok() && *lifted);
    QVERIFY(!store->isLocked(QStringLiteral("idle_seconds")));
    QCOMPARE(store->current().value(QStringLiteral("idle_seconds")).toInt(), 120);
}

QTEST_GUILESS_MAIN(TestPolicyFleet)
#include "TestPolicyFleet.moc"
