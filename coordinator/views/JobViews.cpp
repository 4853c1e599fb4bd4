// The admin's views of jobs and agents (docs/dashboard.md, docs/protocol.md 13).
#include "views/JobViews.h"

#include "config/DataDirectory.h"
#include "enrollment/Enrollment.h"
#include "events/EventHub.h"
#include "metrics/CoordinatorMetrics.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QSet>
#include <QSqlQuery>
#include <QSysInfo>

#include <algorithm>
#include <array>

namespace gleaner::coordinator {

namespace {

constexpr int kMaxUpdatePoints = 5000; // per job history: the most recent updates, for the staleness chart

QJsonValue nullable(const QVariant& value)
{
    return value.isNull() ? QJsonValue() : QJsonValue(value.toDouble());
}

} // namespace

JobViews::JobViews(const std::map<qint64, JobState>& jobs, const Scheduler& scheduler, Database& db,
                   Enrollment& enrollment, const CoordinatorConfig& config, const Clock& clock,
                   metrics::CoordinatorMetrics& metrics, const dashboard::EventHub& events,
                   std::function<HttpResponse(qint64)> noSuchJob)
    : m_jobs(jobs), m_scheduler(scheduler), m_db(db), m_enrollment(enrollment), m_config(config),
      m_clock(clock), m_metrics(metrics), m_events(events), m_noSuchJob(std::move(noSuchJob))
{
}

const JobState* JobViews::findJob(qint64 jobId) const
{
    const auto it = m_jobs.find(jobId);
    return it == m_jobs.end() ? nullptr : &it->second;
}

QJsonObject JobViews::subtaskCounts(const JobState& job, int epoch) const
{
    // Late: not done, and a lease of it missed its deadline (it may still deliver). Re-issued: handed out
    // more than once. Both overlap pending and leased, which with done add up to the total.
    QSet<qint64> late;
    for (const Lease& lease : m_scheduler.leases())
        if (lease.jobId == job.id && lease.state == Lease::State::Expired)
            late.insert(lease.workunitId);
    int pending = 0, leased = 0, done = 0, lateCount = 0, reissued = 0, total = 0;
    for (const auto& [id, unit] : job.workunits) {
        if (unit.epoch != epoch)
            continue;
        ++total;
        pending += unit.state == Workunit::State::Pending;
        leased += unit.state == Workunit::State::Leased;
        done += unit.state == Workunit::State::Done;
        if (unit.state != Workunit::State::Done) {
            lateCount += late.contains(id);
            reissued += unit.issued > 1;
        }
    }
    return QJsonObject{{QStringLiteral("epoch"), epoch},       {QStringLiteral("pending"), pending},
                       {QStringLiteral("leased"), leased},     {QStringLiteral("late"), lateCount},
                       {QStringLiteral("reissued"), reissued}, {QStringLiteral("done"), done},
                       {QStringLiteral("total"), total}};
}

QJsonObject JobViews::dashboardJobJson(const JobState& job) const
{
    QJsonObject json = jobJson(job);
    json.remove(QStringLiteral("history"));
    // The width's line needs its recent points only: the summary goes out at every change.
    QJsonObject width = json.value(QStringLiteral("width")).toObject();
    if (QJsonArray points = width.value(QStringLiteral("history")).toArray();
        points.size() > kSummaryWidthPoints) {
        while (points.size() > kSummaryWidthPoints)
            points.removeFirst();
        width.insert(QStringLiteral("history"), points);
        json.insert(QStringLiteral("width"), width);
    }
    json.insert(QStringLiteral("subtasks"), subtaskCounts(job, job.epoch));
    return json;
}

HttpResponse JobViews::jobHistory(qint64 jobId)
{
    const JobState* job = findJob(jobId);
    if (!job)
        return m_noSuchJob(jobId);

    QJsonArray atMs, epochs, epochEnds, versions, accuracies, losses;
    std::map<int, const ValidationPoint*> epochValidation;
    for (const ValidationPoint& point : job->history) {
        atMs.append(point.atMs);
        epochs.append(point.epoch);
        epochEnds.append(point.epochEnd);
        versions.append(point.version);
        accuracies.append(point.accuracy);
        losses.append(point.loss);
        if (point.epochEnd)
            epochValidation[point.epoch] = &point;
    }
    const QJsonObject validations{
        {QStringLiteral("at_ms"), atMs},          {QStringLiteral("epoch"), epochs},
        {QStringLiteral("epoch_end"), epochEnds}, {QStringLiteral("version"), versions},
        {QStringLiteral("accuracy"), accuracies}, {QStringLiteral("loss"), losses}};

    // Per epoch: when its first lease went out, its updates and the spread of their training losses (the
    // result metadata's gleaner.loss), and its end-of-epoch validation.
    std::map<int, QJsonObject> perEpoch;
    for (int e = 1; e <= job->epoch; ++e)
        perEpoch[e] = QJsonObject{{QStringLiteral("epoch"), e},
                                  {QStringLiteral("started_ms"), QJsonValue()},
                                  {QStringLiteral("updates"), 0},
                                  {QStringLiteral("subtask_loss"), QJsonValue()}};
    auto started =
        m_db.exec(QStringLiteral("SELECT w.epoch, MIN(l.issued_ms) FROM leases l JOIN workunits w ON "
                                 "w.id = l.workunit_id WHERE w.job_id = ? GROUP BY w.epoch"),
                  {jobId});
    if (!started)
        return HttpResponse::error(500, started.error());
    while (started->next())
        perEpoch[started->value(0).toInt()].insert(QStringLiteral("started_ms"),
                                                   started->value(1).toLongLong());
    auto spread =
        m_db.exec(QStringLiteral("SELECT epoch, COUNT(*), MIN(loss), MAX(loss), AVG(loss), MAX(received_ms) "
                                 "FROM updates WHERE job_id = ? GROUP BY epoch"),
                  {jobId});
    if (!spread)
        return HttpResponse::error(500, spread.error());
    while (spread->next()) {
        QJsonObject& e = perEpoch[spread->value(0).toInt()];
        e.insert(QStringLiteral("updates"), spread->value(1).toLongLong());
        e.insert(QStringLiteral("subtask_loss"),
                 QJsonObject{{QStringLiteral("min"), spread->value(2).toDouble()},
                             {QStringLiteral("max"), spread->value(3).toDouble()},
                             {QStringLiteral("mean"), spread->value(4).toDouble()}});
        e.insert(QStringLiteral("last_update_ms"), spread->value(5).toLongLong());
    }
    QJsonArray epochList;
    for (auto& [e, object] : perEpoch) {
        object.insert(QStringLiteral("epoch"), e);
        const auto validated = epochValidation.find(e);
        const bool has = validated != epochValidation.end();
        object.insert(QStringLiteral("validated_ms"),
                      has ? QJsonValue(validated->second->atMs) : QJsonValue());
        object.insert(QStringLiteral("accuracy"),
                      has ? QJsonValue(validated->second->accuracy) : QJsonValue());
        object.insert(QStringLiteral("loss"), has ? QJsonValue(validated->second->loss) : QJsonValue());
        epochList.append(object);
    }

    // The most recent updates, oldest first, with the staleness the aggregation saw (null until folded in).
    auto rows = m_db.exec(
        QStringLiteral("SELECT received_ms, epoch, loss, applied_version - 1 - base_version, "
                       "NULLIF(upload_bytes, 0) FROM updates WHERE job_id = ? ORDER BY seq DESC LIMIT ?"),
        {jobId, kMaxUpdatePoints});
    if (!rows)
        return HttpResponse::error(500, rows.error());
    std::vector<std::array<QJsonValue, 5>> recent;
    while (rows->next())
        recent.push_back({rows->value(0).toLongLong(), rows->value(1).toInt(), rows->value(2).toDouble(),
                          nullable(rows->value(3)), nullable(rows->value(4))});
    std::reverse(recent.begin(), recent.end());
    QJsonArray updateAt, updateEpoch, updateLoss, updateStaleness, updateBytes;
    for (const auto& r : recent) {
        updateAt.append(r[0]);
        updateEpoch.append(r[1]);
        updateLoss.append(r[2]);
        updateStaleness.append(r[3]);
        updateBytes.append(r[4]);
    }
    auto minutes =
        m_db.exec(QStringLiteral("SELECT received_ms / 60000, COUNT(*) FROM updates WHERE job_id = ? "
                                 "GROUP BY 1 ORDER BY 1"),
                  {jobId});
    if (!minutes)
        return HttpResponse::error(500, minutes.error());
    QJsonArray minuteStart, minuteCount;
    while (minutes->next()) {
        minuteStart.append(minutes->value(0).toLongLong() * 60000);
        minuteCount.append(minutes->value(1).toLongLong());
    }

    QJsonObject reply;
    reply.insert(QStringLiteral("job"), dashboardJobJson(*job));
    reply.insert(QStringLiteral("now_ms"), m_clock.nowMs());
    reply.insert(QStringLiteral("validations"), validations);
    reply.insert(QStringLiteral("epochs"), epochList);
    reply.insert(QStringLiteral("updates"), QJsonObject{{QStringLiteral("at_ms"), updateAt},
                                                        {QStringLiteral("epoch"), updateEpoch},
                                                        {QStringLiteral("loss"), updateLoss},
                                                        {QStringLiteral("staleness"), updateStaleness},
                                                        {QStringLiteral("upload_bytes"), updateBytes}});
    reply.insert(QStringLiteral("updates_per_minute"), QJsonObject{{QStringLiteral("minute_ms"), minuteStart},
                                                                   {QStringLiteral("count"), minuteCount}});
    return HttpResponse::json(200, reply);
}

HttpResponse JobViews::listAgentsDetailed()
{
    // The plain list (13.3), with what only memory knows: online or not, and the subtasks each agent holds
    // now.
    HttpResponse plain = m_enrollment.listAgents();
    if (plain.status != 200)
        return plain;
    QHash<QString, qint64> failed;
    auto counts = m_db.exec(QStringLiteral("SELECT id, failed FROM agents"));
    while (counts && counts->next())
        failed.insert(counts->value(0).toString(), counts->value(1).toLongLong());
    QHash<QString, QJsonArray> current;
    for (const Lease& lease : m_scheduler.leases()) {
        if (lease.state != Lease::State::Open && lease.state != Lease::State::Expired)
            continue;
        const JobState* job = findJob(lease.jobId);
        int epoch = 0, shard = 0;
        if (job) {
            if (const auto unit = job->workunits.find(lease.workunitId); unit != job->workunits.end()) {
                epoch = unit->second.epoch;
                shard = unit->second.shard;
            }
        }
        current[lease.agentId].append(
            QJsonObject{{QStringLiteral("lease"), lease.id},
                        {QStringLiteral("job"), lease.jobId},
                        {QStringLiteral("job_name"), job ? job->spec.name : QString()},
                        {QStringLiteral("epoch"), epoch},
                        {QStringLiteral("shard"), shard},
                        {QStringLiteral("issued_ms"), lease.issuedMs},
                        {QStringLiteral("deadline_ms"), lease.deadlineMs},
                        {QStringLiteral("state"), leaseStateName(lease.state)}});
    }
    const qint64 onlineSince = m_clock.nowMs() - qint64(m_config.agentOnlineSeconds) * 1000;
    QJsonArray agents;
    for (const QJsonValue& value :
         QJsonDocument::fromJson(plain.body).object().value(QStringLiteral("agents")).toArray()) {
        QJsonObject agent = value.toObject();
        const QString id = agent.value(QStringLiteral("id")).toString();
        const QJsonObject hardware = agent.value(QStringLiteral("hardware")).toObject();
        agent.insert(QStringLiteral("online"),
                     !agent.value(QStringLiteral("revoked")).toBool() &&
                         agent.value(QStringLiteral("last_seen_ms")).toInteger() >= onlineSince);
        agent.insert(QStringLiteral("cores"), hardware.value(QStringLiteral("cores")));
        agent.insert(QStringLiteral("gpu"), hardware.value(QStringLiteral("gpu")));
        agent.insert(QStringLiteral("ram_mb"), hardware.value(QStringLiteral("ram_mb")));
        // desktop, dedicated, batch or cloud, as the agent declared it (agents from before it say nothing).
        agent.insert(QStringLiteral("kind"),
                     hardware.value(QStringLiteral("kind"))
                         .toString(hardware.value(QStringLiteral("dedicated")).toBool()
                                       ? QStringLiteral("dedicated")
                                       : QStringLiteral("desktop")));
        // The speed the scheduler sizes its subtasks by (smoothed over recent results), when known.
        if (const auto speed = m_scheduler.speedOf(id))
            agent.insert(QStringLiteral("speed"), *speed);
        if (!agent.contains(QStringLiteral("failed")))
            agent.insert(QStringLiteral("failed"), failed.value(id));
        agent.insert(QStringLiteral("current"), current.value(id));
        agents.append(agent);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("agents"), agents);
    reply.insert(QStringLiteral("online_seconds"), m_config.agentOnlineSeconds);
    reply.insert(QStringLiteral("now_ms"), m_clock.nowMs());
    return HttpResponse::json(200, reply);
}

HttpResponse JobViews::agentDetail(const QString& agentId)
{
    HttpResponse all = listAgentsDetailed();
    if (all.status != 200)
        return all;
    for (const QJsonValue& value :
         QJsonDocument::fromJson(all.body).object().value(QStringLiteral("agents")).toArray())
        if (value.toObject().value(QStringLiteral("id")).toString() == agentId)
            return HttpResponse::json(200, value.toObject());
    return HttpResponse::error(404, QStringLiteral("no agent has id %1").arg(agentId));
}

HttpResponse JobViews::metricsText(const std::function<void(metrics::MetricsRegistry&)>& addGauges)
{
    metrics::MetricsRegistry& registry = m_metrics.registry();
    using Scope = metrics::MetricsRegistry::Scope;
    // Behind one load balancer a scrape reaches any of the coordinators: this process's figures say whose
    // they are.
    if (m_config.isShared())
        registry.setProcessLabel("coordinator", QSysInfo::machineHostName().toUtf8() + ':' +
                                                    QByteArray::number(m_config.listenPort));
    const qint64 onlineSince = m_clock.nowMs() - qint64(m_config.agentOnlineSeconds) * 1000;
    double online = 0, active = 0, revoked = 0;
    auto agents =
        m_db.exec(QStringLiteral("SELECT SUM(CASE WHEN revoked = 0 AND last_seen_ms >= ? THEN 1 ELSE 0 END), "
                                 "SUM(CASE WHEN revoked = 0 THEN 1 ELSE 0 END), "
                                 "SUM(CASE WHEN revoked != 0 THEN 1 ELSE 0 END) FROM agents"),
                  {onlineSince});
    if (agents && agents->next()) {
        online = agents->value(0).toDouble();
        active = agents->value(1).toDouble();
        revoked = agents->value(2).toDouble();
    }
    registry.setGaugeFamily("gleaner_agents_online",
                            "Agents (not revoked) seen within agent_online_seconds of config.json.",
                            {{{}, online}}, Scope::Deployment);
    registry.setGaugeFamily("gleaner_agents", "Enrolled agents, by state.",
                            {{{{"state", "active"}}, active}, {{{"state", "revoked"}}, revoked}},
                            Scope::Deployment);

    double open = 0;
    for (const Lease& lease : m_scheduler.leases())
        open += lease.state == Lease::State::Open;
    registry.setGaugeFamily("gleaner_leases_open", "Leases handed out whose deadline has not passed.",
                            {{{}, open}}, Scope::Deployment);

    std::map<QString, double> byState;
    for (JobStatus status : {JobStatus::Created, JobStatus::Running, JobStatus::Paused, JobStatus::Completed,
                             JobStatus::Failed, JobStatus::Cancelled})
        byState[jobStatusName(status)] = 0;
    std::vector<std::pair<metrics::Labels, double>> accuracy, loss, epoch, received, folded, notFolded,
        uploaded, downloaded;
    for (const auto& [id, job] : m_jobs) {
        byState[jobStatusName(job.status)] += 1;
        // "job" is the scrape job's label in Prometheus (it would be renamed exported_job): job_id it is.
        const metrics::Labels labels{{"job_id", QByteArray::number(id)},
                                     {"job_name", job.spec.name.toUtf8()}};
        epoch.push_back({labels, double(job.epoch)});
        received.push_back({labels, double(job.counts.updatesReceived)});
        folded.push_back({labels, double(job.updatesApplied)});
        notFolded.push_back({labels, double(job.counts.updatesNotFolded)});
        uploaded.push_back({labels, double(job.counts.uploadedBytes)});
        downloaded.push_back({labels, double(job.counts.downloadedBytes())});
        if (job.history.empty())
            continue;
        accuracy.push_back({labels, job.history.back().accuracy});
        loss.push_back({labels, job.history.back().loss});
    }
    std::vector<std::pair<metrics::Labels, double>> jobs;
    for (const auto& [state, count] : byState)
        jobs.push_back({{{"state", state.toUtf8()}}, count});
    registry.setGaugeFamily("gleaner_jobs", "Jobs, by state.", std::move(jobs), Scope::Deployment);
    registry.setGaugeFamily("gleaner_job_epoch", "The highest epoch whose subtasks exist, per job.",
                            std::move(epoch), Scope::Deployment);
    registry.setGaugeFamily("gleaner_job_updates_received",
                            "Updates the job received (answered 202), per job.", std::move(received),
                            Scope::Deployment);
    registry.setGaugeFamily("gleaner_job_updates_folded",
                            "Updates folded into the job's server weights (its version), per job.",
                            std::move(folded), Scope::Deployment);
    registry.setGaugeFamily(
        "gleaner_job_updates_not_folded",
        "Updates the job received but did not fold in (not finite, too long a step), per job.",
        std::move(notFolded), Scope::Deployment);
    registry.setGaugeFamily("gleaner_job_uploaded_bytes",
                            "Result bodies received for the job, in bytes, per job.", std::move(uploaded),
                            Scope::Deployment);
    registry.setGaugeFamily("gleaner_job_downloaded_bytes",
                            "File bytes sent for the job's leases (model, weights, shards), per job.",
                            std::move(downloaded), Scope::Deployment);
    registry.setGaugeFamily("gleaner_validation_accuracy",
                            "Test accuracy (0 to 1) of the job's weights (their average when it keeps one) "
                            "at its latest validation.",
                            std::move(accuracy), Scope::Deployment);
    registry.setGaugeFamily(
        "gleaner_validation_loss",
        "Mean test loss of the job's weights (their average when it keeps one) at its latest "
        "validation.",
        std::move(loss), Scope::Deployment);
    registry.setGaugeFamily("gleaner_dashboard_clients", "Dashboard pages connected for live events.",
                            {{{}, double(m_events.subscribers())}});
    if (addGauges)
        addGauges(registry);

    HttpResponse response;
    response.status = 200;
    response.contentType = metrics::MetricsRegistry::kContentType;
    response.body = registry.render();
    response.headers.append(HttpHeader{"Cache-Control", "no-store"});
    return response;
}

QJsonObject JobViews::transferJson(const JobState& job)
{
    // Bytes per subtask, the figure a volunteer's uplink cares about: the mean upload beside the full weights
    // it stands for.
    const qint64 full = job.published.size;
    const JobCounts& counts = job.counts;
    const double perUpdate =
        counts.uploadsCounted > 0 ? double(counts.uploadedBytes) / double(counts.uploadsCounted) : 0.0;
    QJsonObject json;
    json.insert(QStringLiteral("upload"), job.spec.upload.toJson());
    json.insert(QStringLiteral("uploaded_bytes"), counts.uploadedBytes);
    json.insert(QStringLiteral("upload_bytes_per_update"),
                counts.uploadsCounted > 0 ? QJsonValue(qRound64(perUpdate)) : QJsonValue());
    json.insert(QStringLiteral("weights_bytes"), full);
    json.insert(QStringLiteral("upload_ratio"),
                perUpdate > 0 && full > 0 ? QJsonValue(double(full) / perUpdate) : QJsonValue());
    json.insert(QStringLiteral("downloaded_bytes"), counts.downloadedBytes());
    QJsonObject byRole;
    for (const auto& [role, bytes] : counts.downloadedByRole)
        byRole.insert(QString::fromLatin1(role), bytes);
    json.insert(QStringLiteral("downloaded_bytes_by_role"), byRole);
    json.insert(QStringLiteral("download"), job.spec.download.toJson());
    return json;
}

int JobViews::agentsOnline() const
{
    // Job summaries are built at every tick while a dashboard watches: one count every few seconds is enough.
    const qint64 now = m_clock.nowMs();
    if (m_online.atMs > 0 && now - m_online.atMs < kOnlineCountMs)
        return m_online.count;
    const qint64 onlineSince = now - qint64(m_config.agentOnlineSeconds) * 1000;
    int online = 0;
    if (auto rows =
            m_db.exec(QStringLiteral("SELECT COUNT(*) FROM agents WHERE revoked = 0 AND last_seen_ms >= ?"),
                      {onlineSince});
        rows && rows->next())
        online = rows->value(0).toInt();
    m_online = {now, online};
    return online;
}

QJsonObject JobViews::widthJson(const JobState& job, int holding) const
{
    // The measurement (noise scale, useful agents, history), the cap the scheduler applies, and the agents
    // at hand: "useful agents now: 6; 14 connected".
    QJsonObject json = job.width.toJson();
    const std::optional<int> cap = job.agentCap();
    json.insert(QStringLiteral("cap"), cap ? QJsonValue(*cap) : QJsonValue());
    json.insert(QStringLiteral("max_agents"),
                job.spec.maxAgents > 0 ? QJsonValue(job.spec.maxAgents) : QJsonValue());
    json.insert(QStringLiteral("cap_at_width"), job.spec.capAtWidth);
    json.insert(QStringLiteral("holding"), holding);
    json.insert(QStringLiteral("training"), m_scheduler.agentsTraining(job.id));
    const int online = agentsOnline();
    json.insert(QStringLiteral("connected"), online);
    const std::optional<int> useful = job.width.usefulAgents();
    QString summary;
    if (useful)
        summary = QStringLiteral("useful agents now: %1; %2 connected").arg(*useful).arg(online);
    else if (job.spec.aggregation.usesPseudoGradients())
        summary = QStringLiteral("useful agents not measured yet; %1 connected").arg(online);
    else // vc-asgd and fedasync mix uploads in one by one: no round to measure
        summary = QStringLiteral("not measured by the %1 rule; %2 connected")
                      .arg(job.spec.aggregation.toJson().value(QStringLiteral("rule")).toString())
                      .arg(online);
    json.insert(QStringLiteral("summary"), summary);
    return json;
}

QJsonObject JobViews::jobJson(const JobState& job) const
{
    QJsonObject json;
    json.insert(QStringLiteral("id"), job.id);
    json.insert(QStringLiteral("name"), job.spec.name);
    json.insert(QStringLiteral("state"), jobStatusName(job.status));
    json.insert(QStringLiteral("reason"), job.reason);
    json.insert(QStringLiteral("epoch"), job.epoch);
    json.insert(QStringLiteral("max_epochs"), job.spec.maxEpochs);
    json.insert(QStringLiteral("model"), architectureName(job.spec.model.arch));
    json.insert(QStringLiteral("target_accuracy"), job.spec.targetAccuracy);
    json.insert(QStringLiteral("accuracy"), job.history.empty() ? QJsonValue() : job.history.back().accuracy);
    json.insert(QStringLiteral("loss"), job.history.empty() ? QJsonValue() : job.history.back().loss);
    json.insert(QStringLiteral("updates"), job.updatesApplied);
    json.insert(QStringLiteral("updates_received"), job.counts.updatesReceived);
    json.insert(QStringLiteral("updates_not_folded"), job.counts.updatesNotFolded);
    json.insert(QStringLiteral("version"), job.updatesApplied);
    json.insert(QStringLiteral("shards"), job.spec.shards);
    json.insert(QStringLiteral("aggregation"), job.spec.aggregation.toJson());
    json.insert(QStringLiteral("speed_aware"), job.spec.speedAware);
    json.insert(QStringLiteral("transfer"), transferJson(job));
    json.insert(QStringLiteral("created_ms"), job.createdMs);
    int pending = 0, leased = 0, done = 0;
    QSet<QString> agents;
    for (const auto& [id, unit] : job.workunits) {
        if (unit.epoch != job.epoch)
            continue;
        pending += unit.state == Workunit::State::Pending;
        leased += unit.state == Workunit::State::Leased;
        done += unit.state == Workunit::State::Done;
    }
    for (const Lease& lease : m_scheduler.leases())
        if (lease.jobId == job.id && lease.state == Lease::State::Open)
            agents.insert(lease.agentId);
    QJsonObject units;
    units.insert(QStringLiteral("pending"), pending);
    units.insert(QStringLiteral("leased"), leased);
    units.insert(QStringLiteral("done"), done);
    json.insert(QStringLiteral("workunits"), units);
    json.insert(QStringLiteral("agents"), int(agents.size()));
    json.insert(QStringLiteral("width"), widthJson(job, int(agents.size())));
    QJsonArray history;
    for (const ValidationPoint& point : job.history) {
        QJsonObject p;
        p.insert(QStringLiteral("epoch"), point.epoch);
        p.insert(QStringLiteral("epoch_end"), point.epochEnd);
        p.insert(QStringLiteral("version"), point.version);
        p.insert(QStringLiteral("updates"), point.updates);
        p.insert(QStringLiteral("accuracy"), point.accuracy);
        p.insert(QStringLiteral("loss"), point.loss);
        p.insert(QStringLiteral("at_ms"), point.atMs);
        history.append(p);
    }
    json.insert(QStringLiteral("history"), history);
    return json;
}

} // namespace gleaner::coordinator
