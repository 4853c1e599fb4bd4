// Where the preferences come from (agent/policy/PreferenceStore): the layers of defaults, the organisation's
// file and the user's file, locks, persistence, a broken user file, a broken policy file and the wire object
// of the control socket. Every file lives in a scratch folder.
#include "TestSupport.h"
#include "policy/PreferenceStore.h"

#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

QString compact(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

const QString kAllKeys = QStringLiteral(
    "only_when_idle, idle_seconds, respect_inhibitors, other_cpu_limit_percent, pause_on_battery, schedule, "
    "pause_programs, max_cores, cpu_share_percent, memory_active_mb, memory_idle_mb, gpu, cache_mb, "
    "upload_kib_per_s, download_kib_per_s, checkpoint_seconds, allow_unconfined_models");

// A folder with a user file and a policy file, each written only when given.
struct Files
{
    std::unique_ptr<QTemporaryDir> dir = test::scratchDir();
    QString user = dir->filePath(QStringLiteral("data/preferences.json"));
    QString policy = dir->filePath(QStringLiteral("etc/policy.json"));

    Files& withUser(const QByteArray& text)
    {
        QDir().mkpath(QFileInfo(user).absolutePath());
        if (!test::writeFile(user, text))
            qFatal("cannot write %s", qPrintable(user));
        return *this;
    }
    Files& withPolicy(const QByteArray& text)
    {
        QDir().mkpath(QFileInfo(policy).absolutePath());
        if (!test::writeFile(policy, text))
            qFatal("cannot write %s", qPrintable(policy));
        return *this;
    }
    QJsonObject userJson() const { return test::jsonObject(test::readFile(user)); }
    QStringList backups() const
    {
        return QDir(QFileInfo(user).absolutePath())
            .entryList({QStringLiteral("preferences.json.broken-*")}, QDir::Files);
    }
};
} // namespace

class TestPreferenceStore : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void withoutFiles();
    void persistsOnlyTheUsersKeys();
    void layersAndLocks();
    void lockedKeyRefusedAllOrNothing();
    void forgetsAUserValueWithNull();
    void refusesUnknownOrBadKeysAllOrNothing();
    void reportsAWriteFailure();
    void brokenUserFileIsKeptAside();
    void userFileWithOneBadKeyKeepsTheRest();
    void brokenPolicyFile_data();
    void brokenPolicyFile();
    void unreadablePolicyFile();
    void defaultPolicyFile();
    void describeShape();
};

void TestPreferenceStore::withoutFiles()
{
    Files files;
    const Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY2(store.ok(), qPrintable(store.error()));
    QCOMPARE(store->current(), Preferences::defaults());
    QCOMPARE(store->locked(), QStringList());
    QCOMPARE(store->warnings(), QStringList());
    QVERIFY(!QFileInfo::exists(files.user)); // opening writes nothing
    const Result<PreferenceStore> noPolicy = PreferenceStore::open(files.user, QString());
    QVERIFY(noPolicy.ok());
}

void TestPreferenceStore::persistsOnlyTheUsersKeys()
{
    Files files;
    Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(store.ok());
    const Result<bool> changed = store->set(test::jsonObject(
        R"({"idle_seconds": 300, "only_when_idle": true, "pause_programs": ["steam"], "gpu": "idle"})"));
    QVERIFY2(changed.ok(), qPrintable(changed.error()));
    QVERIFY(*changed);
    QCOMPARE(store->current().idleSeconds(), 300);
    // Only what differs from the layers below is the user's own; the folder was created on the way.
    QCOMPARE(compact(files.userJson()), QStringLiteral(R"({"idle_seconds":300,"pause_programs":["steam"]})"));
    QCOMPARE(test::fileMode(files.user), mode_t(0600));

    // The same values again change nothing and do not write.
    QVERIFY(test::writeFile(files.user, R"({"idle_seconds": 300, "pause_programs": ["steam"]})"));
    const Result<bool> again = store->set(test::jsonObject(R"({"idle_seconds": 300})"));
    QVERIFY(again.ok());
    QVERIFY(!*again);
    QCOMPARE(test::readFile(files.user), QByteArray(R"({"idle_seconds": 300, "pause_programs": ["steam"]})"));

    // Back to the default: the key leaves the file, so a later organisation value shows through.
    QVERIFY(*store->set(test::jsonObject(R"({"idle_seconds": 180})")));
    QCOMPARE(compact(files.userJson()), QStringLiteral(R"({"pause_programs":["steam"]})"));

    const Result<PreferenceStore> reopened = PreferenceStore::open(files.user, files.policy);
    QVERIFY(reopened.ok());
    QCOMPARE(reopened->current(), store->current());
    QCOMPARE(reopened->current().pausePrograms(), QStringList{QStringLiteral("steam")});
}

