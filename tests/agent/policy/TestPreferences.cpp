// The preferences (agent/policy/Preferences): the catalogue against docs/desktop.md, every refusal of
// validate() and its words, the defaults and the typed accessors, and the JSON round trip.
#include "TestSupport.h"
#include "policy/Preferences.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

QJsonValue jsonValue(const QByteArray& text)
{
    const QJsonDocument document = QJsonDocument::fromJson("[" + text + "]");
    if (!document.isArray() || document.array().size() != 1)
        qFatal("fixture is not one JSON value: %s", text.constData());
    return document.array().at(0);
}

const QString kAllKeys = QStringLiteral(
    "only_when_idle, idle_seconds, respect_inhibitors, other_cpu_limit_percent, pause_on_battery, schedule, "
    "pause_programs, max_cores, cpu_share_percent, memory_active_mb, memory_idle_mb, gpu, cache_mb, "
    "upload_kib_per_s, download_kib_per_s, checkpoint_seconds, allow_unconfined_models");

} // namespace

class TestPreferences : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void catalogueMatchesTheDocs();
    void catalogueEntriesAreComplete();
    void validate_data();
    void validate();
    void defaultsAndAccessors();
    void setRefusesAndKeeps();
    void jsonRoundTrip();
};

void TestPreferences::catalogueMatchesTheDocs()
{
    // The table of docs/desktop.md is the contract; the catalogue must say the same, row by row.
    const QString docs =
        QString::fromUtf8(test::readFile(test::sourceDir() + QStringLiteral("/docs/desktop.md")));
    QVERIFY(!docs.isEmpty());
    const qsizetype from = docs.indexOf(QStringLiteral("## Preferences"));
    const qsizetype to = docs.indexOf(QStringLiteral("### The schedule"));
    QVERIFY(from >= 0 && to > from);
    QStringList rows;
    for (const QString& line : docs.mid(from, to - from).split(u'\n')) {
        if (line.startsWith(QStringLiteral("| `")))
            rows << line;
    }
    const QList<PreferenceInfo>& catalogue = Preferences::catalogue();
    QCOMPARE(rows.size(), catalogue.size());

    const QRegularExpression range(QStringLiteral("^(\\d+) \u2013 (\\d+)$"));
    for (qsizetype i = 0; i < rows.size(); ++i) {
        QStringList cells = rows[i].split(u'|');
        for (QString& cell : cells)
            cell = cell.trimmed().remove(u'`');
        // cells: "", key, type, default, limits, meaning, ""
        const PreferenceInfo& info = catalogue[i];
        QCOMPARE(info.key, cells[1]);
        QCOMPARE(Preferences::typeName(info.type), QString(cells[2]).replace(u' ', u'_'));
        QCOMPARE(info.defaultValue, jsonValue(cells[3].toUtf8().startsWith('[') || cells[3] == u"true" ||
                                                      cells[3] == u"false" || cells[3].front().isDigit()
                                                  ? cells[3].toUtf8()
                                                  : '"' + cells[3].toUtf8() + '"'));
        if (info.type == PreferenceType::Int) {
            const QRegularExpressionMatch match = range.match(cells[4]);
            QVERIFY2(match.hasMatch(), qPrintable(cells[4]));
            QCOMPARE(info.min, match.captured(1).toLongLong());
            QCOMPARE(info.max, match.captured(2).toLongLong());
        } else if (info.type == PreferenceType::Enum) {
            QCOMPARE(info.choices.join(QStringLiteral(", ")), cells[4]);
        } else {
            QCOMPARE(cells[4], QString());
        }
    }
}

void TestPreferences::catalogueEntriesAreComplete()
{
    for (const PreferenceInfo& info : Preferences::catalogue()) {
        QVERIFY2(!info.label.isEmpty() && !info.help.isEmpty(), qPrintable(info.key));
        QVERIFY2(info.help.endsWith(u'.'), qPrintable(info.key));
        // Every default passes its own limits, and is already in its one spelling.
        const Result<QJsonValue> checked = Preferences::validate(info.key, info.defaultValue);
        QVERIFY2(checked.ok(), qPrintable(checked.error()));
        QCOMPARE(*checked, info.defaultValue);
        QCOMPARE(Preferences::info(info.key), &info);
        if (info.type == PreferenceType::Int)
            QVERIFY2(!info.unit.isEmpty() && info.min < info.max, qPrintable(info.key));
    }
    QCOMPARE(Preferences::info(QStringLiteral("speed")), nullptr);
    QCOMPARE(Preferences::keys().join(QStringLiteral(", ")), kAllKeys);
    // The simple page shows the few settings most volunteers touch.
    QStringList simple;
    for (const PreferenceInfo& info : Preferences::catalogue()) {
        if (info.simple)
            simple << info.key;
    }
    QCOMPARE(simple, (QStringList{QStringLiteral("only_when_idle"), QStringLiteral("idle_seconds"),
                                  QStringLiteral("pause_on_battery"), QStringLiteral("max_cores"),
                                  QStringLiteral("cpu_share_percent")}));
}

