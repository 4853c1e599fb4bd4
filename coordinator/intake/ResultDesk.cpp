#include "intake/ResultDesk.h"

#include "admission/AdmissionCache.h"
#include "aggregation/WeightsKeeper.h"
#include "config/DataDirectory.h"
#include "enrollment/Enrollment.h"
#include "intake/AgentStanding.h"
#include "metrics/CoordinatorMetrics.h"
#include "scheduling/Scheduler.h"
#include "store/BlobStore.h"
#include "store/Database.h"
#include "store/JobTallies.h"
#include "util/Durability.h"
#include "views/DashboardFeed.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonObject>
#include <QLoggingCategory>
#include <QRandomGenerator>

Q_DECLARE_LOGGING_CATEGORY(lcIntake)

namespace gleaner::coordinator {
namespace {

// Two results of one workunit from the same weights agree when they lie within this fraction of the longer
// step.
constexpr double kReplicaTolerance = 0.5;

// A result whose record the job's lock refused because the job ended at another coordinator
// (Scheduler::lockJob showed it; ResultIntake::record): 409, as the leases of an ended job are answered here
// once the tick ends it.
std::optional<HttpResponse> endedElsewhere(const JobState& job, const QString& leaseId)
{
    if (!job.endedElsewhere)
        return std::nullopt;
    const QString message = QStringLiteral("job %1 is %2 and takes no more results")
                                .arg(job.id)
                                .arg(jobStatusName(job.endedElsewhere->first));
    qCInfo(lcIntake).noquote()
        << QStringLiteral("the result of lease %1 is not taken: %2").arg(leaseId, message);
    return HttpResponse::error(409, message);
}

HttpResponse cannotRecord()
{
    return HttpResponse::error(500,
                               QStringLiteral("the coordinator cannot record the result; try again later"));
}

} // namespace

ResultDesk::ResultDesk(Parts parts, const CoordinatorConfig& config, const Clock& clock, QString storage,
                       Hooks hooks)
    : m_parts(parts), m_config(config), m_clock(clock), m_storage(std::move(storage)),
      m_hooks(std::move(hooks))
{
}

std::optional<UpdateExpectations> ResultDesk::expectationsFor(const QString& leaseId) const
{
    const auto& leases = m_parts.scheduler.leases();
    auto lease = leases.constFind(leaseId);
    if (lease == leases.cend())
        return std::nullopt;
    auto job = m_parts.jobs.find(lease->jobId);
    if (job == m_parts.jobs.end() || job->second.schema.isEmpty())
        return std::nullopt;
    auto unit = job->second.workunits.find(lease->workunitId);
    if (unit == job->second.workunits.end() || unit->second.shard >= job->second.files.shards.size())
        return std::nullopt;
    const JobSpec& spec = job->second.spec;
    const qint64 samples = job->second.files.shards.at(unit->second.shard).samples;
    UpdateExpectations expected;
    expected.schema = job->second.schema;
    expected.baseWeightsSha = lease->weightsSha;
    expected.baseWeightsPath = m_parts.blobs.path(lease->weightsSha);
    expected.nonce = lease->nonce;
    expected.upload = spec.upload;
    expected.maxSamples = samples * spec.localEpochs;
    expected.maxSteps = (samples + spec.batchSize - 1) / spec.batchSize * spec.localEpochs;
    if (lease->steps > 0) { // a subtask sized to its agent's speed
        expected.maxSteps = lease->steps;
        expected.maxSamples = lease->steps * spec.batchSize;
    }
    const auto& first = unit->second.first;
    if (first && first->baseVersion == lease->baseVersion && !first->file.isEmpty())
        expected.firstResultPath = m_storage + u'/' + first->file;
    return expected;
}

HttpResponse ResultDesk::refuse(const QString& agentId, const QString& leaseId, const QString& reason)
{
    Lease* lease = m_parts.scheduler.find(leaseId);
    if (!lease || lease->agentId != agentId || lease->state == Lease::State::Completed)
        return HttpResponse::error(422, reason);
    m_parts.admission.closeLease(leaseId, closedLeaseMessage(leaseId, Lease::State::Refused));
    // A checkpoint another agent handed back set where this training started, its counts and its weights: a
    // hostile one that passed the checkpoint's checks (weights just inside the bound, say) could still have
    // the honest resumer's result refused, and the honest agent quarantined. Such a refusal is the
    // checkpoint's: it counts once against the agent that handed it back, and the checkpoint goes.
    const QString resumedFrom = lease->checkpointSha;
    auto found = m_parts.jobs.find(lease->jobId);
    JobState* job = found == m_parts.jobs.end() ? nullptr : &found->second;
    const qint64 workunitId = lease->workunitId;
    m_parts.scheduler.released(job, leaseId, Lease::State::Refused);
    lease = nullptr;
    qCWarning(lcIntake) << "refused the result of lease" << leaseId << "from agent" << agentId << ":"
                        << reason;
    if (resumedFrom.isEmpty()) {
        m_parts.standing.refused(agentId, reason);
        return HttpResponse::error(422, reason);
    }
    const auto handedBackBy = m_parts.scheduler.discardResume(job, workunitId, resumedFrom);
    const bool blamed = handedBackBy && !handedBackBy->isEmpty();
    qCWarning(lcIntake).noquote()
        << QStringLiteral(
               "the result of lease %1 trained on from a handed-back checkpoint: not counted against "
               "agent %2; workunit %3 starts afresh%4")
               .arg(leaseId, agentId)
               .arg(workunitId)
               .arg(
                   blamed
                       ? QStringLiteral(", counted against agent %1, which handed it back").arg(*handedBackBy)
                       : QString());
    if (blamed)
        m_parts.standing.refused(
            *handedBackBy,
            QStringLiteral("a result trained on from the checkpoint it handed back was refused: %1")
                .arg(reason));
    return HttpResponse::error(422, reason);
}

Result<QString> ResultDesk::store(const QString& file, qint64 jobId, const QString& leaseId)
{
    // Durable before the answer: the file moves next to the database, then one row records it. Its name is
    // this attempt's alone: among several coordinators, the agent's retry may reach another one while this
    // one waits for the job's lock, and each moves its copy aside. The one whose row commits keeps its file;
    // the other's transaction is refused, and it removes only its own. (A file whose row never committed,
    // left by a crash, goes with a later snapshot's clean-up: removeUnnamedUpdates.)
    const QString relative = QStringLiteral("updates/%1/%2.%3.safetensors")
                                 .arg(jobId)
                                 .arg(leaseId)
                                 .arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
    const QString stored = m_storage + u'/' + relative;
    QDir().mkpath(QFileInfo(stored).path());
    if (!QFile::rename(file, stored)) {
        QFile::remove(file);
        return fail(QStringLiteral("cannot move %1 to %2").arg(file, stored));
    }
    // A rename is durable only once the folder that holds the new name is. A shared folder is often another
    // file system, where the rename was a copy: its bytes are synced too.
    Status synced = m_config.isShared() ? Durability::syncFile(stored) : Status();
    if (synced)
        synced = Durability::syncFolder(QFileInfo(stored).path());
    if (!synced) {
        QFile::remove(stored);
        return fail(synced.error());
    }
    return relative;
}

HttpResponse ResultDesk::receive(const QString& agentId, const QString& leaseId, const QString& file,
                                 ReceivedUpdate update)
{
    if (m_parts.standing.quarantine(agentId)) {
        const Lease* lease = m_parts.scheduler.find(leaseId);
        if (lease && lease->agentId == agentId) {
            QFile::remove(file);
            return HttpResponse::error(409,
                                       QStringLiteral("this agent is quarantined; its results are not taken "
                                                      "until the coordinator's admin lifts the quarantine"));
        }
    }
    // Another coordinator's lease, perhaps: its job's rows are read before the verdict. A lease known here
    // (every lease, alone) needs no look at the others.
    if (!m_parts.scheduler.find(leaseId))
        (void)m_hooks.leases.find(leaseId);
    const ResultIntake::Received received{
        agentId,     leaseId,         update.baseVersion, update.samples, update.trainSeconds,
        update.step, update.baseNorm, update.uploadBytes};
    ResultIntake::Verdict verdict = m_parts.intake.judge(received);
    switch (verdict.kind) {
    case ResultIntake::Verdict::Kind::Unknown:
        QFile::remove(file);
        return m_hooks.leases.notInMemory(agentId, leaseId);
    case ResultIntake::Verdict::Kind::Refuse:
        QFile::remove(file);
        return verdict.closesLease ? refuse(agentId, leaseId, verdict.reason)
                                   : HttpResponse::error(verdict.status, verdict.reason);
    case ResultIntake::Verdict::Kind::Compare:
        return resultOfDoneWorkunit(verdict, received, file, update);
    case ResultIntake::Verdict::Kind::Fold:
        break;
    }
    JobState* job = verdict.job;
    auto relative = store(file, job->id, leaseId);
    if (!relative) {
        qCCritical(lcIntake) << "cannot store the result of lease" << leaseId << ":" << relative.error();
        return HttpResponse::error(
            500, QStringLiteral("the coordinator cannot store the upload; try again later"));
    }
    Durability::faultPoint("result.stored");
    const qint64 now = m_clock.nowMs();
    const int epoch = verdict.context.epoch;
    qint64 seq = -1;
    Database& db = m_parts.db;
    const Status recorded = db.transaction([&]() -> Status {
        // The job's lock before the update's row: what it reads of other coordinators' first results must not
        // include this one.
        if (auto s = m_parts.scheduler.lockJob(*verdict.job); !s)
            return s;
        auto r = db.insertReturningId(
            QStringLiteral("INSERT INTO updates (job_id, lease_id, agent_id, epoch, base_version, file, "
                           "samples, loss, train_seconds, received_ms, step, concurrency, upload_bytes, "
                           "encoding) VALUES (?, ?, "
                           "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            {job->id, leaseId, agentId, epoch, update.baseVersion, *relative, update.samples, update.loss,
             update.trainSeconds, now, update.step, verdict.context.concurrency, update.uploadBytes,
             UploadSpec::encodingNames().at(int(update.encoding))},
            QStringLiteral("seq"));
        if (!r)
            return fail(r.error());
        seq = *r;
        if (auto s = m_parts.tallies.countUpdate(job->id, update.uploadBytes); !s)
            return s;
        return m_parts.intake.record(verdict);
    });
    if (!recorded) {
        // A commit whose outcome is unknown (the connection went during it) may have kept the row: its file
        // stays, and a snapshot's clean-up takes it once an hour old if no row names it
        // (removeUnnamedUpdates).
        if (!db.lastCommitUncertain())
            QFile::remove(m_storage + u'/' + *relative);
        if (auto ended = endedElsewhere(*job, leaseId))
            return *ended;
        qCCritical(lcIntake) << "cannot record the result of lease" << leaseId << ":" << recorded.error();
        return cannotRecord();
    }
    Durability::faultPoint("result.recorded"); // recorded, and the agent never heard: it sends it again
    const QString baseSha = verdict.lease->weightsSha;
    takeAccepted(verdict, received, seq, *relative);
    m_parts.metrics.resultUploaded(update.encoding, update.uploadBytes);
    m_parts.feed.noteAccepted(*job, epoch, seq, agentId, update.loss, now, update.uploadBytes);

    // Kept until a snapshot holds the update: a replay folds pseudo-gradients from it, and decodes an encoded
    // update against it.
    if (job->spec.aggregation.usesPseudoGradients() || update.encoding != UploadSpec::Encoding::Fp32)
        job->basesInFlight.emplace(seq, baseSha);
    m_parts.weights.apply(job->id, seq, std::move(update.weights), verdict.context, baseSha);
    m_hooks.queued(*job, epoch); // posted after the update: a validation sees it

    QJsonObject reply;
    reply.insert(QStringLiteral("accepted"), true);
    reply.insert(QStringLiteral("seq"), seq);
    reply.insert(QStringLiteral("staleness"), verdict.staleness);
    return HttpResponse::json(202, reply);
}

void ResultDesk::takeAccepted(ResultIntake::Verdict& verdict, const ResultIntake::Received& received,
                              qint64 seq, const QString& file)
{
    // Memory follows the database only once it committed. A closed lease lives on in the database and, for
    // the 409 its repeats get, in the admission cache; the scheduler keeps only the leases that may still
    // deliver.
    m_parts.intake.accepted(verdict, received, seq, file);
    m_parts.admission.closeLease(received.leaseId,
                                 closedLeaseMessage(received.leaseId, Lease::State::Completed));
    m_parts.enrollment.recordOutcome(received.agentId, "done", received.samples, received.trainSeconds);
    m_parts.standing.accepted(received.agentId);
    m_parts.enrollment.touch(received.agentId);
}

HttpResponse ResultDesk::resultOfDoneWorkunit(ResultIntake::Verdict& verdict,
                                              const ResultIntake::Received& received, const QString& file,
                                              const ReceivedUpdate& update)
{
    // Folding a workunit in twice would count its shard twice: a replica (or the late result of an expired
    // lease whose workunit another agent finished) is compared with the first result instead. Replicas train
    // the same shard with the same seed from the same weights, so honest ones land close together; how close
    // depends on the agents' thread counts and devices, hence a tolerance relative to the step.
    QFile::remove(file);
    JobState& job = *verdict.job;
    const Workunit::FirstResult first = *verdict.unit->first;
    const qint64 unitId = verdict.unit->id;
    std::optional<bool> agrees;
    if (update.replicaDistance)
        agrees = *update.replicaDistance <= kReplicaTolerance * std::max(update.step, first.step) + 1e-12;
    const QString& leaseId = received.leaseId;
    const QString& agentId = received.agentId;
    Database& db = m_parts.db;
    const Status recorded = db.transaction([&]() -> Status {
        if (auto s = m_parts.intake.record(verdict); !s)
            return s;
        if (agrees == false) {
            // In the order of their ids: two comparisons of the pair the other way round never wait for each
            // other.
            for (const QString& agent : {std::min(agentId, first.agentId), std::max(agentId, first.agentId)})
                if (auto r = db.exec(
                        QStringLiteral("UPDATE agents SET disagreed = disagreed + 1 WHERE id = ?"), {agent});
                    !r)
                    return fail(r.error());
        }
        return {};
    });
    if (!recorded) {
        if (auto ended = endedElsewhere(job, leaseId))
            return *ended;
        qCCritical(lcIntake) << "cannot record the result of lease" << leaseId << ":" << recorded.error();
        return cannotRecord();
    }
    takeAccepted(verdict, received, -1, {}); // the lease is gone from here on
    if (agrees == false) {
        qCWarning(lcIntake).nospace()
            << "job " << job.id << ": the result of lease " << leaseId << " (agent " << agentId
            << ") disagrees with the first result of workunit " << unitId << " (update " << first.seq
            << ", agent " << first.agentId << "): distance " << *update.replicaDistance << ", steps "
            << update.step << " and " << first.step;
        m_parts.feed.noteAgentChanged(agentId, "disagreed");
        m_parts.feed.noteAgentChanged(first.agentId, "disagreed");
    }

    QJsonObject reply;
    reply.insert(QStringLiteral("accepted"), true);
    reply.insert(QStringLiteral("folded"), false);
    reply.insert(QStringLiteral("replica_of"), first.seq);
    reply.insert(QStringLiteral("agrees"), agrees ? QJsonValue(*agrees) : QJsonValue());
    return HttpResponse::json(202, reply);
}

} // namespace gleaner::coordinator
