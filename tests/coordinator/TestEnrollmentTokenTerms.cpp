// EnrollmentTokenTerms: the lifetimes and use counts an admin may give an enrollment token, as the CLI parses
// them (--expires, --uses) and as the admin API reads them, with the error each bad input gets.
#include "enrollment/EnrollmentTokenTerms.h"

#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestEnrollmentTokenTerms : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void lifetimes_data();
    void lifetimes();
    void uses_data();
    void uses();
    void apiDefaultsToSevenDays();
};

void TestEnrollmentTokenTerms::lifetimes_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<qint64>("seconds"); // -1: never; 0: refused
    QTest::addColumn<QString>("error");
    QTest::newRow("seconds") << "45s" << qint64(45) << QString();
    QTest::newRow("minutes") << "30m" << qint64(1800) << QString();
    QTest::newRow("hours") << "12h" << qint64(43'200) << QString();
    QTest::newRow("days") << "7d" << qint64(604'800) << QString();
    QTest::newRow("upper-case unit") << "2D" << qint64(172'800) << QString();
    QTest::newRow("ten years") << "3650d" << qint64(315'360'000) << QString();
    QTest::newRow("never") << "never" << qint64(-1) << QString();
    QTest::newRow("Never") << "Never" << qint64(-1) << QString();
    // Once multiplied without a check: 9999999999999 days is 8.6e17 s, and 8.6e20 ms wrapped around.
    QTest::newRow("9999999999999d") << "9999999999999d" << qint64(0) << "\"9999999999999d\" is longer than a token may live";
    QTest::newRow("past qint64") << "99999999999999999999s" << qint64(0) << "\"99999999999999999999s\" is longer";
    QTest::newRow("overflows in the multiplication") << "106751991167301d" << qint64(0) << "is longer";
    QTest::newRow("3651d") << "3651d" << qint64(0) << "at most 3650 days";
    QTest::newRow("zero") << "0d" << qint64(0) << "at least one second";
    QTest::newRow("negative") << "-1d" << qint64(0) << "\"-1d\" is not a lifetime";
    QTest::newRow("fraction") << "1.5h" << qint64(0) << "\"1.5h\" is not a lifetime";
    QTest::newRow("no number") << "d" << qint64(0) << "not a lifetime";
    QTest::newRow("no unit") << "7" << qint64(0) << "not a lifetime";
    QTest::newRow("years") << "1y" << qint64(0) << "30m, 12h or 7d";
    QTest::newRow("empty") << "" << qint64(0) << "not a lifetime";
    QTest::newRow("plus sign") << "+5d" << qint64(0) << "not a lifetime";
}

void TestEnrollmentTokenTerms::lifetimes()
{
    QFETCH(QString, text);
    QFETCH(qint64, seconds);
    QFETCH(QString, error);
    const auto parsed = EnrollmentTokenTerms::parseLifetime(text);
    if (!error.isEmpty()) {
        QVERIFY(!parsed.ok());
        QVERIFY2(parsed.error().contains(error), qPrintable(parsed.error()));
        return;
    }
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    if (seconds < 0)
        QVERIFY(!parsed->has_value());
    else
        QCOMPARE(parsed->value_or(-1), seconds);
}

void TestEnrollmentTokenTerms::uses_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<qint64>("uses"); // 0: refused
    QTest::newRow("one") << "1" << qint64(1);
    QTest::newRow("a million") << "1000000" << qint64(1'000'000);
    QTest::newRow("past a million") << "1000001" << qint64(0);
    QTest::newRow("past qint64") << "99999999999999999999" << qint64(0);
    QTest::newRow("zero") << "0" << qint64(0);
    QTest::newRow("negative") << "-3" << qint64(0);
    QTest::newRow("text") << "many" << qint64(0);
}

void TestEnrollmentTokenTerms::uses()
{
    QFETCH(QString, text);
    QFETCH(qint64, uses);
    const auto parsed = EnrollmentTokenTerms::parseUses(text);
    if (uses == 0) {
        QVERIFY(!parsed.ok());
        QVERIFY2(parsed.error().contains(u'"' + text + u'"'), qPrintable(parsed.error()));
        return;
    }
    QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
    QCOMPARE(*parsed, uses);
}

void TestEnrollmentTokenTerms::apiDefaultsToSevenDays()
{
    const auto terms = EnrollmentTokenTerms::fromJson({});
    QVERIFY(terms.ok());
    QCOMPARE(terms->lifetimeSeconds.value_or(-1), qint64(604'800));
    QVERIFY(!terms->uses.has_value());
    // What the coordinator is given holds every field, so it never applies a default of its own.
    const QJsonObject stored = terms->toJson();
    QCOMPARE(stored.value(QStringLiteral("expires_seconds")).toInteger(), 604'800);
    QVERIFY(stored.value(QStringLiteral("uses")).isNull());
    const auto never = EnrollmentTokenTerms::fromJson(QJsonDocument::fromJson(R"({"expires_seconds": null})").object());
    QVERIFY(never.ok());
    QVERIFY(!never->lifetimeSeconds.has_value());
    QVERIFY(never->toJson().value(QStringLiteral("expires_seconds")).isNull());
}

QTEST_GUILESS_MAIN(TestEnrollmentTokenTerms)
#include "TestEnrollmentTokenTerms.moc"