void TestPreferenceStore::layersAndLocks()
{
    Files files;
    files.withPolicy(R"({"preferences": {"idle_seconds": 600, "max_cores": 2, "gpu": "never"},
                         "locked": ["pause_on_battery", "idle_seconds", "idle_seconds"]})");
    files.withUser(R"({"idle_seconds": 60, "max_cores": 4, "cache_mb": 200, "pause_on_battery": false})");
    Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY2(store.ok(), qPrintable(store.error()));
    QCOMPARE(store->warnings(), QStringList());
    const Preferences& prefs = store->current();
    QCOMPARE(prefs.idleSeconds(), 600);             // locked: the organisation's value beats the user's
    QVERIFY(prefs.pauseOnBattery());                // locked without a value: the default beats the user's
    QCOMPARE(prefs.maxCores(), 4);                  // unlocked: the user's value beats the organisation's
    QCOMPARE(prefs.gpu(), Preferences::Gpu::Never); // the organisation's value beats the default
    QCOMPARE(prefs.cacheBytes(), qint64(200) * 1024 * 1024);
    QCOMPARE(store->locked(),
             (QStringList{QStringLiteral("idle_seconds"), QStringLiteral("pause_on_battery")}));
    QVERIFY(store->isLocked(QStringLiteral("idle_seconds")));
    QVERIFY(!store->isLocked(QStringLiteral("max_cores")));

    // Setting the organisation's value keeps nothing of the user's own, so a new policy shows through.
    QVERIFY(*store->set(test::jsonObject(R"({"max_cores": 2})")));
    QVERIFY(!files.userJson().contains(QStringLiteral("max_cores")));
    files.withPolicy(R"({"preferences": {"idle_seconds": 600, "max_cores": 3}, "locked": ["idle_seconds"]})");
    const Result<PreferenceStore> reopened = PreferenceStore::open(files.user, files.policy);
    QVERIFY(reopened.ok());
    QCOMPARE(reopened->current().maxCores(), 3);
    // The user's value of a key that is no longer locked comes back.
    QVERIFY(!reopened->current().pauseOnBattery());
}

void TestPreferenceStore::lockedKeyRefusedAllOrNothing()
{
    Files files;
    files.withPolicy(R"({"preferences": {"idle_seconds": 600}, "locked": ["idle_seconds"]})");
    Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(store.ok());
    const Result<bool> refused = store->set(test::jsonObject(R"({"max_cores": 3, "idle_seconds": 60})"));
    QCOMPARE(refused.error(), QStringLiteral("idle_seconds is set by your organisation (%1) and cannot be "
                                             "changed here; ask your IT administrator")
                                  .arg(files.policy));
    QCOMPARE(store->current().maxCores(), 0);
    QVERIFY(!QFileInfo::exists(files.user));

    // A form sent back whole carries the locked value unchanged: that is fine.
    const Result<bool> whole = store->set(test::jsonObject(R"({"max_cores": 3, "idle_seconds": 600})"));
    QVERIFY2(whole.ok(), qPrintable(whole.error()));
    QVERIFY(*whole);
    QCOMPARE(store->current().maxCores(), 3);
    QCOMPARE(compact(files.userJson()), QStringLiteral(R"({"max_cores":3})"));
}

void TestPreferenceStore::forgetsAUserValueWithNull()
{
    Files files;
    files.withPolicy(R"({"preferences": {"checkpoint_seconds": 300}})");
    files.withUser(R"({"checkpoint_seconds": 30, "max_cores": 2})");
    Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(store.ok());
    QCOMPARE(store->current().checkpointSeconds(), 30);
    const Result<bool> changed = store->set(test::jsonObject(R"({"checkpoint_seconds": null})"));
    QVERIFY(changed.ok());
    QVERIFY(*changed);
    QCOMPARE(store->current().checkpointSeconds(), 300);
    QCOMPARE(compact(files.userJson()), QStringLiteral(R"({"max_cores":2})"));
    // null on an unknown key is still an unknown key.
    QCOMPARE(store->set(test::jsonObject(R"({"speed": null})")).error(),
             QStringLiteral("unknown preference \"speed\"; the known ones are ") + kAllKeys);
}

