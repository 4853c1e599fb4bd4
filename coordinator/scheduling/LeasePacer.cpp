#include "scheduling/LeasePacer.h"

#include "aggregation/WeightsKeeper.h"
#include "config/DataDirectory.h"
#include "metrics/CoordinatorMetrics.h"
#include "scheduling/ResultIntake.h"

#include <QLoggingCategory>
#include <QRandomGenerator>

#include <algorithm>

Q_LOGGING_CATEGORY(lcLeases, "gleaner.coordinator.leases")

namespace gleaner::coordinator {
namespace {

// The folds that held leases back catch up within seconds (a fold takes tens of milliseconds), unless they
// wait for Redis: the agents ask again after 2 to 4 s.
constexpr int kRetryWhenFoldsBehindSeconds = 2;

} // namespace

LeasePacer::LeasePacer(std::map<qint64, JobState>& jobs, const ResultIntake& intake, WeightsKeeper& weights,
                       const CoordinatorConfig& config, const Clock& clock,
                       metrics::CoordinatorMetrics& metrics, Answer answer)
    : m_jobs(jobs), m_intake(intake), m_weights(weights), m_config(config), m_clock(clock),
      m_metrics(metrics), m_answer(std::move(answer))
{
}

void LeasePacer::whenCurrent(const QString& agentId, const QJsonObject& request, Responder respond)
{
    // One parked request per agent: a second one while the first waits (a retry, or an agent that floods) is
    // answered at once, so neither memory nor the weights thread's queue grows with what an agent sends.
    const bool parked = std::any_of(m_parked.cbegin(), m_parked.cend(),
                                    [&](const Parked& p) { return p.agentId == agentId; });
    if (m_config.leaseWaitForOwnUpdateMs <= 0 || parked || !m_intake.waitsForOwnUpdate(agentId)) {
        respond(m_answer(agentId, request));
        return;
    }
    askPublicationFor(agentId);
    m_parked.push_back(
        Parked{agentId, request, std::move(respond), m_clock.nowMs() + m_config.leaseWaitForOwnUpdateMs});
}

void LeasePacer::askPublicationFor(const QString& agentId)
{
    for (auto& [id, job] : m_jobs) {
        const auto mine = job.unpublishedOf.find(agentId);
        if (job.status != JobStatus::Running || mine == job.unpublishedOf.end() ||
            mine->second <= job.published.throughSeq || job.publicationAskedThrough > 0)
            continue; // nothing of the agent's to publish, or one on its way (published() asks again)
        // The weights thread folds in order: a publication asked for now holds every update accepted so far.
        for (const auto& [agent, seq] : job.unpublishedOf)
            job.publicationAskedThrough = std::max(job.publicationAskedThrough, seq);
        m_weights.publish(id, /*forParked=*/true);
    }
}

void LeasePacer::answerParked()
{
    if (m_parked.empty())
        return;
    const qint64 now = m_clock.nowMs();
    std::vector<Parked> parked;
    parked.swap(m_parked);
    for (Parked& request : parked) {
        if (now < request.untilMs && m_intake.waitsForOwnUpdate(request.agentId))
            m_parked.push_back(std::move(request));
        else
            request.respond(m_answer(request.agentId, request.request));
    }
}

void LeasePacer::published(const JobState& job, bool forParked, qint64 asked)
{
    answerParked();
    // When the weights leases get now hold what it was asked for, those still parked wait for updates
    // accepted since: one more for them all. When they do not (it failed, folds wait for Redis, or Redis
    // handed back an older copy), they wait for the tick's publications or their deadline, so that a fault
    // does not turn into a loop of publications.
    if (forParked && job.published.throughSeq >= asked)
        for (const Parked& parked : m_parked)
            askPublicationFor(parked.agentId);
}

std::optional<QString> LeasePacer::heldBack()
{
    // Every update accepted here holds its weights in memory until its fold: an intake that outruns the folds
    // (several coordinators contending for the weights in Redis, Redis away, a slow disk) would grow without
    // bound, and the updates it takes in meanwhile grow staler. The leases already out still deliver; new
    // ones wait for the folds to catch up.
    const WeightsKeeper::Backlog backlog = m_weights.backlog();
    const qint64 bound = qint64(m_config.foldBacklogMb) << 20;
    const bool hold = bound > 0 && backlog.bytes > bound;
    const auto mib = [](qint64 bytes) { return QString::number(double(bytes) / double(1 << 20), 'f', 1); };
    if (hold && !m_holding)
        qCWarning(lcLeases).noquote()
            << QStringLiteral(
                   "new leases wait: %1 update(s) received here, %2 MiB of weights, are not folded in "
                   "yet (config fold_backlog_mb: %3); leases go out again once the folds catch up")
                   .arg(backlog.updates)
                   .arg(mib(backlog.bytes))
                   .arg(m_config.foldBacklogMb);
    else if (!hold && m_holding)
        qCInfo(lcLeases) << "new leases go out again: the folds caught up";
    m_holding = hold;
    if (!hold)
        return std::nullopt;
    return QStringLiteral("the coordinator is folding in the updates it received (%1 MiB wait, above its "
                          "fold_backlog_mb of %2); ask again in a moment")
        .arg(mib(backlog.bytes))
        .arg(m_config.foldBacklogMb);
}

HttpResponse LeasePacer::heldBackReply(const QString& why, QJsonObject reply)
{
    m_metrics.leaseHeldBack();
    // Spread, so that the agents held back do not all ask again in the same second.
    reply.insert(QStringLiteral("retry_after"),
                 kRetryWhenFoldsBehindSeconds +
                     QRandomGenerator::global()->bounded(kRetryWhenFoldsBehindSeconds + 1));
    reply.insert(QStringLiteral("held_back"), why);
    return HttpResponse::json(200, reply);
}

void LeasePacer::stop()
{
    for (Parked& parked : m_parked)
        parked.respond(
            HttpResponse::error(503, QStringLiteral("the coordinator is stopping; ask again later")));
    m_parked.clear();
}

} // namespace gleaner::coordinator
