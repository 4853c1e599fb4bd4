// Coordinator: when a lease request is answered. At once as a rule; after the publication of the agent's own
// last update when that is on its way (the parked lease); without work while the updates not yet folded in
// exceed fold_backlog_mb (held back).
#include "aggregation/WeightsKeeper.h"
#include "core/Coordinator.h"
#include "scheduling/ResultIntake.h"

#include <QJsonArray>
#include <QLoggingCategory>
#include <QRandomGenerator>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {
namespace {

// The folds that held leases back catch up within seconds (a fold takes tens of milliseconds), unless they
// wait for Redis: the agents ask again after 2 to 4 s.
constexpr int kRetryWhenFoldsBehindSeconds = 2;

} // namespace

void Coordinator::leaseWhenCurrent(const QString& agentId, const QJsonObject& request, Responder respond)
{
    // One parked request per agent: a second one while the first waits (a retry, or an agent that floods) is
    // answered at once, so neither memory nor the weights thread's queue grows with what an agent sends.
    const bool parked = std::any_of(m_parkedLeases.cbegin(), m_parkedLeases.cend(),
                                    [&](const ParkedLease& p) { return p.agentId == agentId; });
    if (m_config.leaseWaitForOwnUpdateMs <= 0 || parked || !m_intake->waitsForOwnUpdate(agentId)) {
        respond(lease(agentId, request));
        return;
    }
    askPublicationFor(agentId);
    m_parkedLeases.push_back(ParkedLease{agentId, request, std::move(respond),
                                         m_clock.nowMs() + m_config.leaseWaitForOwnUpdateMs});
}

void Coordinator::askPublicationFor(const QString& agentId)
{
    for (auto& [id, job] : m_jobs) {
        const auto mine = job.unpublishedOf.find(agentId);
        if (job.status != JobStatus::Running || mine == job.unpublishedOf.end() ||
            mine->second <= job.published.throughSeq || job.publicationAskedThrough > 0)
            continue; // nothing of the agent's to publish, or one on its way (onPublished asks again)
        // The weights thread folds in order: a publication asked for now holds every update accepted so far.
        for (const auto& [agent, seq] : job.unpublishedOf)
            job.publicationAskedThrough = std::max(job.publicationAskedThrough, seq);
        m_weights->publish(id, /*forParked=*/true);
    }
}

void Coordinator::answerParkedLeases()
{
    if (m_parkedLeases.empty())
        return;
    const qint64 now = m_clock.nowMs();
    std::vector<ParkedLease> parked;
    parked.swap(m_parkedLeases);
    for (ParkedLease& request : parked) {
        if (now < request.untilMs && m_intake->waitsForOwnUpdate(request.agentId))
            m_parkedLeases.push_back(std::move(request));
        else
            request.respond(lease(request.agentId, request.request));
    }
}

std::optional<QString> Coordinator::leasesHeldBack()
{
    // Every update accepted here holds its weights in memory until its fold: an intake that outruns the folds
    // (several coordinators contending for the weights in Redis, Redis away, a slow disk) would grow without
    // bound, and the updates it takes in meanwhile grow staler. The leases already out still deliver; new
    // ones wait for the folds to catch up.
    const WeightsKeeper::Backlog backlog = m_weights->backlog();
    const qint64 bound = qint64(m_config.foldBacklogMb) << 20;
    const bool hold = bound > 0 && backlog.bytes > bound;
    const auto mib = [](qint64 bytes) { return QString::number(double(bytes) / double(1 << 20), 'f', 1); };
    if (hold && !m_holdingLeases)
        qCWarning(lcCoordinator).noquote()
            << QStringLiteral(
                   "new leases wait: %1 update(s) received here, %2 MiB of weights, are not folded in "
                   "yet (config fold_backlog_mb: %3); leases go out again once the folds catch up")
                   .arg(backlog.updates)
                   .arg(mib(backlog.bytes))
                   .arg(m_config.foldBacklogMb);
    else if (!hold && m_holdingLeases)
        qCInfo(lcCoordinator) << "new leases go out again: the folds caught up";
    m_holdingLeases = hold;
    if (!hold)
        return std::nullopt;
    return QStringLiteral("the coordinator is folding in the updates it received (%1 MiB wait, above its "
                          "fold_backlog_mb of %2); ask again in a moment")
        .arg(mib(backlog.bytes))
        .arg(m_config.foldBacklogMb);
}

HttpResponse Coordinator::heldBackReply(const QString& why)
{
    m_metrics.leaseHeldBack();
    // Spread, so that the agents held back do not all ask again in the same second.
    QJsonObject reply = leaseReply(QJsonArray());
    reply.insert(QStringLiteral("retry_after"),
                 kRetryWhenFoldsBehindSeconds +
                     QRandomGenerator::global()->bounded(kRetryWhenFoldsBehindSeconds + 1));
    reply.insert(QStringLiteral("held_back"), why);
    return HttpResponse::json(200, reply);
}

} // namespace gleaner::coordinator