void TestPreferences::validate_data()
{
    QTest::addColumn<QString>("key");
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<QString>("origin");
    QTest::addColumn<QByteArray>("normal"); // the value as validate() returns it; empty when refused
    QTest::addColumn<QString>("error");

    const QString none;
    QTest::newRow("bool") << QStringLiteral("only_when_idle") << QByteArray("false") << none
                          << QByteArray("false") << none;
    QTest::newRow("int at min") << QStringLiteral("idle_seconds") << QByteArray("5") << none
                                << QByteArray("5") << none;
    QTest::newRow("int at max") << QStringLiteral("idle_seconds") << QByteArray("86400") << none
                                << QByteArray("86400") << none;
    QTest::newRow("int written as 180.0")
        << QStringLiteral("idle_seconds") << QByteArray("180.0") << none << QByteArray("180") << none;
    QTest::newRow("largest cache") << QStringLiteral("cache_mb") << QByteArray("16777216") << none
                                   << QByteArray("16777216") << none;
    QTest::newRow("enum") << QStringLiteral("gpu") << QByteArray("\"always\"") << none
                          << QByteArray("\"always\"") << none;
    QTest::newRow("schedule spelled one way")
        << QStringLiteral("schedule") << QByteArray(R"([" Mon - Fri 18:00-08:00 ", "SAT,sun"])") << none
        << QByteArray(R"(["mon-fri 18:00-08:00","sat,sun"])") << none;
    QTest::newRow("programs trimmed, once each")
        << QStringLiteral("pause_programs") << QByteArray(R"([" steam ", "obs", "steam"])") << none
        << QByteArray(R"(["steam","obs"])") << none;
    QTest::newRow("empty lists") << QStringLiteral("pause_programs") << QByteArray("[]") << none
                                 << QByteArray("[]") << none;

    QTest::newRow("unknown key") << QStringLiteral("speed") << QByteArray("1") << none << QByteArray()
                                 << QStringLiteral("unknown preference \"speed\"; the known ones are ") +
                                        kAllKeys;
    QTest::newRow("bool as a string")
        << QStringLiteral("only_when_idle") << QByteArray("\"yes\"") << none << QByteArray()
        << QStringLiteral("only_when_idle must be true or false, not \"yes\"");
    QTest::newRow("bool as null") << QStringLiteral("pause_on_battery") << QByteArray("null") << none
                                  << QByteArray()
                                  << QStringLiteral("pause_on_battery must be true or false, not null");
    QTest::newRow("int as a string") << QStringLiteral("idle_seconds") << QByteArray("\"180\"") << none
                                     << QByteArray()
                                     << QStringLiteral(
                                            "idle_seconds must be a whole number from 5 to 86400 (s), not "
                                            "\"180\"");
    QTest::newRow("int below min") << QStringLiteral("idle_seconds") << QByteArray("4") << none
                                   << QByteArray()
                                   << QStringLiteral(
                                          "idle_seconds must be a whole number from 5 to 86400 (s), not 4");
    QTest::newRow("int above max") << QStringLiteral("idle_seconds") << QByteArray("86401") << none
                                   << QByteArray()
                                   << QStringLiteral(
                                          "idle_seconds must be a whole number from 5 to 86400 (s), not "
                                          "86401");
    QTest::newRow("int with a fraction")
        << QStringLiteral("idle_seconds") << QByteArray("7.5") << none << QByteArray()
        << QStringLiteral("idle_seconds must be a whole number from 5 to 86400 "
                          "(s), not 7.5");
    QTest::newRow("percent over 100")
        << QStringLiteral("other_cpu_limit_percent") << QByteArray("101") << none << QByteArray()
        << QStringLiteral("other_cpu_limit_percent must be a whole number from 5 to "
                          "100 (%), not 101");
    QTest::newRow("negative cores") << QStringLiteral("max_cores") << QByteArray("-1") << none << QByteArray()
                                    << QStringLiteral(
                                           "max_cores must be a whole number from 0 to 1024 (cores), not "
                                           "-1");
    QTest::newRow("memory over 1 TiB")
        << QStringLiteral("memory_idle_mb") << QByteArray("1048577") << none << QByteArray()
        << QStringLiteral("memory_idle_mb must be a whole number from 0 to 1048576 "
                          "(MiB), not 1048577");
    QTest::newRow("unknown choice") << QStringLiteral("gpu") << QByteArray("\"sometimes\"") << none
                                    << QByteArray()
                                    << QStringLiteral("gpu must be \"never\", \"idle\" or \"always\", not "
                                                      "\"sometimes\"");
    QTest::newRow("choice in capitals")
        << QStringLiteral("gpu") << QByteArray("\"IDLE\"") << none << QByteArray()
        << QStringLiteral("gpu must be \"never\", \"idle\" or \"always\", not "
                          "\"IDLE\"");
    QTest::newRow("choice as a number")
        << QStringLiteral("gpu") << QByteArray("1") << none << QByteArray()
        << QStringLiteral("gpu must be \"never\", \"idle\" or \"always\", not 1");
    QTest::newRow("schedule as a string")
        << QStringLiteral("schedule") << QByteArray("\"mon\"") << none << QByteArray()
        << QStringLiteral("schedule must be a list of strings, e.g. [\"mon-fri "
                          "18:00-08:00\", \"sat,sun\"], not \"mon\"");
    QTest::newRow("schedule with a number")
        << QStringLiteral("schedule") << QByteArray(R"(["mon", 1])") << none << QByteArray()
        << QStringLiteral("schedule must be a list of strings, e.g. "
                          "[\"mon-fri 18:00-08:00\", \"sat,sun\"], not "
                          "[\"mon\",1] (item 2 is 1)");
    QTest::newRow("bad schedule entry")
        << QStringLiteral("schedule") << QByteArray(R"(["mon 25:00-26:00"])") << none << QByteArray()
        << QStringLiteral("schedule entry \"mon 25:00-26:00\": \"25:00\" is not a "
                          "time of day; use HH:MM from 00:00 to 24:00");
    QTest::newRow("programs as an object")
        << QStringLiteral("pause_programs") << QByteArray(R"({"steam": 1})") << none << QByteArray()
        << QStringLiteral("pause_programs must be a list of strings, e.g. "
                          "[\"steam\", \"obs\"], not {\"steam\":1}");
    QTest::newRow("blank program name")
        << QStringLiteral("pause_programs") << QByteArray(R"(["steam", " "])") << none << QByteArray()
        << QStringLiteral("pause_programs holds an empty program name in "
                          "[\"steam\",\" \"]; name each program as ps shows it, e.g. "
                          "steam");
    QTest::newRow("origin names the file")
        << QStringLiteral("idle_seconds") << QByteArray("3") << QStringLiteral("/etc/gleaner/policy.json")
        << QByteArray()
        << QStringLiteral("/etc/gleaner/policy.json: idle_seconds must be a whole "
                          "number from 5 to 86400 (s), not 3");
    QTest::newRow("origin on a schedule entry")
        << QStringLiteral("schedule") << QByteArray(R"(["mo"])") << QStringLiteral("/etc/gleaner/policy.json")
        << QByteArray()
        << QStringLiteral("/etc/gleaner/policy.json: schedule entry \"mo\": "
                          "\"mo\" is not a day; use mon, tue, wed, thu, fri, "
                          "sat or sun");
    QTest::newRow("origin on an unknown key")
        << QStringLiteral("idle") << QByteArray("3") << QStringLiteral("prefs.json") << QByteArray()
        << QStringLiteral("prefs.json: unknown preference \"idle\"; the known "
                          "ones are ") +
               kAllKeys;
}

