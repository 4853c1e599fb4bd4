// The weekly schedule of the `schedule` preference (agent/policy/Schedule): what it accepts, what it refuses
// and with which words, and which minutes it allows across midnight, the week end and 24:00.
#include "policy/Schedule.h"

#include <QTest>
#include <QTimeZone>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

// "Mon 17:59:30.500" style times in the first week of 2024, which starts on a Monday (2024-01-01). UTC, so no
// daylight-saving change of the machine running the test moves a minute.
QDateTime at(const QString& text)
{
    static const QStringList days{QStringLiteral("Mon"), QStringLiteral("Tue"), QStringLiteral("Wed"),
                                  QStringLiteral("Thu"), QStringLiteral("Fri"), QStringLiteral("Sat"),
                                  QStringLiteral("Sun"), QStringLiteral("Mon2")};
    const QStringList parts = text.split(u' ');
    const int day = int(days.indexOf(parts[0]));
    Q_ASSERT(day >= 0);
    QTime time = QTime::fromString(parts[1], QStringLiteral("HH:mm:ss.zzz"));
    if (!time.isValid())
        time = QTime::fromString(parts[1], QStringLiteral("HH:mm:ss"));
    if (!time.isValid())
        time = QTime::fromString(parts[1], QStringLiteral("HH:mm"));
    Q_ASSERT(time.isValid());
    return QDateTime(QDate(2024, 1, 1).addDays(day), time, Qt::UTC);
}

Schedule parsed(const QStringList& entries)
{
    Result<Schedule> schedule = Schedule::parse(entries);
    if (!schedule)
        qFatal("fixture schedule does not parse: %s", qPrintable(schedule.error()));
    return *schedule;
}

} // namespace

class TestSchedule : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void parsing_data();
    void parsing();
    void allows_data();
    void allows();
    void nextStart_data();
    void nextStart();
    void emptyAllowsAlways();
    void normalisedSpelling();
    void daylightSavingSpringForward();
};

