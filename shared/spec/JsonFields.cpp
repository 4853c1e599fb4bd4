#include "spec/JsonFields.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QLocale>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace Qt::StringLiterals;

namespace gleaner {
namespace {

// Long strings are cut in messages so one bad field does not flood a log line.
constexpr qsizetype kShownStringLength = 40;

QString number(double value)
{
    return QString::number(value, 'g', QLocale::FloatingPointShortest);
}

// The string as a JSON literal, so quotes and control characters in it show escaped.
QString jsonQuoted(const QString& text)
{
    const QByteArray array = QJsonDocument(QJsonArray{text}).toJson(QJsonDocument::Compact);
    return QString::fromUtf8(array.mid(1, array.size() - 2));
}

QString maxText(qint64 max)
{
    return max >= kMaxJsonInteger ? u"2^53"_s : QString::number(max);
}

// "a positive integer <= 65536" / "positive integers <= 65536": list elements name their sign, which reads
// better than a range for sizes.
QString elementPhrase(const IntRange& range, bool plural)
{
    const QString s = plural ? u"s"_s : QString();
    if (range.min == 0 || range.min == 1) {
        const QString article = plural ? QString() : u"a "_s;
        const QString sign = range.min == 1 ? u"positive"_s : u"non-negative"_s;
        return article + sign + u" integer"_s + s + u" <= "_s + maxText(range.max);
    }
    const QString article = plural ? QString() : u"an "_s;
    return article + u"integer%1 from %2 to %3"_s.arg(s).arg(range.min).arg(maxText(range.max));
}

QString countPhrase(qsizetype minCount, qsizetype maxCount)
{
    if (minCount == maxCount)
        return u"exactly %1 "_s.arg(minCount);
    if (maxCount < 0)
        return minCount > 0 ? u"at least %1 "_s.arg(minCount) : QString();
    return u"%1 to %2 "_s.arg(minCount).arg(maxCount);
}

QString listPhrase(const IntRange& element, qsizetype minCount, qsizetype maxCount)
{
    return u"a list of "_s + countPhrase(minCount, maxCount) + elementPhrase(element, true);
}

QString expected(const QString& what, const QJsonValue& got)
{
    return u"expected "_s + what + u", got "_s + describeJsonValue(got);
}

} // namespace

QString IntRange::describe() const
{
    if (max >= kMaxJsonInteger && (min == 0 || min == 1))
        return elementPhrase(*this, false);
    return u"an integer from %1 to %2"_s.arg(min).arg(maxText(max));
}

bool NumberRange::contains(double value) const
{
    if (!std::isfinite(value))
        return false;
    const bool aboveMin = minInclusive ? value >= min : value > min;
    const bool belowMax = maxInclusive ? value <= max : value < max;
    return aboveMin && belowMax;
}

QString NumberRange::describe() const
{
    QStringList bounds;
    if (std::isfinite(min))
        bounds << (minInclusive ? u">= "_s : u"> "_s) + number(min);
    if (std::isfinite(max))
        bounds << (maxInclusive ? u"<= "_s : u"< "_s) + number(max);
    return bounds.isEmpty() ? u"a number"_s : u"a number "_s + bounds.join(u" and "_s);
}

QString describeJsonValue(const QJsonValue& value)
{
    switch (value.type()) {
    case QJsonValue::Null:
        return u"null"_s;
    case QJsonValue::Bool:
        return value.toBool() ? u"true"_s : u"false"_s;
    case QJsonValue::Double:
        if (const auto integer = exactInteger(value))
            return QString::number(*integer);
        return number(value.toDouble());
    case QJsonValue::String: {
        const QString text = value.toString();
        if (text.size() <= kShownStringLength)
            return jsonQuoted(text);
        return jsonQuoted(text.left(kShownStringLength)) + u"\u2026 (%1 characters)"_s.arg(text.size());
    }
    case QJsonValue::Array: {
        const qsizetype size = value.toArray().size();
        if (size == 0)
            return u"an empty list"_s;
        return size == 1 ? u"a list of 1 item"_s : u"a list of %1 items"_s.arg(size);
    }
    case QJsonValue::Object:
        return u"an object"_s;
    case QJsonValue::Undefined:
        break;
    }
    return u"nothing"_s;
}

std::optional<qint64> exactInteger(const QJsonValue& value)
{
    if (!value.isDouble())
        return std::nullopt;
    // toInteger() returns its default for fractions and for numbers beyond qint64; two different defaults
    // tell that apart from a real value.
    const qint64 first = value.toInteger(0);
    const qint64 second = value.toInteger(1);
    if (first != second)
        return std::nullopt;
    return first;
}

int editDistance(QStringView a, QStringView b)
{
    // Optimal string alignment: Levenshtein plus swapped neighbours, the most common typo ("nesterov" ->
    // "nestreov"). Three rows suffice.
    const auto fold = [](QChar c) { return c.toCaseFolded(); };
    const qsizetype n = b.size();
    std::vector<int> before(size_t(n + 1)), previous(size_t(n + 1)), current(size_t(n + 1));
    for (qsizetype j = 0; j <= n; ++j)
        previous[size_t(j)] = int(j);
    for (qsizetype i = 1; i <= a.size(); ++i) {
        current[0] = int(i);
        for (qsizetype j = 1; j <= n; ++j) {
            const bool same = fold(a[i - 1]) == fold(b[j - 1]);
            int best = std::min({previous[size_t(j)] + 1, current[size_t(j - 1)] + 1,
                                 previous[size_t(j - 1)] + (same ? 0 : 1)});
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) && fold(a[i - 2]) == fold(b[j - 1]))
                best = std::min(best, before[size_t(j - 2)] + 1);
            current[size_t(j)] = best;
        }
        std::swap(before, previous);
        std::swap(previous, current);
    }
    return previous[size_t(n)];
}