void TestPreferenceStore::refusesUnknownOrBadKeysAllOrNothing()
{
    Files files;
    files.withUser(R"({"max_cores": 2})");
    Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(store.ok());
    const Preferences before = store->current();
    const QByteArray fileBefore = test::readFile(files.user);

    const Result<bool> unknown = store->set(test::jsonObject(R"({"max_cores": 6, "turbo": true})"));
    QCOMPARE(unknown.error(), QStringLiteral("unknown preference \"turbo\"; the known ones are ") + kAllKeys);
    const Result<bool> bad = store->set(test::jsonObject(R"({"max_cores": 6, "cpu_share_percent": 5})"));
    QCOMPARE(bad.error(),
             QStringLiteral("cpu_share_percent must be a whole number from 10 to 100 (%), not 5"));
    QCOMPARE(store->current(), before);
    QCOMPARE(test::readFile(files.user), fileBefore);
}

void TestPreferenceStore::reportsAWriteFailure()
{
    // The user file's folder cannot be made: a plain file stands where it should be.
    Files files;
    const QString blocker = files.dir->filePath(QStringLiteral("blocker"));
    QVERIFY(test::writeFile(blocker, "x"));
    const QString user = blocker + QStringLiteral("/preferences.json");
    Result<PreferenceStore> store = PreferenceStore::open(user, files.policy);
    QVERIFY(store.ok());
    const Result<bool> failed = store->set(test::jsonObject(R"({"max_cores": 6})"));
    QVERIFY(!failed.ok());
    QVERIFY2(failed.error().startsWith(user + QStringLiteral(": cannot create the folder ")),
             qPrintable(failed.error()));
    QVERIFY(failed.error().endsWith(QStringLiteral("; check that the agent may write there")));
    QCOMPARE(store->current().maxCores(), 0);
}

void TestPreferenceStore::brokenUserFileIsKeptAside()
{
    Files files;
    files.withUser("{\"idle_seconds\": 30,");
    Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY2(store.ok(), qPrintable(store.error()));
    QCOMPARE(store->current(), Preferences::defaults());
    const QStringList backups = files.backups();
    QCOMPARE(backups.size(), 1);
    const QString backup = QFileInfo(files.user).absolutePath() + u'/' + backups[0];
    QVERIFY(QRegularExpression(QStringLiteral("^preferences\\.json\\.broken-\\d{13}$"))
                .match(backups[0])
                .hasMatch());
    QCOMPARE(test::readFile(backup), QByteArray("{\"idle_seconds\": 30,"));
    QVERIFY(!QFileInfo::exists(files.user));
    QCOMPARE(store->warnings().size(), 1);
    const QString warning = store->warnings().constFirst();
    QVERIFY2(warning.startsWith(files.user + QStringLiteral(" is not valid JSON (")), qPrintable(warning));
    QVERIFY2(warning.endsWith(
                 QStringLiteral("), so your saved preferences were not used; the file as it was is kept "
                                "as ") +
                 backup),
             qPrintable(warning));

    // A JSON file that is not an object is as broken.
    Files list;
    list.withUser("[1, 2]");
    const Result<PreferenceStore> fromList = PreferenceStore::open(list.user, list.policy);
    QVERIFY(fromList.ok());
    QCOMPARE(fromList->warnings().size(), 1);
    QVERIFY(fromList->warnings().constFirst().startsWith(list.user +
                                                         QStringLiteral(" does not hold a JSON object, so")));
    QCOMPARE(list.backups().size(), 1);
}

void TestPreferenceStore::userFileWithOneBadKeyKeepsTheRest()
{
    Files files;
    files.withUser(R"({"idle_seconds": 3, "max_cores": 2, "warp_drive": true})");
    const Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(store.ok());
    QCOMPARE(store->current().maxCores(), 2);
    QCOMPARE(store->current().idleSeconds(), 180);
    const QStringList backups = files.backups();
    QCOMPARE(backups.size(), 1);
    const QString backup = QFileInfo(files.user).absolutePath() + u'/' + backups[0];
    QCOMPARE(
        store->warnings(),
        (QStringList{files.user +
                         QStringLiteral(": idle_seconds must be a whole number from 5 to 86400 (s), not "
                                        "3; that value was left out and the file as it was is kept as ") +
                         backup,
                     files.user + QStringLiteral(": unknown preference \"warp_drive\"; the known ones are ") +
                         kAllKeys +
                         QStringLiteral("; that value was left out and the file as it was is kept as ") +
                         backup}));
    QCOMPARE(test::readFile(backup),
             QByteArray(R"({"idle_seconds": 3, "max_cores": 2, "warp_drive": true})"));
    QCOMPARE(compact(files.userJson()), QStringLiteral(R"({"max_cores":2})"));
    QCOMPARE(test::fileMode(files.user), mode_t(0600));
}