void TestPreferences::validate()
{
    QFETCH(QString, key);
    QFETCH(QByteArray, value);
    QFETCH(QString, origin);
    QFETCH(QByteArray, normal);
    QFETCH(QString, error);
    const Result<QJsonValue> checked = Preferences::validate(key, jsonValue(value), origin);
    QCOMPARE(checked.error(), error);
    QCOMPARE(checked.ok(), !normal.isEmpty());
    if (checked.ok()) {
        QCOMPARE(*checked, jsonValue(normal));
        // Integers come back as integers, so the files say 180, not 180.0.
        QCOMPARE(QJsonDocument(QJsonArray{*checked}).toJson(QJsonDocument::Compact), "[" + normal + "]");
    }
}

void TestPreferences::defaultsAndAccessors()
{
    const Preferences defaults = Preferences::defaults();
    QCOMPARE(defaults.toJson().size(), Preferences::catalogue().size());
    QVERIFY(defaults.onlyWhenIdle());
    QCOMPARE(defaults.idleSeconds(), 180);
    QVERIFY(defaults.respectInhibitors());
    QCOMPARE(defaults.otherCpuLimitPercent(), 25);
    QVERIFY(defaults.pauseOnBattery());
    QCOMPARE(defaults.scheduleEntries(), QStringList());
    QVERIFY(defaults.schedule().isEmpty());
    QCOMPARE(defaults.pausePrograms(), QStringList());
    QCOMPARE(defaults.maxCores(), 0);
    QCOMPARE(defaults.cpuSharePercent(), 100);
    QCOMPARE(defaults.memoryActiveBytes(), qint64(1024) * 1024 * 1024);
    QCOMPARE(defaults.memoryIdleBytes(), qint64(0));
    QCOMPARE(defaults.gpu(), Preferences::Gpu::Idle);
    QCOMPARE(defaults.cacheBytes(), qint64(10240) * 1024 * 1024);
    QCOMPARE(defaults.uploadBytesPerSecond(), qint64(0));
    QCOMPARE(defaults.downloadBytesPerSecond(), qint64(0));
    QCOMPARE(defaults.checkpointSeconds(), 60);
    QCOMPARE(Preferences(), defaults);

    Preferences prefs;
    QVERIFY(prefs.set(QStringLiteral("gpu"), QStringLiteral("never")).ok());
    QVERIFY(prefs.set(QStringLiteral("upload_kib_per_s"), 512).ok());
    QVERIFY(prefs.set(QStringLiteral("memory_idle_mb"), 1048576).ok());
    QVERIFY(prefs.set(QStringLiteral("cache_mb"), 16777216).ok());
    QVERIFY(prefs.set(QStringLiteral("schedule"), QJsonArray{QStringLiteral("SAT,SUN")}).ok());
    QCOMPARE(prefs.gpu(), Preferences::Gpu::Never);
    QCOMPARE(prefs.uploadBytesPerSecond(), qint64(512) * 1024);
    QCOMPARE(prefs.memoryIdleBytes(), qint64(1048576) * 1024 * 1024);
    QCOMPARE(prefs.cacheBytes(), qint64(16777216) * 1024 * 1024);
    QCOMPARE(prefs.scheduleEntries(), QStringList{QStringLiteral("sat,sun")});
    QVERIFY(!prefs.schedule().isEmpty());
    QVERIFY(!(prefs == defaults));
    QCOMPARE(prefs.value(QStringLiteral("nothing")), QJsonValue(QJsonValue::Undefined));
}