QString closestMatch(QStringView name, const QStringList& candidates)
{
    QString best;
    int bestDistance = std::numeric_limits<int>::max();
    for (const QString& candidate : candidates) {
        // Short names tolerate one slip, longer ones up to three; never so many that the guess is unrelated.
        const qsizetype length = std::max(candidate.size(), name.size());
        const int allowed = length <= 4 ? 1 : length <= 8 ? 2 : 3;
        const int distance = editDistance(name, candidate);
        if (distance <= allowed && distance < candidate.size() && distance < bestDistance) {
            best = candidate;
            bestDistance = distance;
        }
    }
    return best;
}

QString quotedList(const QStringList& names)
{
    QStringList quoted;
    for (const QString& name : names)
        quoted << jsonQuoted(name);
    return quoted.join(u", "_s);
}

JsonFields::JsonFields(QJsonObject object, QString path)
    : m_object(std::move(object)), m_path(std::move(path))
{
}

QString JsonFields::fieldPath(QStringView key) const
{
    return m_path.isEmpty() ? key.toString() : m_path + u'.' + key;
}

Status JsonFields::status() const
{
    if (m_error)
        return Error{*m_error};
    return {};
}

void JsonFields::fail(QStringView key, const QString& message)
{
    failWith(fieldPath(key) + u": "_s + message);
}

void JsonFields::failElement(QStringView key, qsizetype index, const QString& message)
{
    failWith(fieldPath(key) + u"[%1]: "_s.arg(index) + message);
}

void JsonFields::failWith(const QString& message)
{
    if (!m_error)
        m_error = message;
}

void JsonFields::allowOnly(const QStringList& known)
{
    if (!ok())
        return;
    // QJsonObject keeps its keys sorted, so the same spec always reports the same field first.
    for (const QString& key : m_object.keys()) {
        if (known.contains(key))
            continue;
        const QString guess = closestMatch(key, known);
        const QString hint = guess.isEmpty() ? u" (known fields: %1)"_s.arg(known.join(u", "_s))
                                             : u" (did you mean %1?)"_s.arg(jsonQuoted(guess));
        const QString where = m_path.isEmpty() ? QString() : m_path + u": "_s;
        failWith(where + u"unknown field "_s + jsonQuoted(key) + hint);
        return;
    }
}

void JsonFields::refuse(QStringView key, const QString& reason)
{
    if (ok() && has(key))
        fail(key, reason);
}

std::optional<QJsonValue> JsonFields::fetch(QStringView key, Need need)
{
    if (!ok())
        return std::nullopt;
    const auto it = m_object.constFind(key);
    if (it == m_object.constEnd()) {
        if (need == Need::Required)
            fail(key, u"required field is missing"_s);
        return std::nullopt;
    }
    return it.value();
}

bool JsonFields::readInt64(QStringView key, qint64& out, IntRange range, Need need)
{
    const auto value = fetch(key, need);
    if (!value)
        return false;
    const auto integer = exactInteger(*value);
    if (!integer || !range.contains(*integer)) {
        fail(key, expected(range.describe(), *value));
        return false;
    }
    out = *integer;
    return true;
}

bool JsonFields::readInt(QStringView key, int& out, IntRange range, Need need)
{
    // Narrowing the range to int makes 2^40 an out-of-range error instead of a silent wrap.
    range.min = std::max<qint64>(range.min, std::numeric_limits<int>::min());
    range.max = std::min<qint64>(range.max, std::numeric_limits<int>::max());
    qint64 wide = 0;
    if (!readInt64(key, wide, range, need))
        return false;
    out = int(wide);
    return true;
}

