#pragma once
// When a lease request is answered. At once as a rule; after the publication of the agent's own last update
// when that is on its way (a parked request: without the wait the agent would train its next subtask from
// weights that lack its previous one); without work while the updates not yet folded in hold more than config
// fold_backlog_mb of memory (held back). The requests themselves are answered by the caller's `answer`. The
// state thread only.

#include "http/HttpTypes.h"
#include "jobs/JobState.h"
#include "util/Clock.h"

#include <QJsonObject>

#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace gleaner::coordinator {

class ResultIntake;
class WeightsKeeper;
struct CoordinatorConfig;
namespace metrics {
class CoordinatorMetrics;
}

class LeasePacer
{
public:
    using Answer = std::function<HttpResponse(const QString& agentId, const QJsonObject& request)>;
    LeasePacer(std::map<qint64, JobState>& jobs, const ResultIntake& intake, WeightsKeeper& weights,
               const CoordinatorConfig& config, const Clock& clock, metrics::CoordinatorMetrics& metrics,
               Answer answer);

    // The lease request as agents make it: when the agent's own latest result is accepted but not yet in the
    // published weights (it asks again right after uploading), a publication is asked for at once and the
    // request answered when that file is out, or after config lease_wait_for_own_update_ms at most; otherwise
    // at once. One parked request per agent: a second one is answered at once.
    void whenCurrent(const QString& agentId, const QJsonObject& request, Responder respond);
    // Answers the parked requests whose wait is over (their publication is out, or their time is up).
    void answerParked();
    // A publication of `job` reported: `forParked` when parked requests asked for it, `asked` the last update
    // they asked it to hold. When the weights now hold it, those still parked ask for one more together.
    void published(const JobState& job, bool forParked, qint64 asked);
    // Why no lease goes out now (nullopt: they do); logs when leases stop and when they go out again.
    std::optional<QString> heldBack();
    // The answer while leases are held back (`why`): `reply` (no tasks) with a spread retry_after and the
    // reason.
    HttpResponse heldBackReply(const QString& why, QJsonObject reply);
    // The coordinator stops: every parked request is answered 503.
    void stop();

private:
    // Asks the weights thread for a publication of each running job that holds an unpublished update of the
    // agent's, unless one asked for by parked requests is on its way already: one publication (a file of the
    // whole weights) per job at a time, not one per accepted update while many agents upload at once.
    void askPublicationFor(const QString& agentId);

    struct Parked
    {
        QString agentId;
        QJsonObject request;
        Responder respond;
        qint64 untilMs = 0;
    };
    std::map<qint64, JobState>& m_jobs;
    const ResultIntake& m_intake;
    WeightsKeeper& m_weights;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    metrics::CoordinatorMetrics& m_metrics;
    const Answer m_answer;
    std::vector<Parked> m_parked;
    bool m_holding = false; // heldBack() held the last request back
};

} // namespace gleaner::coordinator