void TestPreferenceStore::brokenPolicyFile_data()
{
    QTest::addColumn<QByteArray>("policy");
    QTest::addColumn<QString>("error"); // after "<file>"

    const QString expected =
        QStringLiteral("the policy file holds only \"preferences\" (an object), \"locked\" "
                       "(a list of preference names) and \"enrollment\" (an object)");
    QTest::newRow("not JSON") << QByteArray("{\"preferences\": {")
                              << QStringLiteral(
                                     " is not valid JSON (unterminated object at byte 17); the "
                                     "organisation's policy is never ignored: fix the file or remove it");
    QTest::newRow("not an object") << QByteArray("[]")
                                   << QStringLiteral(
                                          " does not hold a JSON object; the organisation's policy is "
                                          "never ignored: fix the file or remove it");
    QTest::newRow("unknown preference")
        << QByteArray(R"({"preferences": {"idle_secs": 600}})")
        << QStringLiteral(": unknown preference \"idle_secs\"; the known ones are ") + kAllKeys;
    QTest::newRow("value out of limits")
        << QByteArray(R"({"preferences": {"max_cores": 5000}})")
        << QStringLiteral(": max_cores must be a whole number from 0 to 1024 "
                          "(cores), not 5000");
    QTest::newRow("bad schedule") << QByteArray(R"({"preferences": {"schedule": ["weekdays"]}})")
                                  << QStringLiteral(
                                         ": schedule entry \"weekdays\": \"weekdays\" is not a day; use "
                                         "mon, tue, wed, thu, fri, sat or sun");
    QTest::newRow("locks an unknown key")
        << QByteArray(R"({"locked": ["idle_seconds", "gpus"]})")
        << QStringLiteral(": \"locked\" names \"gpus\", which is not a preference; "
                          "the known ones are ") +
               kAllKeys;
    QTest::newRow("locks a number") << QByteArray(R"({"locked": [3]})")
                                    << QStringLiteral(
                                           ": \"locked\" names 3, which is not a preference; the known "
                                           "ones are ") +
                                           kAllKeys;
    QTest::newRow("locked is not a list") << QByteArray(R"({"locked": "idle_seconds"})")
                                          << QStringLiteral(": \"locked\" is not a list; ") + expected;
    QTest::newRow("preferences is not an object")
        << QByteArray(R"({"preferences": []})")
        << QStringLiteral(": \"preferences\" is not an object; ") + expected;
    QTest::newRow("misspelt top-level key") << QByteArray(R"({"preferences": {}, "lockd": ["idle_seconds"]})")
                                            << QStringLiteral(": unknown key \"lockd\"; ") + expected;
}

void TestPreferenceStore::brokenPolicyFile()
{
    QFETCH(QByteArray, policy);
    QFETCH(QString, error);
    Files files;
    files.withPolicy(policy).withUser(R"({"max_cores": 2})");
    const Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(!store.ok());
    QCOMPARE(store.error(), files.policy + error);
    // The user's file is not touched when the policy stops the agent.
    QCOMPARE(files.backups(), QStringList());
}

void TestPreferenceStore::unreadablePolicyFile()
{
    // A folder where the file should be cannot be read, whoever runs the test (root reads any mode bits).
    Files files;
    QVERIFY(QDir().mkpath(files.policy));
    const Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(!store.ok());
    QVERIFY2(store.error().startsWith(files.policy + QStringLiteral(" cannot be read (")),
             qPrintable(store.error()));
    QVERIFY(store.error().endsWith(
        QStringLiteral("); the organisation's policy is never ignored: fix the file or remove it")));
}

void TestPreferenceStore::defaultPolicyFile()
{
    const QByteArray saved = qgetenv("GLEANER_POLICY_FILE");
    qunsetenv("GLEANER_POLICY_FILE");
    QCOMPARE(PreferenceStore::defaultPolicyFile(), QStringLiteral("/etc/gleaner/policy.json"));
    qputenv("GLEANER_POLICY_FILE", "");
    QCOMPARE(PreferenceStore::defaultPolicyFile(), QStringLiteral("/etc/gleaner/policy.json"));
    qputenv("GLEANER_POLICY_FILE", "/tmp/test-policy.json");
    QCOMPARE(PreferenceStore::defaultPolicyFile(), QStringLiteral("/tmp/test-policy.json"));
    if (saved.isNull())
        qunsetenv("GLEANER_POLICY_FILE");
    else
        qputenv("GLEANER_POLICY_FILE", saved);
}