bool JsonFields::readNumber(QStringView key, double& out, const NumberRange& range, Need need)
{
    const auto value = fetch(key, need);
    if (!value)
        return false;
    if (!value->isDouble() || !range.contains(value->toDouble())) {
        fail(key, expected(range.describe(), *value));
        return false;
    }
    out = value->toDouble();
    return true;
}

bool JsonFields::readBool(QStringView key, bool& out, Need need)
{
    const auto value = fetch(key, need);
    if (!value)
        return false;
    if (!value->isBool()) {
        fail(key, expected(u"true or false"_s, *value));
        return false;
    }
    out = value->toBool();
    return true;
}

bool JsonFields::readString(QStringView key, QString& out, Need need, int maxLength)
{
    const auto value = fetch(key, need);
    if (!value)
        return false;
    const QString text = value->toString();
    if (!value->isString() || text.isEmpty() || (maxLength >= 0 && text.size() > maxLength)) {
        const QString what =
            maxLength < 0 ? u"a non-empty string"_s : u"a string of 1 to %1 characters"_s.arg(maxLength);
        fail(key, expected(what, *value));
        return false;
    }
    out = text;
    return true;
}

bool JsonFields::readChoice(QStringView key, int& index, const QStringList& names, Need need)
{
    const auto value = fetch(key, need);
    if (!value)
        return false;
    const qsizetype found = value->isString() ? names.indexOf(value->toString()) : -1;
    if (found < 0) {
        QString message = expected(u"one of "_s + quotedList(names), *value);
        if (value->isString()) {
            const QString guess = closestMatch(value->toString(), names);
            if (!guess.isEmpty())
                message += u" (did you mean %1?)"_s.arg(jsonQuoted(guess));
        }
        fail(key, message);
        return false;
    }
    index = int(found);
    return true;
}

bool JsonFields::readObject(QStringView key, QJsonObject& out, Need need)
{
    const auto value = fetch(key, need);
    if (!value)
        return false;
    if (!value->isObject()) {
        fail(key, expected(u"an object"_s, *value));
        return false;
    }
    out = value->toObject();
    return true;
}

std::optional<QJsonArray> JsonFields::fetchList(QStringView key, Need need, qsizetype minCount, qsizetype maxCount,
                                                const QString& phrase)
{
    const auto value = fetch(key, need);
    if (!value)
        return std::nullopt;
    const QJsonArray array = value->toArray();
    const bool countOk = array.size() >= minCount && (maxCount < 0 || array.size() <= maxCount);
    if (!value->isArray() || !countOk) {
        fail(key, expected(phrase, *value));
        return std::nullopt;
    }
    return array;
}

bool JsonFields::readIntList(QStringView key, QList<qint64>& out, IntRange element, Need need,
                             qsizetype minCount, qsizetype maxCount)
{
    const auto list = fetchList(key, need, minCount, maxCount, listPhrase(element, minCount, maxCount));
    if (!list)
        return false;
    const QJsonArray& array = *list;
    QList<qint64> values;
    values.reserve(array.size());
    for (qsizetype i = 0; i < array.size(); ++i) {
        const QJsonValue item = array.at(i);
        const auto integer = exactInteger(item);
        if (!integer || !element.contains(*integer)) {
            failElement(key, i, expected(elementPhrase(element, false), item));
            return false;
        }
        values.append(*integer);
    }
    out = std::move(values);
    return true;
}

bool JsonFields::readIntList(QStringView key, QList<int>& out, IntRange element, Need need,
                             qsizetype minCount, qsizetype maxCount)
{
    element.min = std::max<qint64>(element.min, std::numeric_limits<int>::min());
    element.max = std::min<qint64>(element.max, std::numeric_limits<int>::max());
    QList<qint64> wide;
    if (!readIntList(key, wide, element, need, minCount, maxCount))
        return false;
    out.clear();
    out.reserve(wide.size());
    for (qint64 item : wide)
        out.append(int(item));
    return true;
}

bool JsonFields::readNumberList(QStringView key, QList<double>& out, const NumberRange& element, Need need,
                                qsizetype minCount, qsizetype maxCount)
{
    // "a number > 0" becomes "a list of 1 to 3 numbers > 0".
    const QString bounds = element.describe().mid(qsizetype(sizeof("a number") - 1));
    const auto list =
        fetchList(key, need, minCount, maxCount, u"a list of "_s + countPhrase(minCount, maxCount) + u"numbers"_s + bounds);
    if (!list)
        return false;
    const QJsonArray& array = *list;
    QList<double> values;
    values.reserve(array.size());
    for (qsizetype i = 0; i < array.size(); ++i) {
        const QJsonValue item = array.at(i);
        if (!item.isDouble() || !element.contains(item.toDouble())) {
            failElement(key, i, expected(element.describe(), item));
            return false;
        }
        values.append(item.toDouble());
    }
    out = std::move(values);
    return true;
}

} // namespace gleaner