void TestSchedule::parsing_data()
{
    QTest::addColumn<QStringList>("entries");
    QTest::addColumn<QString>("error"); // empty: parses

    const QString expected =
        QStringLiteral("write DAYS or DAYS HH:MM-HH:MM, e.g. \"mon-fri 18:00-08:00\" or \"sat,sun\"");
    QTest::newRow("no entries") << QStringList{} << QString();
    QTest::newRow("one day") << QStringList{QStringLiteral("mon")} << QString();
    QTest::newRow("day range with times") << QStringList{QStringLiteral("mon-fri 18:00-08:00")} << QString();
    QTest::newRow("day list") << QStringList{QStringLiteral("sat,sun")} << QString();
    QTest::newRow("ranges in a list") << QStringList{QStringLiteral("mon-wed,fri 09:30-12:00")} << QString();
    QTest::newRow("wrapping day range") << QStringList{QStringLiteral("fri-mon")} << QString();
    QTest::newRow("case and blanks") << QStringList{QStringLiteral("  Mon - Fri   18:00 - 08:00 ")}
                                     << QString();
    QTest::newRow("single-digit hour") << QStringList{QStringLiteral("tue 8:00-9:30")} << QString();
    QTest::newRow("24:00 ends a range") << QStringList{QStringLiteral("wed 20:00-24:00")} << QString();
    QTest::newRow("same start and end") << QStringList{QStringLiteral("thu 08:00-08:00")} << QString();
    QTest::newRow("several entries") << QStringList{QStringLiteral("mon-fri 18:00-08:00"),
                                                    QStringLiteral("sat,sun")}
                                     << QString();

    QTest::newRow("empty entry") << QStringList{QStringLiteral("   ")}
                                 << QStringLiteral("schedule entry \"   \" is empty; ") + expected;
    QTest::newRow("full day name") << QStringList{QStringLiteral("monday")}
                                   << QStringLiteral(
                                          "schedule entry \"monday\": \"monday\" is not a day; use mon, tue, "
                                          "wed, thu, fri, sat or sun");
    QTest::newRow("bad day in a range")
        << QStringList{QStringLiteral("mon-fr")}
        << QStringLiteral("schedule entry \"mon-fr\": \"fr\" is not a day; use mon, "
                          "tue, wed, thu, fri, sat or sun");
    QTest::newRow("three-day range") << QStringList{QStringLiteral("mon-tue-wed")}
                                     << QStringLiteral(
                                            "schedule entry \"mon-tue-wed\": \"mon-tue-wed\" is not a day "
                                            "range; join two days with one \"-\", e.g. mon-fri");
    QTest::newRow("double comma") << QStringList{QStringLiteral("mon,,tue")}
                                  << QStringLiteral(
                                         "schedule entry \"mon,,tue\": a day is missing in \"mon,,tue\"; "
                                         "separate days with single commas, e.g. sat,sun");
    QTest::newRow("time without range")
        << QStringList{QStringLiteral("mon 18:00")}
        << QStringLiteral("schedule entry \"mon 18:00\": \"18:00\" is not a time "
                          "range; write HH:MM-HH:MM, e.g. 18:00-08:00");
    QTest::newRow("hour 25") << QStringList{QStringLiteral("mon 25:00-26:00")}
                             << QStringLiteral(
                                    "schedule entry \"mon 25:00-26:00\": \"25:00\" is not a time of day; "
                                    "use HH:MM from 00:00 to 24:00");
    QTest::newRow("minute 60") << QStringList{QStringLiteral("mon 18:00-18:60")}
                               << QStringLiteral(
                                      "schedule entry \"mon 18:00-18:60\": \"18:60\" is not a time of "
                                      "day; use HH:MM from 00:00 to 24:00");
    QTest::newRow("24:30") << QStringList{QStringLiteral("mon 10:00-24:30")}
                           << QStringLiteral(
                                  "schedule entry \"mon 10:00-24:30\": \"24:30\" is not a time of day; "
                                  "use HH:MM from 00:00 to 24:00");
    QTest::newRow("no colon") << QStringList{QStringLiteral("mon 1800-2000")}
                              << QStringLiteral(
                                     "schedule entry \"mon 1800-2000\": \"1800\" is not a time of day; use "
                                     "HH:MM from 00:00 to 24:00");
    QTest::newRow("24:00 as start") << QStringList{QStringLiteral("mon 24:00-06:00")}
                                    << QStringLiteral(
                                           "schedule entry \"mon 24:00-06:00\": 24:00 is the end of the day "
                                           "and cannot start a range; write 00:00 instead");
    QTest::newRow("two time ranges") << QStringList{QStringLiteral("mon 08:00-10:00 12:00-14:00")}
                                     << QStringLiteral(
                                            "schedule entry \"mon 08:00-10:00 12:00-14:00\" has more than "
                                            "days and one time range; ") +
                                            expected;
    QTest::newRow("second entry bad")
        << QStringList{QStringLiteral("mon"), QStringLiteral("weekend")}
        << QStringLiteral("schedule entry \"weekend\": \"weekend\" is not a day; use "
                          "mon, tue, wed, thu, fri, sat or sun");
}

void TestSchedule::parsing()
{
    QFETCH(QStringList, entries);
    QFETCH(QString, error);
    const Result<Schedule> schedule = Schedule::parse(entries);
    QCOMPARE(schedule.error(), error);
    QCOMPARE(schedule.ok(), error.isEmpty());
    if (schedule.ok())
        QCOMPARE(schedule->isEmpty(), entries.isEmpty());
}

