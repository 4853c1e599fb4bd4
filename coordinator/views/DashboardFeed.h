#pragma once
// The dashboard's live events as things happen (docs/dashboard.md): leases issued and expired, updates
// accepted and folded, validations, agents that changed, and at each tick a summary of every job that
// changed. Among several coordinators the events also go to the others through the deployment's relay, and
// theirs come here. Each note also counts what it notes in the metrics. An event is built only when a page
// watches (here or, with a relay, anywhere). The state thread only.

#include "jobs/JobState.h"
#include "util/Clock.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QJsonObject>

#include <map>

namespace gleaner::coordinator {

class Database;
class JobViews;
namespace dashboard {
class EventHub;
class EventRelay;
} // namespace dashboard
namespace metrics {
class CoordinatorMetrics;
}

class DashboardFeed
{
public:
    // `relay`: null for a coordinator alone.
    DashboardFeed(const std::map<qint64, JobState>& jobs, const JobViews& views, Database& db,
                  dashboard::EventHub& events, dashboard::EventRelay* relay,
                  metrics::CoordinatorMetrics& metrics, const Clock& clock);

    void noteLeased(const JobState& job, const Workunit& unit, const Lease& lease);
    void noteLeaseExpired(const Lease& lease);
    void noteAccepted(const JobState& job, int epoch, qint64 seq, const QString& agentId, double loss,
                      qint64 atMs, qint64 uploadBytes);
    void noteApplied(qint64 jobId, qint64 seq, qint64 version);
    void noteValidated(qint64 jobId, const ValidationPoint& point);
    // The job's width was measured anew (its latest point of JobWidth::history).
    void noteWidth(const JobState& job);
    void noteAgentChanged(const QString& agentId, const char* what);
    // At each tick: the relay's exchange, the heartbeat, and the summaries of the jobs that changed.
    void publishDashboardState();

private:
    bool eventsWatched() const;
    void noteEvent(QByteArrayView type, const QJsonObject& data);

    const std::map<qint64, JobState>& m_jobs;
    const JobViews& m_views;
    Database& m_db;
    dashboard::EventHub& m_events;
    dashboard::EventRelay* const m_relay;
    metrics::CoordinatorMetrics& m_metrics;
    const Clock& m_clock;
    std::map<qint64, QByteArray> m_publishedJobs; // the job summaries the dashboard last got
};

} // namespace gleaner::coordinator
