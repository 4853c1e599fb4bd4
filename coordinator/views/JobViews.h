#pragma once
// What the admin sees of the jobs and agents, read from the state thread's picture and the database: a job's
// status (`job status`, the dashboard's summaries), its history behind the dashboard's charts, the agents
// with what they hold now, and /metrics. It changes nothing. The state thread only.

#include "http/HttpTypes.h"
#include "jobs/JobState.h"
#include "util/Clock.h"

#include <QJsonObject>

#include <functional>
#include <map>

namespace gleaner::coordinator {

class Database;
class Enrollment;
class Scheduler;
struct CoordinatorConfig;
namespace dashboard {
class EventHub;
}
namespace metrics {
class CoordinatorMetrics;
class MetricsRegistry;
} // namespace metrics

class JobViews
{
public:
    // `noSuchJob` answers for a job not in `jobs` (404, or 503 for one left to other coordinators).
    JobViews(const std::map<qint64, JobState>& jobs, const Scheduler& scheduler, Database& db,
             Enrollment& enrollment, const CoordinatorConfig& config, const Clock& clock,
             metrics::CoordinatorMetrics& metrics, const dashboard::EventHub& events,
             std::function<HttpResponse(qint64)> noSuchJob);

    // A job's status (docs/protocol.md), with its validation history.
    QJsonObject jobJson(const JobState& job) const;
    // The job's width (JobWidth), its cap, and the agents holding its leases, training it and connected.
    QJsonObject widthJson(const JobState& job, int holding) const;
    // Agents (not revoked) seen within agent_online_seconds, counted at most every kOnlineCountMs.
    int agentsOnline() const;
    // The dashboard's summary of a job: its status without the history, with its current epoch's subtasks.
    QJsonObject dashboardJobJson(const JobState& job) const;
    // The charts of the dashboard's job page.
    HttpResponse jobHistory(qint64 jobId);
    // The agents (Enrollment::listAgents) with what only memory knows: online or not, speed, subtasks held.
    HttpResponse listAgentsDetailed();
    HttpResponse agentDetail(const QString& agentId);
    // GET /metrics: the gauges computed from state, then the registry rendered; `addGauges` adds the
    // caller's.
    HttpResponse metricsText(const std::function<void(metrics::MetricsRegistry&)>& addGauges = {});

private:
    static QJsonObject transferJson(const JobState& job);
    QJsonObject subtaskCounts(const JobState& job, int epoch) const;
    const JobState* findJob(qint64 jobId) const;

    const std::map<qint64, JobState>& m_jobs;
    const Scheduler& m_scheduler;
    static constexpr qint64 kOnlineCountMs = 5000;
    static constexpr qsizetype kSummaryWidthPoints = 60; // the width history's points in a dashboard summary
    struct OnlineCount
    {
        qint64 atMs = 0;
        int count = 0;
    };
    mutable OnlineCount m_online; // the last count of agentsOnline()
    Database& m_db;
    Enrollment& m_enrollment;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    metrics::CoordinatorMetrics& m_metrics;
    const dashboard::EventHub& m_events;
    const std::function<HttpResponse(qint64)> m_noSuchJob;
};

} // namespace gleaner::coordinator
