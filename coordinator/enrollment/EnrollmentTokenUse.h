#pragma once
// Spending one use of an enrollment token, as one statement: the check (known, not revoked, not expired, a
// use left) and the decrement happen together in the database, so coordinators sharing one PostgreSQL
// database, or enrollments arriving at once, can never enroll more agents on a `--uses N` token than N. A
// read followed by an update could: two readers both see one use left and both go on. Only a row that the
// update returns means the agent may enroll; a refusal is then explained by reading the token once more.

#include "Result.h"

#include <QString>

namespace gleaner {
class SqlDatabase;
}

namespace gleaner::coordinator {

class EnrollmentTokenUse
{
public:
    enum class Outcome
    {
        Enrolled, // one use spent: the agent may enroll
        Unknown,  // no token with this hash
        Revoked,
        Expired,
        UsedUp
    };

    // Spends one use of the token whose hash is `tokenHash` (Tokens::hash), at `nowMs`. Fails only when the
    // database does; a token that may not be used is an Outcome other than Enrolled.
    static Result<Outcome> spend(SqlDatabase& db, const QString& tokenHash, qint64 nowMs);

    // What an enrolling agent is told when the token is refused (empty for Enrolled).
    static QString refusal(Outcome outcome);
};

} // namespace gleaner::coordinator