void TestPreferences::setRefusesAndKeeps()
{
    Preferences prefs;
    QVERIFY(prefs.set(QStringLiteral("schedule"), QJsonArray{QStringLiteral("mon-fri 18:00-08:00")}).ok());
    const Preferences before = prefs;
    const Result<void> refused = prefs.set(QStringLiteral("schedule"), QJsonArray{QStringLiteral("someday")});
    QCOMPARE(refused.error(),
             QStringLiteral("schedule entry \"someday\": \"someday\" is not a day; use mon, tue, wed, "
                            "thu, fri, sat or sun"));
    QCOMPARE(prefs, before);
    QCOMPARE(prefs.scheduleEntries(), QStringList{QStringLiteral("mon-fri 18:00-08:00")});
    QVERIFY(!prefs.schedule().allows(QDateTime(QDate(2024, 1, 1), QTime(12, 0), Qt::UTC)));
    QVERIFY(!prefs.set(QStringLiteral("speed"), 3).ok());
    QCOMPARE(prefs, before);
}

void TestPreferences::jsonRoundTrip()
{
    Preferences prefs;
    QVERIFY(prefs.set(QStringLiteral("only_when_idle"), false).ok());
    QVERIFY(prefs.set(QStringLiteral("idle_seconds"), 600).ok());
    QVERIFY(prefs.set(QStringLiteral("pause_programs"), QJsonArray{QStringLiteral("steam")}).ok());
    QVERIFY(prefs.set(QStringLiteral("schedule"), QJsonArray{QStringLiteral("fri 22:00-06:00")}).ok());
    QVERIFY(prefs.set(QStringLiteral("gpu"), QStringLiteral("always")).ok());

    // Through text and back, as the control socket and the user's file carry it.
    const QByteArray text = QJsonDocument(prefs.toJson()).toJson();
    const QJsonObject parsed = test::jsonObject(text);
    Preferences copy;
    for (auto it = parsed.begin(); it != parsed.end(); ++it)
        QVERIFY2(copy.set(it.key(), it.value()).ok(), qPrintable(it.key()));
    QCOMPARE(copy, prefs);
    QCOMPARE(copy.toJson(), prefs.toJson());
    QVERIFY(copy.schedule().allows(QDateTime(QDate(2024, 1, 6), QTime(5, 59), Qt::UTC))); // Saturday early
    QVERIFY(text.contains("\"idle_seconds\": 600,"));
}

QTEST_GUILESS_MAIN(TestPreferences)
#include "TestPreferences.moc"
