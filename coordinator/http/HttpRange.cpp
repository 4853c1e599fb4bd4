#include "http/HttpRange.h"

#include <QByteArray>
#include <QList>

#include <optional>

namespace gleaner::coordinator {

namespace {

// Digits only, no sign, no blanks, no overflow: "Range: bytes=+5-" or "bytes=0x10-" are not ranges.
std::optional<qint64> parseOffset(QByteArrayView text)
{
    if (text.isEmpty() || text.size() > 18)
        return std::nullopt;
    qint64 value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9')
            return std::nullopt;
        value = value * 10 + (c - '0');
    }
    return value;
}

} // namespace

ByteRangeRequest parseByteRange(QByteArrayView header, qint64 size)
{
    using Outcome = ByteRangeRequest::Outcome;
    const ByteRangeRequest whole;
    const QByteArrayView value = header.trimmed();
    constexpr QByteArrayView unit = "bytes=";
    if (value.size() <= unit.size() || value.first(unit.size()).compare(unit, Qt::CaseInsensitive) != 0)
        return whole;
    const QByteArrayView spec = value.sliced(unit.size()).trimmed();
    if (spec.contains(','))
        return whole;
    const qsizetype dash = spec.indexOf('-');
    if (dash < 0)
        return whole;
    const QByteArrayView left = spec.first(dash).trimmed();
    const QByteArrayView right = spec.sliced(dash + 1).trimmed();

    ByteRangeRequest result;
    result.outcome = Outcome::Partial;
    if (left.isEmpty()) {
        // "bytes=-n": the last n bytes; the whole file when it is shorter than n.
        const std::optional<qint64> suffix = parseOffset(right);
        if (!suffix)
            return whole;
        if (*suffix == 0 || size <= 0)
            return {Outcome::Unsatisfiable, 0, -1};
        result.first = qMax<qint64>(0, size - *suffix);
        result.last = size - 1;
        return result;
    }
    const std::optional<qint64> first = parseOffset(left);
    if (!first)
        return whole;
    std::optional<qint64> last;
    if (!right.isEmpty()) {
        last = parseOffset(right);
        // "bytes=9-3" is invalid syntax, which RFC 9110 says to ignore rather than refuse.
        if (!last || *last < *first)
            return whole;
    }
    if (*first >= size)
        return {Outcome::Unsatisfiable, 0, -1};
    result.first = *first;
    result.last = last ? qMin(*last, size - 1) : size - 1;
    return result;
}

bool etagMatches(QByteArrayView ifNoneMatch, QByteArrayView quotedEtag)
{
    const QByteArrayView list = ifNoneMatch.trimmed();
    if (list == "*")
        return !quotedEtag.isEmpty();
    for (const QByteArray& item : list.toByteArray().split(',')) {
        QByteArrayView tag = QByteArrayView(item).trimmed();
        if (tag.startsWith("W/"))
            tag = tag.sliced(2);
        if (!tag.isEmpty() && tag == quotedEtag)
            return true;
    }
    return false;
}

} // namespace gleaner::coordinator
