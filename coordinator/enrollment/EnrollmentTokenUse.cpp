#include "enrollment/EnrollmentTokenUse.h"

#include "store/SqlDatabase.h"

namespace gleaner::coordinator {

Result<EnrollmentTokenUse::Outcome> EnrollmentTokenUse::spend(SqlDatabase& db, const QString& tokenHash,
                                                              qint64 nowMs)
{
    // One statement, so the database's row lock orders concurrent spenders: on PostgreSQL a second UPDATE
    // waits for the first to commit and then evaluates its WHERE against the row the first left; SQLite has
    // one writer at a time. RETURNING (SQLite 3.35, PostgreSQL 8.2) says whether this statement spent a use.
    auto spent = db.exec(QStringLiteral("UPDATE enrollment_tokens SET used = used + 1, uses_left = CASE WHEN "
                                        "uses_left IS NULL THEN NULL ELSE uses_left - 1 END WHERE hash = ? AND "
                                        "revoked = 0 AND (uses_left IS NULL OR uses_left > 0) AND (expires_ms "
                                        "IS NULL OR expires_ms > ?) RETURNING id"),
                         {tokenHash, nowMs});
    if (!spent)
        return fail(spent.error());
    if (spent->next())
        return Outcome::Enrolled;

    // Not spent: say why. The row may have changed since (a use spent by another enrollment); what it shows
    // now is what refused this one, or at worst a reason that holds by now.
    auto row = db.exec(
        QStringLiteral("SELECT revoked, expires_ms, uses_left FROM enrollment_tokens WHERE hash = ?"), {tokenHash});
    if (!row)
        return fail(row.error());
    if (!row->next())
        return Outcome::Unknown;
    if (row->value(0).toInt() != 0)
        return Outcome::Revoked;
    if (!row->value(1).isNull() && row->value(1).toLongLong() <= nowMs)
        return Outcome::Expired;
    return Outcome::UsedUp;
}

QString EnrollmentTokenUse::refusal(Outcome outcome)
{
    switch (outcome) {
    case Outcome::Enrolled:
        return {};
    case Outcome::Unknown:
        return QStringLiteral("the enrollment token is not known to this coordinator");
    case Outcome::Revoked:
        return QStringLiteral("the enrollment token was revoked; ask the coordinator's admin for a new one "
                              "(gleaner-coordinator token create)");
    case Outcome::Expired:
        return QStringLiteral("the enrollment token has expired; ask the coordinator's admin for a new one "
                              "(gleaner-coordinator token create)");
    case Outcome::UsedUp:
        return QStringLiteral("the enrollment token has been used up (every use it was made for is spent); ask "
                              "the coordinator's admin for a new one (gleaner-coordinator token create)");
    }
    return {};
}

} // namespace gleaner::coordinator
