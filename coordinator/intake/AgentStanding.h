#pragma once
// Whether an agent may have work: its run of refused results and its quarantine. An agent whose results are
// refused again and again (poisoned, malformed, impossible) is either broken or hostile; each of its uploads
// costs the coordinator a check and its leases keep workunits from honest agents. After kQuarantineAfter
// refusals in a row it gets no more leases, with a reason the admin sees on the dashboard and in `agent
// list`, and its work in flight goes to other agents, until the admin lifts the quarantine
// (`gleaner-coordinator agent release ID` or the dashboard). An accepted result ends the run. State thread
// only; the database keeps it across restarts.

#include "Result.h"
#include "http/HttpTypes.h"
#include "util/Clock.h"

#include <QHash>
#include <QString>

#include <optional>

namespace gleaner::coordinator {

class Database;
class DashboardFeed;
class Enrollment;
class Scheduler;

class AgentStanding
{
public:
    static constexpr int kQuarantineAfter = 3;

    AgentStanding(Database& db, Enrollment& enrollment, Scheduler& scheduler, DashboardFeed& feed,
                  const Clock& clock)
        : m_db(db), m_enrollment(enrollment), m_scheduler(scheduler), m_feed(feed), m_clock(clock)
    {
    }
    // Reads the quarantined agents (at start, and among several coordinators at each look: others quarantine
    // and release too).
    Status load();

    // A refused result (or checkpoint, or fold) counts against the agent: its record counts an invalid
    // result, and a run of them quarantines it and gives its work in flight to others.
    void refused(const QString& agentId, const QString& reason);
    void accepted(const QString& agentId);
    // The reason, while the agent is quarantined.
    std::optional<QString> quarantine(const QString& agentId) const;
    // POST /api/v1/admin/agents/ID/release: lifts the quarantine and forgets the run of refusals.
    HttpResponse release(const QString& agentId);

private:
    // Returns the quarantine's reason when this refusal put the agent in quarantine.
    std::optional<QString> recordRefusal(const QString& agentId, const QString& reason);

    Database& m_db;
    Enrollment& m_enrollment;
    Scheduler& m_scheduler;
    DashboardFeed& m_feed;
    const Clock& m_clock;
    QHash<QString, QString> m_quarantined; // agent id -> reason
};

} // namespace gleaner::coordinator
