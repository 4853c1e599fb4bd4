#pragma once
// JsonFields: reads the typed fields of one JSON object for the spec parsers, so every spec reports a bad
// field the same way: the field's path, what was expected and what was found
// ("job.shards: expected an integer from 1 to 100000, got 0").
//
// The reader keeps the first error and skips every read after it, so a parser reads its fields one after the
// other and checks ok() once, instead of testing after every line. Missing, wrong JSON type and out of range
// read differently: "required field is missing", "expected a number > 0, got \"fast\"", "... got 0".

#include "Result.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QJsonValue>
#include <QList>
#include <QString>
#include <QStringList>

#include <limits>
#include <optional>
#include <utility>

namespace gleaner {

// The largest integer every JSON reader holds exactly (a double has 53 mantissa bits): a seed or a count
// above it would come back different from Python or JavaScript.
inline constexpr qint64 kMaxJsonInteger = qint64(1) << 53;

enum class Need
{
    Optional,
    Required
};

// An inclusive range of integers.
struct IntRange
{
    qint64 min = 0;
    qint64 max = kMaxJsonInteger;

    bool contains(qint64 value) const { return value >= min && value <= max; }
    // "an integer from 1 to 100000"; "a positive integer <= 2^53" when only the JSON limit bounds it.
    QString describe() const;
};

// A range of finite numbers; each bound is open or closed. NaN and infinities are never inside.
struct NumberRange
{
    double min = -std::numeric_limits<double>::infinity();
    bool minInclusive = true;
    double max = std::numeric_limits<double>::infinity();
    bool maxInclusive = true;

    static NumberRange above(double bound) { return withMin(bound, false); }
    static NumberRange atLeast(double bound) { return withMin(bound, true); }
    NumberRange below(double bound) const { return {min, minInclusive, bound, false}; }
    NumberRange atMost(double bound) const { return {min, minInclusive, bound, true}; }

    bool contains(double value) const;
    // "a number > 0 and <= 10", "a number >= 0".
    QString describe() const;

private:
    static NumberRange withMin(double bound, bool inclusive)
    {
        NumberRange range;
        range.min = bound;
        range.minInclusive = inclusive;
        return range;
    }
};

// A JSON value as an error message shows it: numbers and strings as JSON writes them (long strings shortened,
// with their length), and "a list of 3 items", "an object", "null", "true" for the rest.
QString describeJsonValue(const QJsonValue& value);

// The exact integer a JSON number holds: nothing for other types, for fractions (3.5) and for numbers beyond
// qint64. 3.0 and 1e3 are integers, as they are in JSON itself.
std::optional<qint64> exactInteger(const QJsonValue& value);

// Edit distance (insertions, deletions, substitutions and swaps of neighbours, ignoring case), for "did you
// mean" suggestions.
int editDistance(QStringView a, QStringView b);
// The candidate a typo of `name` most likely meant, or an empty string when none is close enough.
QString closestMatch(QStringView name, const QStringList& candidates);
// `"mlp", "cnn", "resnet"` for messages.
QString quotedList(const QStringList& names);

class JsonFields
{
public:
    JsonFields(QJsonObject object, QString path);

    const QString& path() const { return m_path; }
    // "model.hidden" for the key "hidden" under the path "model"; the bare key when the path is empty.
    QString fieldPath(QStringView key) const;
    bool has(QStringView key) const { return m_object.contains(key); }
    QJsonValue value(QStringView key) const { return m_object.value(key); }

    bool ok() const { return !m_error.has_value(); }
    // The first error as a Result failure: `if (!fields.ok()) return fields.failure();`.
    Error failure() const { return Error{m_error.value_or(QString())}; }
    Status status() const;

    // Records "<path>.<key>: <message>" unless an earlier error is recorded.
    void fail(QStringView key, const QString& message);
    // Records "<path>.<key>[<index>]: <message>" for one element of a list.
    void failElement(QStringView key, qsizetype index, const QString& message);
    // Records a message that already names its place, such as a nested spec's error.
    void failWith(const QString& message);

    // Every key of the object must be one of `known`. A typo is never ignored silently: it fails with
    // `job: unknown field "batchsize" (did you mean "batch_size"?)`, or with the list of known fields.
    void allowOnly(const QStringList& known);
    // Fails if `key` is present, with `reason`: for the fields of another variant (`only used by arch
    // "resnet"`).
    void refuse(QStringView key, const QString& reason);

    // Each read returns true when it stored a value. An absent optional field leaves `out` alone, so the
    // struct's default stays; an absent required one fails with "required field is missing".
    bool readInt(QStringView key, int& out, IntRange range, Need need = Need::Optional);
    bool readInt64(QStringView key, qint64& out, IntRange range, Need need = Need::Optional);
    bool readNumber(QStringView key, double& out, const NumberRange& range, Need need = Need::Optional);
    bool readBool(QStringView key, bool& out, Need need = Need::Optional);
    // A non-empty string of at most maxLength UTF-16 units (no limit when maxLength is negative).
    bool readString(QStringView key, QString& out, Need need = Need::Optional, int maxLength = -1);
    // A string that is one of `names`; `index` receives its position in `names`.
    bool readChoice(QStringView key, int& index, const QStringList& names, Need need = Need::Optional);
    bool readObject(QStringView key, QJsonObject& out, Need need = Need::Optional);
    // A list of minCount..maxCount integers (no upper count when maxCount is negative), each within
    // `element`; a bad element is named by its index ("model.hidden[1]: expected a positive integer <= 65536,
    // got -3").
    bool readIntList(QStringView key, QList<qint64>& out, IntRange element, Need need = Need::Optional,
                     qsizetype minCount = 0, qsizetype maxCount = -1);
    bool readIntList(QStringView key, QList<int>& out, IntRange element, Need need = Need::Optional,
                     qsizetype minCount = 0, qsizetype maxCount = -1);
    // A list of minCount..maxCount numbers, each within `element` ("dataset.normalize.std[2]: expected a number
    // > 0, got 0").
    bool readNumberList(QStringView key, QList<double>& out, const NumberRange& element, Need need = Need::Optional,
                        qsizetype minCount = 0, qsizetype maxCount = -1);

    // Stores a nested spec's value, or records its error (which names its own path already).
    template <typename T> bool take(Result<T> result, T& out)
    {
        if (!ok())
            return false;
        if (!result.ok()) {
            failWith(result.error());
            return false;
        }
        out = std::move(result).value();
        return true;
    }

private:
    // The value to read: nothing when an error is already recorded, or when the field is absent (recording
    // "required field is missing" if it is required).
    std::optional<QJsonValue> fetch(QStringView key, Need need);
    // The list at `key` when it is an array of minCount..maxCount (-1: any) elements; otherwise fails with
    // "expected `phrase`" and gives nothing. Absent and optional: nothing, without failing.
    std::optional<QJsonArray> fetchList(QStringView key, Need need, qsizetype minCount, qsizetype maxCount,
                                        const QString& phrase);

    QJsonObject m_object;
    QString m_path;
    std::optional<QString> m_error;
};

} // namespace gleaner
