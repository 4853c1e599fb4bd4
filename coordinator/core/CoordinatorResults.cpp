// Coordinator: results of leases (what an upload must match, recording it durably, refusing it, and the later
// results of a workunit that already has one).
#include "aggregation/WeightsKeeper.h"
#include "core/AgentStanding.h"
#include "core/Coordinator.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "util/Durability.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {
namespace {

// Two results of one workunit from the same weights agree when they lie within this fraction of the longer step.
constexpr double kReplicaTolerance = 0.5;

} // namespace

std::optional<UpdateExpectations> Coordinator::expectationsForLease(const QString& leaseId) const
{
    auto lease = m_scheduler->leases().constFind(leaseId);
    if (lease == m_scheduler->leases().cend())
        return std::nullopt;
    auto job = m_jobs.find(lease->jobId);
    if (job == m_jobs.end() || job->second.schema.isEmpty())
        return std::nullopt;
    auto unit = job->second.workunits.find(lease->workunitId);
    if (unit == job->second.workunits.end() || unit->second.shard >= job->second.files.shards.size())
        return std::nullopt;
    const JobSpec& spec = job->second.spec;
    const qint64 samples = job->second.files.shards.at(unit->second.shard).samples;
    UpdateExpectations expected;
    expected.schema = job->second.schema;
    expected.baseWeightsSha = lease->weightsSha;
    expected.baseWeightsPath = m_blobs.path(lease->weightsSha);
    expected.nonce = lease->nonce;
    expected.maxSamples = samples * spec.localEpochs;
    expected.maxSteps = (samples + spec.batchSize - 1) / spec.batchSize * spec.localEpochs;
    if (lease->steps > 0) { // a subtask sized to its agent's speed
        expected.maxSteps = lease->steps;
        expected.maxSamples = lease->steps * spec.batchSize;
    }
    const auto& first = unit->second.first;
    if (first && first->baseVersion == lease->baseVersion && !first->file.isEmpty())
        expected.firstResultPath = m_dir.root() + u'/' + first->file;
    return expected;
}

HttpResponse Coordinator::refuseResult(const QString& agentId, const QString& leaseId, const QString& reason)
{
    Lease* lease = m_scheduler->find(leaseId);
    if (lease && lease->agentId == agentId && lease->state != Lease::State::Completed) {
        m_admission.closeLease(leaseId,
                               QStringLiteral("lease %1 was closed after an invalid result").arg(leaseId));
        m_scheduler->released(findJob(lease->jobId), leaseId, Lease::State::Refused);
        lease = nullptr;
        qCWarning(lcCoordinator) << "refused the result of lease" << leaseId << "from agent" << agentId << ":"
                                 << reason;
        countRefusal(agentId, reason);
    }
    return HttpResponse::error(422, reason);
}

