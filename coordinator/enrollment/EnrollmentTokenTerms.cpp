#include "enrollment/EnrollmentTokenTerms.h"

#include <QJsonValue>

namespace gleaner::coordinator {
namespace {

QString jsonText(const QJsonValue& value)
{
    if (value.isDouble() && value.toInteger(-1) >= 0)
        return QString::number(value.toInteger());
    if (value.isDouble())
        return QString::number(value.toDouble(), 'g', 15);
    if (value.isString())
        return u'"' + value.toString().left(40) + u'"';
    if (value.isBool())
        return value.toBool() ? QStringLiteral("true") : QStringLiteral("false");
    return value.isArray() ? QStringLiteral("an array") : QStringLiteral("an object");
}

// A whole number from 1 to `max`; nullopt for anything else (fractions, strings, values past qint64).
std::optional<qint64> wholeNumber(const QJsonValue& value, qint64 max)
{
    const qint64 number = value.toInteger(-1); // -1 unless a whole number that fits in qint64
    if (!value.isDouble() || number < 1 || number > max)
        return std::nullopt;
    return number;
}

} // namespace

Result<EnrollmentTokenTerms> EnrollmentTokenTerms::fromJson(const QJsonObject& request)
{
    EnrollmentTokenTerms terms;
    const QJsonValue uses = request.value(QStringLiteral("uses"));
    if (!uses.isUndefined() && !uses.isNull()) {
        terms.uses = wholeNumber(uses, kMaxUses);
        if (!terms.uses)
            return fail(QStringLiteral("uses: expected a whole number from 1 to %1 (or null for any number of "
                                       "agents), got %2")
                            .arg(kMaxUses)
                            .arg(jsonText(uses)));
    }
    const QJsonValue expires = request.value(QStringLiteral("expires_seconds"));
    if (expires.isNull()) {
        terms.lifetimeSeconds.reset();
    } else if (!expires.isUndefined()) {
        terms.lifetimeSeconds = wholeNumber(expires, kMaxLifetimeSeconds);
        if (!terms.lifetimeSeconds)
            return fail(QStringLiteral("expires_seconds: expected a whole number of seconds from 1 to %1 (ten "
                                       "years), or null for a token that never expires; got %2")
                            .arg(kMaxLifetimeSeconds)
                            .arg(jsonText(expires)));
    }
    return terms;
}

QJsonObject EnrollmentTokenTerms::toJson() const
{
    QJsonObject json;
    json.insert(QStringLiteral("uses"), uses ? QJsonValue(*uses) : QJsonValue(QJsonValue::Null));
    json.insert(QStringLiteral("expires_seconds"),
                lifetimeSeconds ? QJsonValue(*lifetimeSeconds) : QJsonValue(QJsonValue::Null));
    return json;
}

Result<std::optional<qint64>> EnrollmentTokenTerms::parseLifetime(const QString& text)
{
    const QString trimmed = text.trimmed();
    if (trimmed.compare(QStringLiteral("never"), Qt::CaseInsensitive) == 0)
        return std::optional<qint64>();
    const auto malformed = [&] {
        return fail(QStringLiteral("\"%1\" is not a lifetime: expected a whole number and a unit, such as 30m, "
                                   "12h or 7d (s, m, h, d), or \"never\"")
                        .arg(text));
    };
    if (trimmed.size() < 2)
        return malformed();
    qint64 unit = 0;
    switch (trimmed.back().toLower().unicode()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86'400; break;
    default: return malformed();
    }
    const QStringView digits = QStringView(trimmed).chopped(1);
    for (const QChar c : digits) {
        if (!c.isDigit() || c.unicode() > 127)
            return malformed();
    }
    bool fits = false;
    const qint64 count = digits.toLongLong(&fits);
    qint64 seconds = 0;
    // Past qint64 already, or past it once multiplied: both are longer than any lifetime a token may have.
    if (!fits || __builtin_mul_overflow(count, unit, &seconds) || seconds > kMaxLifetimeSeconds)
        return fail(QStringLiteral("\"%1\" is longer than a token may live (at most %2 days); give a shorter "
                                   "lifetime, or \"never\" for a token that does not expire")
                        .arg(text)
                        .arg(kMaxLifetimeSeconds / 86'400));
    if (seconds < 1)
        return fail(QStringLiteral("\"%1\" is no lifetime: a token must live at least one second").arg(text));
    return std::optional<qint64>(seconds);
}

Result<qint64> EnrollmentTokenTerms::parseUses(const QString& text)
{
    bool ok = false;
    const qint64 uses = text.trimmed().toLongLong(&ok);
    if (!ok || uses < 1 || uses > kMaxUses)
        return fail(QStringLiteral("\"%1\" is not a number of uses: expected a whole number from 1 to %2")
                        .arg(text)
                        .arg(kMaxUses));
    return uses;
}

} // namespace gleaner::coordinator
