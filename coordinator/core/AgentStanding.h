#pragma once
// Whether an agent may have work: its run of refused results and its quarantine. An agent whose results are
// refused again and again (poisoned, malformed, impossible) is either broken or hostile; each of its uploads
// costs the coordinator a check and its leases keep workunits from honest agents. After kQuarantineAfter refusals
// in a row it gets no more leases, with a reason the admin sees on the dashboard and in `agent list`, until the
// admin lifts the quarantine (`gleaner-coordinator agent release ID` or the dashboard). An accepted result ends
// the run. State thread only; the database keeps it across restarts.

#include "Result.h"

#include <QHash>
#include <QString>

#include <optional>

namespace gleaner::coordinator {

class Database;

class AgentStanding
{
public:
    static constexpr int kQuarantineAfter = 3;

    explicit AgentStanding(Database& db) : m_db(db) {}
    // Reads the quarantined agents (after a restart).
    Status load();

    // A refused result; returns the quarantine's reason when this refusal put the agent in quarantine.
    std::optional<QString> recordRefusal(const QString& agentId, const QString& reason, qint64 nowMs);
    void recordAccepted(const QString& agentId);
    // The reason, while the agent is quarantined.
    std::optional<QString> quarantine(const QString& agentId) const;
    // Lifts the quarantine and forgets the run of refusals; false when the agent was not quarantined.
    Result<bool> lift(const QString& agentId);

private:
    Database& m_db;
    QHash<QString, QString> m_quarantined; // agent id -> reason
};

} // namespace gleaner::coordinator