HttpResponse Coordinator::result(const QString& agentId, const QString& leaseId, const QString& file,
                                 ReceivedUpdate update)
{
    const auto refuse = [&](int status, const QString& message) {
        QFile::remove(file);
        return HttpResponse::error(status, message);
    };
    Lease* lease = m_scheduler->find(leaseId);
    if (!lease) {
        QFile::remove(file);
        return leaseNotInMemory(agentId, leaseId);
    }
    if (lease->agentId != agentId)
        return refuse(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
    if (m_standing->quarantine(agentId))
        return refuse(409, QStringLiteral("this agent is quarantined; its results are not taken until the "
                                          "coordinator's admin lifts the quarantine"));
    if (lease->state == Lease::State::Completed)
        return refuse(409,
                      QStringLiteral("the result of lease %1 was already received; this copy is a duplicate")
                          .arg(leaseId));
    if (lease->state == Lease::State::Refused)
        return refuse(409, QStringLiteral("lease %1 was closed after an invalid result").arg(leaseId));
    JobState* job = findJob(lease->jobId);
    if (!job || (job->status != JobStatus::Running && job->status != JobStatus::Paused))
        return refuse(409, job ? QStringLiteral("job %1 is %2 and takes no more results")
                                     .arg(job->id)
                                     .arg(jobStatusName(job->status))
                               : QStringLiteral("the job no longer exists"));
    if (update.baseVersion != lease->baseVersion) {
        QFile::remove(file);
        return refuseResult(
            agentId, leaseId,
            QStringLiteral("the result says it trained from version %1 but lease %2 handed out version "
                           "%3")
                .arg(update.baseVersion)
                .arg(leaseId)
                .arg(lease->baseVersion));
    }
    auto unit = job->workunits.find(lease->workunitId);
    if (unit == job->workunits.end())
        return refuse(409, QStringLiteral("the workunit of lease %1 no longer exists").arg(leaseId));
    // Finite but huge (x1e6, negated weights, 3e38) passes every check of the file itself; what the job's honest
    // updates look like does not let it through.
    if (const double limit = job->updateBound.limit(update.baseNorm); !(update.step <= limit)) {
        QFile::remove(file);
        return refuseResult(agentId, leaseId,
                            QStringLiteral("the result moves the weights by %1 from the version it trained from; "
                                           "job %2 allows at most %3 (%4)")
                                .arg(update.step, 0, 'g', 4)
                                .arg(job->id)
                                .arg(limit, 0, 'g', 4)
                                .arg(job->updateBound.describe(update.baseNorm)));
    }
    if (unit->second.first)
        return resultOfDoneWorkunit(*job, unit->second, *lease, file, update);

    // Durable before the answer: the file moves next to the database, then one row records it.
    const QString relative = QStringLiteral("updates/%1/%2.safetensors").arg(job->id).arg(leaseId);
    const QString stored = m_dir.root() + u'/' + relative;
    QDir().mkpath(QFileInfo(stored).path());
    QFile::remove(stored); // left by a crash between the move and the commit; the agent is sending it again
    if (!QFile::rename(file, stored)) {
        qCCritical(lcCoordinator) << "cannot move" << file << "to" << stored;
        return refuse(500, QStringLiteral("the coordinator cannot store the upload; try again later"));
    }
    // A rename is durable only once the folder that holds the new name is.
    if (auto s = Durability::syncFolder(QFileInfo(stored).path()); !s) {
        QFile::remove(stored);
        qCCritical(lcCoordinator) << s.error();
        return HttpResponse::error(500, QStringLiteral("the coordinator cannot store the upload; try again later"));
    }
    Durability::faultPoint("result.stored");
    const qint64 now = m_clock.nowMs();
    // Counted while this lease is still open: it is one of them.
    const int concurrency = std::max(1, m_scheduler->agentsTraining(job->id));
    qint64 seq = -1;
    const Status recorded = m_db->transaction([&]() -> Status {
        auto r = m_db->exec(
            QStringLiteral(
                "INSERT INTO updates (job_id, lease_id, agent_id, epoch, base_version, file, "
                "samples, loss, train_seconds, received_ms, step, concurrency) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?)"),
            {job->id, leaseId, agentId, unit->second.epoch, update.baseVersion, relative, update.samples,
             update.loss, update.trainSeconds, now, update.step, concurrency});
        if (!r)
            return fail(r.error());
        seq = m_db->lastInsertId();
        return m_scheduler->recordCompleted(*job, leaseId);
    });
    if (!recorded) {
        QFile::remove(stored);
        qCCritical(lcCoordinator) << "cannot record the result of lease" << leaseId << ":"
                                  << recorded.error();
        return HttpResponse::error(
            500, QStringLiteral("the coordinator cannot record the result; try again later"));
    }
    Durability::faultPoint("result.recorded"); // recorded, and the agent never heard: it sends it again
    // Memory follows the database only once it committed. A closed lease lives on in the database and, for the
    // 409 its repeats get, in the admission cache; the scheduler keeps only the leases that may still deliver.
    const QString baseSha = lease->weightsSha;
    lease = nullptr;
    m_scheduler->completed(*job, leaseId);
    unit->second.first = Workunit::FirstResult{seq, agentId, update.baseVersion, update.step, relative};
    m_admission.closeLease(
        leaseId,
        QStringLiteral("the result of lease %1 was already received; this copy is a duplicate").arg(leaseId));
    recordAgentOutcome(agentId, "done", update.samples, update.trainSeconds);
    m_scheduler->noteSpeed(agentId, update.samples, update.trainSeconds);
    m_standing->recordAccepted(agentId);
    job->updateBound.accept(update.step);
    touchAgent(agentId);
    job->updatesReceived += 1;
    noteAccepted(*job, unit->second.epoch, seq, agentId, update.loss, now);

    const int epoch = unit->second.epoch;
    const qint64 staleness = job->updatesApplied - update.baseVersion;
    if (job->spec.aggregation.usesPseudoGradients())
        job->basesInFlight.emplace(seq, baseSha);
    UpdateContext context{epoch, update.baseVersion, 0};
    context.concurrency = concurrency;
    m_weights->apply(job->id, seq, std::move(update.weights), context, baseSha);
    if (m_config.leaseWaitForOwnUpdateMs > 0)
        job->unpublishedOf[agentId] = seq; // its next lease waits for weights that hold this update
    scheduleValidations(*job); // posted after the update: the validation sees it
    if (m_config.validateEveryUpdates > 0 && job->updatesReceived % m_config.validateEveryUpdates == 0)
        m_weights->validate(job->id, epoch, /*epochEnd=*/false); // an intermediate point, for the history
    m_scheduler->openNextEpochIfReady(*job);

    QJsonObject reply;
    reply.insert(QStringLiteral("accepted"), true);
    reply.insert(QStringLiteral("seq"), seq);
    reply.insert(QStringLiteral("staleness"), staleness);
    return HttpResponse::json(202, reply);
}

HttpResponse Coordinator::resultOfDoneWorkunit(JobState& job, Workunit& unit, Lease& lease, const QString& file,
                                               const ReceivedUpdate& update)
{
    // Folding a workunit in twice would count its shard twice: a replica (or the late result of an expired lease
    // whose workunit another agent finished) is compared with the first result instead. Replicas train the same
    // shard with the same seed from the same weights, so honest ones land close together; how close depends on
    // the agents' thread counts and devices, hence a tolerance relative to the step.
    QFile::remove(file);
    const Workunit::FirstResult first = *unit.first;
    std::optional<bool> agrees;
    if (update.replicaDistance)
        agrees = *update.replicaDistance <= kReplicaTolerance * std::max(update.step, first.step) + 1e-12;
    const QString leaseId = lease.id;
    const QString agentId = lease.agentId;
    const Status recorded = m_db->transaction([&]() -> Status {
        if (auto s = m_scheduler->recordCompleted(job, leaseId); !s)
            return s;
        if (agrees == false) {
            for (const QString& agent : {agentId, first.agentId})
                if (auto r = m_db->exec(QStringLiteral("UPDATE agents SET disagreed = disagreed + 1 WHERE id = ?"),
                                        {agent});
                    !r)
                    return fail(r.error());
        }
        return {};
    });
    if (!recorded) {
        qCCritical(lcCoordinator) << "cannot record the result of lease" << leaseId << ":" << recorded.error();
        return HttpResponse::error(500, QStringLiteral("the coordinator cannot record the result; try again later"));
    }
    m_scheduler->completed(job, leaseId); // `lease` is gone from here on
    m_admission.closeLease(
        leaseId,
        QStringLiteral("the result of lease %1 was already received; this copy is a duplicate").arg(leaseId));
    recordAgentOutcome(agentId, "done", update.samples, update.trainSeconds);
    m_standing->recordAccepted(agentId);
    touchAgent(agentId);
    if (agrees == false) {
        qCWarning(lcCoordinator).nospace()
            << "job " << job.id << ": the result of lease " << leaseId << " (agent " << agentId
            << ") disagrees with the first result of workunit " << unit.id << " (update " << first.seq << ", agent "
            << first.agentId << "): distance " << *update.replicaDistance << ", steps " << update.step << " and "
            << first.step;
        noteAgentChanged(agentId, "disagreed");
        noteAgentChanged(first.agentId, "disagreed");
    }

    QJsonObject reply;
    reply.insert(QStringLiteral("accepted"), true);
    reply.insert(QStringLiteral("folded"), false);
    reply.insert(QStringLiteral("replica_of"), first.seq);
    reply.insert(QStringLiteral("agrees"), agrees ? QJsonValue(*agrees) : QJsonValue());
    return HttpResponse::json(202, reply);
}

} // namespace gleaner::coordinator
