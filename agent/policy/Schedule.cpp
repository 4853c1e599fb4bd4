#include "Schedule.h"

#include <QRegularExpression>

#include <array>
#include <optional>

namespace gleaner::agent {

namespace {

constexpr int kMinutesPerDay = 24 * 60;

const std::array<QLatin1StringView, 7> kDays{
    QLatin1StringView("mon"), QLatin1StringView("tue"), QLatin1StringView("wed"), QLatin1StringView("thu"),
    QLatin1StringView("fri"), QLatin1StringView("sat"), QLatin1StringView("sun")};

const QString kExpected =
    QStringLiteral("write DAYS or DAYS HH:MM-HH:MM, e.g. \"mon-fri 18:00-08:00\" or \"sat,sun\"");

QString quoted(const QString& text)
{
    return u'"' + text + u'"';
}

std::optional<int> dayIndex(const QString& name)
{
    for (int i = 0; i < int(kDays.size()); ++i) {
        if (name == kDays[size_t(i)])
            return i;
    }
    return std::nullopt;
}

// The minute of the day HH:MM stands for, 0 to 1440; an error sentence otherwise.
Result<int> parseTime(const QString& text, bool isEnd)
{
    static const QRegularExpression pattern(QStringLiteral("^(\\d{1,2}):(\\d{2})$"));
    const QRegularExpressionMatch match = pattern.match(text);
    const int hours = match.hasMatch() ? match.captured(1).toInt() : -1;
    const int minutes = match.hasMatch() ? match.captured(2).toInt() : -1;
    if (hours < 0 || hours > 24 || minutes < 0 || minutes > 59 || (hours == 24 && minutes != 0))
        return fail(
            QStringLiteral("%1 is not a time of day; use HH:MM from 00:00 to 24:00").arg(quoted(text)));
    if (hours == 24 && !isEnd)
        return fail(
            QStringLiteral("24:00 is the end of the day and cannot start a range; write 00:00 instead"));
    return hours * 60 + minutes;
}

// The days one DAYS field names, as a mask (bit 0 = Monday).
Result<int> parseDays(const QString& text)
{
    int mask = 0;
    for (const QString& item : text.split(u',')) {
        if (item.isEmpty())
            return fail(
                QStringLiteral("a day is missing in %1; separate days with single commas, e.g. sat,sun")
                    .arg(quoted(text)));
        const QStringList ends = item.split(u'-');
        if (ends.size() > 2)
            return fail(QStringLiteral("%1 is not a day range; join two days with one \"-\", e.g. mon-fri")
                            .arg(quoted(item)));
        std::array<int, 2> bounds{};
        for (int i = 0; i < int(ends.size()); ++i) {
            const std::optional<int> day = dayIndex(ends[i]);
            if (!day)
                return fail(QStringLiteral("%1 is not a day; use mon, tue, wed, thu, fri, sat or sun")
                                .arg(quoted(ends[i])));
            bounds[size_t(i)] = *day;
        }
        if (ends.size() == 1)
            bounds[1] = bounds[0];
        // fri-mon wraps over the week end: walk forward from the first day until the last.
        for (int day = bounds[0];; day = (day + 1) % 7) {
            mask |= 1 << day;
            if (day == bounds[1])
                break;
        }
    }
    return mask;
}

} // namespace

QString Schedule::normalise(const QString& entry)
{
    static const QRegularExpression aroundSeparators(QStringLiteral("\\s*([,-])\\s*"));
    QString text = entry.simplified().toLower();
    text.replace(aroundSeparators, QStringLiteral("\\1"));
    return text;
}

Result<Schedule> Schedule::parse(const QStringList& entries)
{
    Schedule schedule;
    for (const QString& entry : entries) {
        const QString text = normalise(entry);
        const QString where = QStringLiteral("schedule entry %1").arg(quoted(entry));
        if (text.isEmpty())
            return fail(QStringLiteral("%1 is empty; %2").arg(where, kExpected));
        const QStringList parts = text.split(u' ');
        if (parts.size() > 2)
            return fail(QStringLiteral("%1 has more than days and one time range; %2").arg(where, kExpected));

        const Result<int> days = parseDays(parts[0]);
        if (!days)
            return fail(where + QStringLiteral(": ") + days.error());

        int start = 0;
        int end = kMinutesPerDay;
        if (parts.size() == 2) {
            const QStringList times = parts[1].split(u'-');
            if (times.size() != 2)
                return fail(QStringLiteral("%1: %2 is not a time range; write HH:MM-HH:MM, e.g. 18:00-08:00")
                                .arg(where, quoted(parts[1])));
            const Result<int> from = parseTime(times[0], false);
            if (!from)
                return fail(where + QStringLiteral(": ") + from.error());
            const Result<int> to = parseTime(times[1], true);
            if (!to)
                return fail(where + QStringLiteral(": ") + to.error());
            start = *from;
            // An end that is not after the start lies on the next day ("22:00-06:00", also "08:00-08:00": 24
            // h).
            end = *to > start ? *to : *to + kMinutesPerDay;
        }

        for (int day = 0; day < 7; ++day) {
            if (!(*days & (1 << day)))
                continue;
            for (int minute = start; minute < end; ++minute)
                schedule.m_allowed.set(size_t((day * kMinutesPerDay + minute) % kMinutesPerWeek));
        }
        schedule.m_empty = false;
    }
    return schedule;
}

int Schedule::minuteOfWeek(const QDateTime& local)
{
    const QTime time = local.time();
    return (local.date().dayOfWeek() - 1) * kMinutesPerDay + time.hour() * 60 + time.minute();
}

bool Schedule::allows(const QDateTime& local) const
{
    if (m_empty)
        return true;
    return local.isValid() && m_allowed.test(size_t(minuteOfWeek(local)));
}

QDateTime Schedule::nextStart(const QDateTime& local) const
{
    if (!local.isValid())
        return {};
    if (allows(local))
        return local;
    // Walk whole minutes in real time (addSecs), so a daylight-saving change neither repeats nor skips a
    // step.
    const QTime time = local.time();
    QDateTime candidate = local.addMSecs(-qint64(time.second() * 1000 + time.msec()));
    for (int step = 0; step < 8 * kMinutesPerDay; ++step) {
        candidate = candidate.addSecs(60);
        if (allows(candidate))
            return candidate;
    }
    return {};
}

} // namespace gleaner::agent