void TestSchedule::allows_data()
{
    QTest::addColumn<QStringList>("entries");
    QTest::addColumn<QString>("when");
    QTest::addColumn<bool>("allowed");

    const QStringList evenings{QStringLiteral("mon-fri 18:00-08:00")};
    QTest::newRow("evenings: before the start") << evenings << QStringLiteral("Mon 17:59:59") << false;
    QTest::newRow("evenings: at the start") << evenings << QStringLiteral("Mon 18:00") << true;
    QTest::newRow("evenings: past midnight") << evenings << QStringLiteral("Tue 00:00") << true;
    QTest::newRow("evenings: last minute") << evenings << QStringLiteral("Tue 07:59:59") << true;
    QTest::newRow("evenings: end is exclusive") << evenings << QStringLiteral("Tue 08:00") << false;
    QTest::newRow("evenings: friday night spills into saturday")
        << evenings << QStringLiteral("Sat 07:59") << true;
    QTest::newRow("evenings: saturday after the spill") << evenings << QStringLiteral("Sat 08:00") << false;
    QTest::newRow("evenings: sunday night not listed") << evenings << QStringLiteral("Sun 23:00") << false;
    QTest::newRow("evenings: monday early not from sunday")
        << evenings << QStringLiteral("Mon 00:30") << false;

    const QStringList sundayNight{QStringLiteral("sun 22:00-06:00")};
    QTest::newRow("sunday night: sunday 23:00") << sundayNight << QStringLiteral("Sun 23:00") << true;
    QTest::newRow("sunday night: wraps into monday") << sundayNight << QStringLiteral("Mon 05:59") << true;
    QTest::newRow("sunday night: monday 06:00") << sundayNight << QStringLiteral("Mon 06:00") << false;
    QTest::newRow("sunday night: saturday night") << sundayNight << QStringLiteral("Sat 23:00") << false;

    const QStringList longWeekend{QStringLiteral("fri-mon")};
    QTest::newRow("fri-mon: friday midnight") << longWeekend << QStringLiteral("Fri 00:00") << true;
    QTest::newRow("fri-mon: sunday") << longWeekend << QStringLiteral("Sun 12:00") << true;
    QTest::newRow("fri-mon: monday last minute") << longWeekend << QStringLiteral("Mon 23:59:59") << true;
    QTest::newRow("fri-mon: tuesday") << longWeekend << QStringLiteral("Tue 00:00") << false;
    QTest::newRow("fri-mon: thursday night") << longWeekend << QStringLiteral("Thu 23:59") << false;

    const QStringList lateWednesday{QStringLiteral("wed 20:00-24:00")};
    QTest::newRow("24:00: last minute of wednesday")
        << lateWednesday << QStringLiteral("Wed 23:59:59") << true;
    QTest::newRow("24:00: thursday midnight") << lateWednesday << QStringLiteral("Thu 00:00") << false;
    QTest::newRow("24:00: before") << lateWednesday << QStringLiteral("Wed 19:59") << false;

    const QStringList fullDay{QStringLiteral("thu 08:00-08:00")};
    QTest::newRow("same start and end: 24 h from the start")
        << fullDay << QStringLiteral("Fri 07:59") << true;
    QTest::newRow("same start and end: not before") << fullDay << QStringLiteral("Thu 07:59") << false;
    QTest::newRow("same start and end: ends on friday") << fullDay << QStringLiteral("Fri 08:00") << false;

    const QStringList both{QStringLiteral("mon-fri 18:00-08:00"), QStringLiteral("sat,sun")};
    QTest::newRow("entries add up: saturday noon") << both << QStringLiteral("Sat 12:00") << true;
    QTest::newRow("entries add up: wednesday noon") << both << QStringLiteral("Wed 12:00") << false;
    QTest::newRow("list with a range: wednesday")
        << QStringList{QStringLiteral("mon-wed,fri")} << QStringLiteral("Wed 12:00") << true;
    QTest::newRow("list with a range: thursday")
        << QStringList{QStringLiteral("mon-wed,fri")} << QStringLiteral("Thu 12:00") << false;
}

void TestSchedule::allows()
{
    QFETCH(QStringList, entries);
    QFETCH(QString, when);
    QFETCH(bool, allowed);
    QCOMPARE(parsed(entries).allows(at(when)), allowed);
}

