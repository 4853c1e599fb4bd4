#pragma once
// What an admin asks of a new enrollment token, checked once where the request arrives (the admin API's JSON,
// the CLI's --uses and --expires) into values that cannot overflow later arithmetic. A token that is not
// given a lifetime lives kDefaultLifetimeSeconds: a forgotten token stops working on its own. Living forever
// is an explicit choice ("expires_seconds": null, `token create --expires never`).

#include "Result.h"

#include <QJsonObject>
#include <QString>

#include <optional>

namespace gleaner::coordinator {

struct EnrollmentTokenTerms
{
    static constexpr qint64 kDefaultLifetimeSeconds = 7 * 86'400;
    static constexpr qint64 kMaxLifetimeSeconds = 10 * 365 * 86'400; // ten years
    static constexpr qint64 kMaxUses = 1'000'000;

    std::optional<qint64> uses;                                     // nullopt: any number of agents
    std::optional<qint64> lifetimeSeconds = kDefaultLifetimeSeconds; // nullopt: never expires

    // The body of POST /api/v1/admin/tokens: {"uses": N | null, "expires_seconds": S | null}. An absent
    // "expires_seconds" is the default lifetime; null is "never". The error names the field and the value.
    static Result<EnrollmentTokenTerms> fromJson(const QJsonObject& request);
    // The same fields, every one present: what the coordinator stores.
    QJsonObject toJson() const;

    // A lifetime as the CLI takes it: a whole number and a unit (30s, 30m, 12h, 7d), or "never" (nullopt).
    static Result<std::optional<qint64>> parseLifetime(const QString& text);
    // A count of uses as the CLI takes it: 1 to kMaxUses.
    static Result<qint64> parseUses(const QString& text);
};

} // namespace gleaner::coordinator
