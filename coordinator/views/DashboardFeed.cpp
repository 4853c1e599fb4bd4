#include "views/DashboardFeed.h"

#include "events/EventHub.h"
#include "events/EventRelay.h"
#include "metrics/CoordinatorMetrics.h"
#include "store/Database.h"
#include "views/JobViews.h"

#include <QJsonDocument>
#include <QSqlQuery>

namespace gleaner::coordinator {

DashboardFeed::DashboardFeed(const std::map<qint64, JobState>& jobs, const JobViews& views, Database& db,
                             dashboard::EventHub& events, dashboard::EventRelay* relay,
                             metrics::CoordinatorMetrics& metrics, const Clock& clock)
    : m_jobs(jobs), m_views(views), m_db(db), m_events(events), m_relay(relay), m_metrics(metrics),
      m_clock(clock)
{
}

void DashboardFeed::noteLeased(const JobState& job, const Workunit& unit, const Lease& lease)
{
    m_metrics.leaseIssued();
    if (!eventsWatched())
        return;
    noteEvent("lease", QJsonObject{{QStringLiteral("job"), job.id},
                                   {QStringLiteral("lease"), lease.id},
                                   {QStringLiteral("agent"), lease.agentId},
                                   {QStringLiteral("workunit"), unit.id},
                                   {QStringLiteral("epoch"), unit.epoch},
                                   {QStringLiteral("shard"), unit.shard},
                                   {QStringLiteral("at_ms"), lease.issuedMs},
                                   {QStringLiteral("deadline_ms"), lease.deadlineMs}});
}

void DashboardFeed::noteLeaseExpired(const Lease& lease)
{
    m_metrics.leaseExpired();
    if (!eventsWatched())
        return;
    noteEvent("lease_expired", QJsonObject{{QStringLiteral("job"), lease.jobId},
                                           {QStringLiteral("lease"), lease.id},
                                           {QStringLiteral("agent"), lease.agentId},
                                           {QStringLiteral("workunit"), lease.workunitId},
                                           {QStringLiteral("at_ms"), m_clock.nowMs()}});
}

void DashboardFeed::noteAccepted(const JobState& job, int epoch, qint64 seq, const QString& agentId,
                                 double loss, qint64 atMs, qint64 uploadBytes)
{
    m_metrics.updateAccepted();
    if (!eventsWatched())
        return;
    noteEvent("update", QJsonObject{{QStringLiteral("job"), job.id},
                                    {QStringLiteral("seq"), seq},
                                    {QStringLiteral("epoch"), epoch},
                                    {QStringLiteral("agent"), agentId},
                                    {QStringLiteral("loss"), loss},
                                    {QStringLiteral("at_ms"), atMs},
                                    {QStringLiteral("upload_bytes"), uploadBytes}});
}

void DashboardFeed::noteApplied(qint64 jobId, qint64 seq, qint64 version)
{
    if (!eventsWatched())
        return;
    auto row =
        m_db.exec(QStringLiteral("SELECT base_version, received_ms FROM updates WHERE seq = ?"), {seq});
    if (!row || !row->next())
        return;
    // Staleness as the aggregation saw it: updates folded in between the agent's weights and this one.
    const qint64 staleness = version - 1 - row->value(0).toLongLong();
    noteEvent("applied", QJsonObject{{QStringLiteral("job"), jobId},
                                     {QStringLiteral("seq"), seq},
                                     {QStringLiteral("version"), version},
                                     {QStringLiteral("staleness"), staleness},
                                     {QStringLiteral("at_ms"), row->value(1).toLongLong()},
                                     {QStringLiteral("applied_ms"), m_clock.nowMs()}});
}

void DashboardFeed::noteValidated(qint64 jobId, const ValidationPoint& point)
{
    if (!eventsWatched())
        return;
    noteEvent("validation", QJsonObject{{QStringLiteral("job"), jobId},
                                        {QStringLiteral("epoch"), point.epoch},
                                        {QStringLiteral("epoch_end"), point.epochEnd},
                                        {QStringLiteral("version"), point.version},
                                        {QStringLiteral("updates"), point.updates},
                                        {QStringLiteral("accuracy"), point.accuracy},
                                        {QStringLiteral("loss"), point.loss},
                                        {QStringLiteral("at_ms"), point.atMs}});
}

void DashboardFeed::noteWidth(const JobState& job)
{
    if (!eventsWatched() || job.width.history.empty())
        return;
    const JobWidth::Point& point = job.width.history.back();
    noteEvent("width", QJsonObject{{QStringLiteral("job"), job.id},
                                   {QStringLiteral("version"), point.version},
                                   {QStringLiteral("noise_scale"), point.noiseScale},
                                   {QStringLiteral("useful_agents"), point.usefulAgents},
                                   {QStringLiteral("at_ms"), point.atMs}});
}

void DashboardFeed::noteAgentChanged(const QString& agentId, const char* what)
{
    if (!eventsWatched())
        return;
    noteEvent("agent", QJsonObject{{QStringLiteral("id"), agentId},
                                   {QStringLiteral("change"), QString::fromLatin1(what)},
                                   {QStringLiteral("at_ms"), m_clock.nowMs()}});
}

bool DashboardFeed::eventsWatched() const
{
    return m_relay || m_events.hasSubscribers();
}

void DashboardFeed::noteEvent(QByteArrayView type, const QJsonObject& data)
{
    m_events.publish(type, data);
    if (m_relay)
        m_relay->send(type, data);
}

void DashboardFeed::publishDashboardState()
{
    if (m_relay) // what happened here to the others, and theirs to this one's clients
        m_relay->exchange(m_events, m_clock.nowMs());
    m_events.heartbeat(m_clock.nowMs());
    if (!m_events.hasSubscribers()) {
        m_publishedJobs.clear(); // the next client starts from the page's own fetch
        return;
    }
    // A summary per job whenever it changed (state, epoch, counts, agents): at most once per tick, however
    // many leases and updates moved it.
    for (const auto& [id, job] : m_jobs) {
        const QJsonObject summary = m_views.dashboardJobJson(job);
        QByteArray text = QJsonDocument(summary).toJson(QJsonDocument::Compact);
        QByteArray& last = m_publishedJobs[id];
        if (text == last)
            continue;
        last = std::move(text);
        m_events.publish("job", summary);
    }
}

} // namespace gleaner::coordinator