void TestPreferenceStore::describeShape()
{
    Files files;
    files.withPolicy(R"({"preferences": {"idle_seconds": 600}, "locked": ["idle_seconds"]})");
    files.withUser(R"({"gpu": "always"})");
    const Result<PreferenceStore> store = PreferenceStore::open(files.user, files.policy);
    QVERIFY(store.ok());
    const QJsonObject described = store->describe();
    QCOMPARE(described.keys(), (QStringList{QStringLiteral("catalogue"), QStringLiteral("locked"),
                                            QStringLiteral("policy_file"), QStringLiteral("values")}));
    QCOMPARE(described.value(QStringLiteral("values")).toObject(), store->current().toJson());
    QCOMPARE(described.value(QStringLiteral("values")).toObject().value(QStringLiteral("gpu")).toString(),
             QStringLiteral("always"));
    QCOMPARE(described.value(QStringLiteral("locked")).toArray(), QJsonArray{QStringLiteral("idle_seconds")});
    QCOMPARE(described.value(QStringLiteral("policy_file")).toString(), files.policy);

    const QJsonArray catalogue = described.value(QStringLiteral("catalogue")).toArray();
    QCOMPARE(catalogue.size(), Preferences::catalogue().size());
    QJsonObject byKey;
    for (const QJsonValue& entry : catalogue)
        byKey.insert(entry.toObject().value(QStringLiteral("key")).toString(), entry);
    const QString idleHelp = Preferences::info(QStringLiteral("idle_seconds"))->help;
    QCOMPARE(compact(byKey.value(QStringLiteral("idle_seconds")).toObject()),
             compact(QJsonObject{{QStringLiteral("key"), QStringLiteral("idle_seconds")},
                                 {QStringLiteral("type"), QStringLiteral("int")},
                                 {QStringLiteral("default"), 180},
                                 {QStringLiteral("min"), 5},
                                 {QStringLiteral("max"), 86400},
                                 {QStringLiteral("unit"), QStringLiteral("s")},
                                 {QStringLiteral("label"), QStringLiteral("Start after idle for")},
                                 {QStringLiteral("help"), idleHelp},
                                 {QStringLiteral("group"), QStringLiteral("simple")}}));
    const QJsonObject gpu = byKey.value(QStringLiteral("gpu")).toObject();
    QCOMPARE(gpu.value(QStringLiteral("type")).toString(), QStringLiteral("enum"));
    QCOMPARE(gpu.value(QStringLiteral("default")).toString(), QStringLiteral("idle"));
    QCOMPARE(gpu.value(QStringLiteral("choices")).toArray(),
             (QJsonArray{QStringLiteral("never"), QStringLiteral("idle"), QStringLiteral("always")}));
    QCOMPARE(gpu.value(QStringLiteral("group")).toString(), QStringLiteral("advanced"));
    QVERIFY(!gpu.contains(QStringLiteral("min")) && !gpu.contains(QStringLiteral("unit")));
    const QJsonObject schedule = byKey.value(QStringLiteral("schedule")).toObject();
    QCOMPARE(schedule.value(QStringLiteral("type")).toString(), QStringLiteral("string_list"));
    QCOMPARE(schedule.value(QStringLiteral("default")).toArray(), QJsonArray());
    QCOMPARE(
        byKey.value(QStringLiteral("only_when_idle")).toObject().value(QStringLiteral("type")).toString(),
        QStringLiteral("bool"));
    // The catalogue keeps the docs' order, which the forms follow.
    QCOMPARE(catalogue.first().toObject().value(QStringLiteral("key")).toString(),
             QStringLiteral("only_when_idle"));
    QCOMPARE(catalogue.last().toObject().value(QStringLiteral("key")).toString(),
             QStringLiteral("allow_unconfined_models"));

    // Without a policy file the object says so with null.
    const Result<PreferenceStore> plain = PreferenceStore::open(files.user, QString());
    QVERIFY(plain->describe().value(QStringLiteral("policy_file")).isNull());
}

QTEST_GUILESS_MAIN(TestPreferenceStore)
#include "TestPreferenceStore.moc"
