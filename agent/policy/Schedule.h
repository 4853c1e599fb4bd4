#pragma once
// The weekly schedule of the `schedule` preference: when computing is allowed (docs/desktop.md, "The
// schedule").
//
// Each entry is `DAYS` or `DAYS HH:MM-HH:MM`. DAYS is a day (mon ... sun), a range (mon-fri; fri-mon wraps
// over the week end) or a comma list of those (sat,sun or mon-wed,fri). A time range whose end is not after
// its start runs across midnight into the next day, so `fri 22:00-06:00` allows Friday 22:00 to Saturday
// 06:00, and `sun 22:00-06:00` reaches into Monday. 24:00 is the end of the day (only as an end). An entry
// without a time range allows the whole day. The entries add up; an empty schedule allows any time.
//
// The schedule is kept as one flag per minute of the week, so allows() is a lookup and nextStart() a short
// scan, and a wrapping range needs no special case. Times are the machine's local wall-clock time: only the
// date and the time of the QDateTime given are read, never its time zone.

#include "Result.h"

#include <QDateTime>
#include <QStringList>

#include <bitset>

namespace gleaner::agent {

class Schedule
{
public:
    static constexpr int kMinutesPerWeek = 7 * 24 * 60;

    Schedule() = default; // empty: always allowed

    // Parses the entries (case and surrounding blanks do not matter). The first bad entry fails the whole
    // list with a message that quotes it and says what is expected.
    static Result<Schedule> parse(const QStringList& entries);

    // An entry as parse() reads it (lower case, blanks collapsed), to store a schedule in one spelling.
    static QString normalise(const QString& entry);

    bool isEmpty() const { return m_empty; }

    // Whether computing is allowed at this local time; an empty schedule always allows.
    bool allows(const QDateTime& local) const;

    // The first moment at or after `local` at which allows() holds (`local` itself when it already does; the
    // start of a minute otherwise), looking at most 8 days ahead; an invalid QDateTime when no such moment
    // exists (never: a schedule that allows nothing cannot be written, but a caller must not rely on that).
    QDateTime nextStart(const QDateTime& local) const;

    bool operator==(const Schedule& other) const = default;

private:
    static int minuteOfWeek(const QDateTime& local);

    bool m_empty = true;
    std::bitset<kMinutesPerWeek> m_allowed; // minute 0 = Monday 00:00
};

} // namespace gleaner::agent