void TestSchedule::nextStart_data()
{
    QTest::addColumn<QStringList>("entries");
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("next");

    const QStringList evenings{QStringLiteral("mon-fri 18:00-08:00")};
    QTest::newRow("later today") << evenings << QStringLiteral("Mon 12:00") << QStringLiteral("Mon 18:00");
    QTest::newRow("seconds before the start")
        << evenings << QStringLiteral("Mon 17:59:30.500") << QStringLiteral("Mon 18:00:00.000");
    QTest::newRow("already allowed: now")
        << evenings << QStringLiteral("Mon 19:00:10") << QStringLiteral("Mon 19:00:10");
    QTest::newRow("over the week end")
        << evenings << QStringLiteral("Sat 10:00") << QStringLiteral("Mon2 18:00");
    QTest::newRow("wrapping entry, back to sunday")
        << QStringList{QStringLiteral("sun 22:00-06:00")} << QStringLiteral("Mon 06:00")
        << QStringLiteral("Sun 22:00");
    QTest::newRow("six days ahead") << QStringList{QStringLiteral("mon")} << QStringLiteral("Tue 00:00")
                                    << QStringLiteral("Mon2 00:00");
    QTest::newRow("nearly a week ahead") << QStringList{QStringLiteral("mon 23:00-24:00")}
                                         << QStringLiteral("Tue 00:00") << QStringLiteral("Mon2 23:00");
    QTest::newRow("midnight") << QStringList{QStringLiteral("sat,sun")} << QStringLiteral("Fri 23:59:59")
                              << QStringLiteral("Sat 00:00");
    QTest::newRow("fri-mon from tuesday") << QStringList{QStringLiteral("fri-mon")}
                                          << QStringLiteral("Tue 10:00") << QStringLiteral("Fri 00:00");
}

void TestSchedule::nextStart()
{
    QFETCH(QStringList, entries);
    QFETCH(QString, from);
    QFETCH(QString, next);
    const Schedule schedule = parsed(entries);
    const QDateTime start = schedule.nextStart(at(from));
    QCOMPARE(start, at(next));
    QVERIFY(schedule.allows(start));
    // The minute before a start that is not `from` itself is outside the schedule.
    if (start != at(from))
        QVERIFY(!schedule.allows(start.addSecs(-60)));
}

void TestSchedule::emptyAllowsAlways()
{
    const Schedule schedule = parsed({});
    QVERIFY(schedule.isEmpty());
    QVERIFY(schedule.allows(at(QStringLiteral("Wed 03:17"))));
    QCOMPARE(schedule.nextStart(at(QStringLiteral("Wed 03:17:42"))), at(QStringLiteral("Wed 03:17:42")));
    QVERIFY(Schedule().allows(at(QStringLiteral("Sun 23:59"))));
    QVERIFY(!parsed({QStringLiteral("mon")}).nextStart(QDateTime()).isValid());
}

void TestSchedule::normalisedSpelling()
{
    QCOMPARE(Schedule::normalise(QStringLiteral("  Mon - Fri   18:00 - 08:00 ")),
             QStringLiteral("mon-fri 18:00-08:00"));
    QCOMPARE(Schedule::normalise(QStringLiteral("SAT , SUN")), QStringLiteral("sat,sun"));
    QCOMPARE(parsed({QStringLiteral("MON-FRI 18:00-08:00")}),
             parsed({QStringLiteral("mon-fri 18:00-08:00")}));
}

void TestSchedule::daylightSavingSpringForward()
{
    // Berlin skips 02:00-03:00 on 2024-03-31 (a Sunday): the next start after 01:59:30 inside "sun
    // 02:30-04:00" is 03:00, the first existing minute of the range, not a time that does not exist.
    const QTimeZone berlin("Europe/Berlin");
    if (!berlin.isValid())
        QSKIP("this machine has no time zone data for Europe/Berlin");
    const Schedule schedule = parsed({QStringLiteral("sun 02:30-04:00")});
    const QDateTime from(QDate(2024, 3, 31), QTime(1, 59, 30), berlin);
    const QDateTime next = schedule.nextStart(from);
    QCOMPARE(next, QDateTime(QDate(2024, 3, 31), QTime(3, 0), berlin));
    QCOMPARE(next.toMSecsSinceEpoch() - from.toMSecsSinceEpoch(), qint64(30'000));
}

QTEST_GUILESS_MAIN(TestSchedule)
#include "TestSchedule.moc"
