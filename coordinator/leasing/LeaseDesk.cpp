#include "leasing/LeaseDesk.h"

#include "admission/AdmissionCache.h"
#include "config/DataDirectory.h"
#include "config/SigningKeys.h"
#include "enrollment/Enrollment.h"
#include "intake/AgentStanding.h"
#include "leasing/LeaseManifest.h"
#include "scheduling/JobAllocation.h"
#include "scheduling/LeasePacer.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "store/JobTallies.h"
#include "views/DashboardFeed.h"

#include <QJsonDocument>
#include <QLoggingCategory>

#include <algorithm>

Q_DECLARE_LOGGING_CATEGORY(lcLeases)

namespace gleaner::coordinator {
namespace {

constexpr int kMaxTasksPerLease = 16;

constexpr int kRetryWhenIdleSeconds = 10;
constexpr int kRetryWhenNoJobsSeconds = 30;
// A job still being imported, or whose first weights are being written, has work in a moment: agents that ask
// now come back soon instead of after the no-job wait, which is longer than a small job takes.
constexpr int kRetryWhenStartingSeconds = 2;
constexpr int kRetryWhenQuarantinedSeconds = 600;

QJsonObject checkedCapabilities(const QJsonObject& declared)
{
    // What an agent says of its machine is shown to the admin and caps its leases: only plain values in sane
    // ranges are kept, the rest is dropped (an agent that lies about its cores lowers its own cap, or raises
    // it to max_leases_per_agent at most).
    QJsonObject kept;
    const auto integer = [&](const char* key, qint64 max) {
        const QJsonValue value = declared.value(QLatin1String(key));
        if (value.isDouble() && value.toInteger(-1) >= 1 && value.toInteger(-1) <= max)
            kept.insert(QLatin1String(key), value.toInteger());
    };
    const auto text = [&](const char* key, qsizetype max) {
        const QJsonValue value = declared.value(QLatin1String(key));
        if (value.isString() && !value.toString().trimmed().isEmpty() && value.toString().size() <= max)
            kept.insert(QLatin1String(key), value.toString().trimmed());
    };
    integer("cores", 4096);
    integer("ram_mb", qint64(1) << 32);
    integer("gpus", 64);
    integer("threads", 4096);
    text("gpu", 200);
    text("device", 32);
    text("arch", 32);
    // What the agent is (docs/clusters.md): shown to the admin, one of a few words.
    const QString kind = declared.value(QStringLiteral("kind")).toString();
    if (kind == u"desktop" || kind == u"dedicated" || kind == u"batch" || kind == u"cloud")
        kept.insert(QStringLiteral("kind"), kind);
    if (declared.value(QStringLiteral("dedicated")).isBool())
        kept.insert(QStringLiteral("dedicated"), declared.value(QStringLiteral("dedicated")).toBool());
    return kept;
}

} // namespace

LeaseDesk::LeaseDesk(Parts parts, const CoordinatorConfig& config, LeaseLookup leases)
    : m_parts(parts), m_config(config), m_leases(std::move(leases))
{
}

JobState* LeaseDesk::findJob(qint64 jobId)
{
    auto found = m_parts.jobs.find(jobId);
    return found == m_parts.jobs.end() ? nullptr : &found->second;
}

HttpResponse LeaseDesk::lease(const QString& agentId, const QJsonObject& request)
{
    // One transaction for the agent's record, the workunits and the leases: one commit instead of one per
    // row.
    HttpResponse response;
    // Before the lease's transaction, in transactions of their own: each job's lock is taken in the order of
    // the jobs' ids within one transaction, so that two coordinators never wait for each other.
    m_parts.scheduler.expire();
    (void)m_parts.scheduler.takeEmptyClaims();
    for (int attempt = 0;; ++attempt) {
        int granted = 0;
        const Status done = m_parts.db.transaction([&]() -> Status {
            response = grant(agentId, request, granted);
            return {};
        });
        if (!done) {
            qCCritical(lcLeases) << "cannot record a lease:" << done.error();
            return HttpResponse::error(
                500, QStringLiteral("the coordinator cannot record the lease; try again later"));
        }
        // A grant in parallel that found nothing pending leaves the next epoch, or a replica, to the job's
        // exclusive lock: asked for once more at once rather than after the agent's retry interval.
        if (granted > 0 || attempt > 0 || !m_parts.scheduler.takeEmptyClaims())
            return response;
    }
}

QJsonObject LeaseDesk::tasksReply(const QJsonArray& tasks) const
{
    // Every reply names the key in force, so an agent that pinned an older one follows the rotations at once.
    return {{QStringLiteral("tasks"), tasks},
            {QStringLiteral("signing_key"), m_parts.keys.publicKey().fingerprint()}};
}

HttpResponse LeaseDesk::grant(const QString& agentId, const QJsonObject& request, int& granted)
{
    const auto cannot = [] {
        return HttpResponse::error(
            500, QStringLiteral("the coordinator cannot record the lease; try again later"));
    };
    // The agent's lock where grants run in parallel (nothing is held before it), then every running job's
    // lock, in the order of the jobs' ids, then the agent's row: the order expiry takes them in too, so that
    // two coordinators never wait for each other. Held, they make the agent's open leases below include those
    // other coordinators gave it, and its request at another coordinator wait for this one (the per-agent cap
    // holds across coordinators).
    auto held = m_parts.scheduler.lockAgent(agentId);
    if (!held)
        return cannot();
    int open = *held;
    // Held back while the folds catch up: saying so takes no job's lock, so the requests of agents that wait
    // cost the coordinator little while it is behind.
    const std::optional<QString> heldBack = m_parts.pacer.heldBack();
    if (!heldBack)
        for (auto& [jobId, job] : m_parts.jobs)
            if (job.status == JobStatus::Running)
                if (auto s = m_parts.scheduler.lockForGrant(job); !s)
                    return cannot();
    if (!heldBack && !m_parts.scheduler.grantsInParallel())
        open =
            m_parts.scheduler.openLeasesOf(agentId); // the picture, which the jobs' locks brought up to date
    // Seen now; the machine its record holds sizes its cap below.
    const QJsonObject hardware = m_parts.enrollment.touch(agentId);
    if (auto why = m_parts.standing.quarantine(agentId)) {
        // No work, and a reason the agent can log; it asks again rarely, until an admin lifts the quarantine.
        QJsonObject reply = tasksReply(QJsonArray());
        reply.insert(QStringLiteral("retry_after"), kRetryWhenQuarantinedSeconds);
        reply.insert(QStringLiteral("quarantined"),
                     QStringLiteral("this agent is quarantined: %1; the coordinator's admin can lift it "
                                    "(gleaner-coordinator agent release ID)")
                         .arg(*why));
        return HttpResponse::json(200, reply);
    }
    if (heldBack)
        return m_parts.pacer.heldBackReply(*heldBack, tasksReply(QJsonArray()));
    const int asked = int(std::clamp(request.value(QStringLiteral("max_tasks")).toInteger(1), qint64(1),
                                     qint64(kMaxTasksPerLease)));
    QSet<QString> cached;
    for (const auto& value : request.value(QStringLiteral("cached")).toArray())
        cached.insert(value.toString());

    // However often it asks, an agent holds at most its share of the work (see CoordinatorConfig).
    const int room =
        capFor(agentId, hardware, request.value(QStringLiteral("capabilities")).toObject()) - open;
    if (room <= 0) {
        QJsonObject reply = tasksReply(QJsonArray());
        reply.insert(QStringLiteral("retry_after"), kRetryWhenIdleSeconds);
        return HttpResponse::json(200, reply);
    }
    const int maxTasks = std::min(asked, room);

    QJsonArray tasks;
    bool anyRunning = false;
    bool anyStarting = false;
    std::vector<JobAllocation::Candidate> candidates;
    for (auto& [jobId, job] : m_parts.jobs) {
        anyStarting = anyStarting || job.status == JobStatus::Created; // importing its data set
        if (job.status != JobStatus::Running)
            continue;
        anyRunning = true;
        if (job.published.version < 0) {
            anyStarting = true;
            continue; // the first weights file is still being written
        }
        candidates.push_back(JobAllocation::candidateOf(job, m_parts.scheduler, agentId));
    }
    QStringList atWidth; // the running jobs that have as many agents as they can use
    for (const JobAllocation::Candidate& job : candidates)
        if (job.atCap())
            atWidth << QStringLiteral("job %1 has the %2 agents it can use now").arg(job.jobId).arg(*job.cap);
    // The job one more agent helps most first (JobAllocation); a job at its width takes none.
    for (const qint64 jobId : JobAllocation::order(std::move(candidates))) {
        JobState& job = m_parts.jobs.at(jobId);
        while (tasks.size() < maxTasks) {
            auto next = m_parts.scheduler.leaseNext(job, agentId, cached);
            if (!next)
                return cannot();
            if (!*next)
                break;
            ++granted;
            const Lease& lease = **next;
            Workunit* chosen = &job.workunits.at(lease.workunitId);
            m_parts.admission.setLease(lease.id, LeaseManifest::admissionEntry(job, chosen, lease));

            QByteArray signature;
            const QByteArray manifest = LeaseManifest::sign(job, *chosen, lease, m_parts.keys, m_parts.blobs,
                                                            m_config.url(), &signature);
            QJsonObject task;
            task.insert(QStringLiteral("lease_id"), lease.id);
            task.insert(QStringLiteral("deadline_ms"), lease.deadlineMs);
            task.insert(QStringLiteral("manifest"), QString::fromUtf8(manifest));
            task.insert(QStringLiteral("signature"), QString::fromLatin1(signature));
            tasks.append(task);
            m_parts.feed.noteLeased(job, *chosen, lease);
        }
        if (tasks.size() >= maxTasks)
            break;
    }
    QJsonObject reply = tasksReply(tasks);
    if (tasks.isEmpty() && !atWidth.isEmpty())
        reply.insert(QStringLiteral("at_width"), atWidth.join(QStringLiteral("; ")));
    if (tasks.isEmpty())
        reply.insert(QStringLiteral("retry_after"), anyStarting  ? kRetryWhenStartingSeconds
                                                    : anyRunning ? kRetryWhenIdleSeconds
                                                                 : kRetryWhenNoJobsSeconds);
    return HttpResponse::json(200, reply);
}

int LeaseDesk::capFor(const QString& agentId, const QJsonObject& hardware, const QJsonObject& declared)
{
    // The lease request carries the machine as it is now (a GPU added, memory changed): the record follows.
    QJsonObject merged = hardware;
    const QJsonObject kept = checkedCapabilities(declared);
    for (auto it = kept.begin(); it != kept.end(); ++it)
        merged.insert(it.key(), it.value());
    if (merged != hardware)
        (void)m_parts.db.exec(
            QStringLiteral("UPDATE agents SET hardware = ? WHERE id = ?"),
            {QString::fromUtf8(QJsonDocument(merged).toJson(QJsonDocument::Compact)), agentId});
    const int cores = merged.value(QStringLiteral("cores")).toInt();
    return cores > 0 ? std::min(m_config.maxLeasesPerAgent, 2 * cores) : m_config.maxLeasesPerAgent;
}

HttpResponse LeaseDesk::progress(const QString& agentId, const QString& leaseId, const QJsonObject& report)
{
    Lease* lease = m_leases.find(leaseId);
    if (!lease)
        return m_leases.notInMemory(agentId, leaseId);
    if (lease->agentId != agentId)
        return HttpResponse::error(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
    m_parts.enrollment.touch(agentId);
    QJsonObject reply;
    JobState* job = findJob(lease->jobId);
    if (auto decided = resultAlreadyDecided(*lease))
        return *decided;
    const auto abort = [&](const QString& reason) {
        reply.insert(QStringLiteral("abort"), true);
        reply.insert(QStringLiteral("reason"), reason);
        return HttpResponse::json(200, reply);
    };
    // A paused job keeps the work already handed out: only an ended job makes training pointless.
    if (!job || (job->status != JobStatus::Running && job->status != JobStatus::Paused))
        return abort(job ? QStringLiteral("job %1 is %2").arg(job->id).arg(jobStatusName(job->status))
                         : QStringLiteral("the job no longer exists"));
    const auto doneUnit = job->workunits.find(lease->workunitId);
    if (lease->state == Lease::State::Expired && doneUnit != job->workunits.end() &&
        doneUnit->second.state == Workunit::State::Done)
        return abort(QStringLiteral("the lease expired and its workunit was completed by another agent"));
    // An expired lease is not revived: its workunit may already be another agent's. A late result still
    // counts once (ResultDesk::receive).
    if (lease->state == Lease::State::Expired) {
        reply.insert(QStringLiteral("abort"), false);
        reply.insert(QStringLiteral("expired"), true);
        reply.insert(QStringLiteral("deadline_ms"), lease->deadlineMs);
        return HttpResponse::json(200, reply);
    }
    // Progress extends a lease, reports alone do not: a lease whose step stopped moving (an owner's pause, or
    // an agent sitting on work) is kept one more deadline after it last moved, then expires. And no lease
    // lives longer than lease_lifetime_deadlines deadlines in all, however it reports.
    const QJsonValue stepValue = report.value(QStringLiteral("step"));
    const qint64 step = stepValue.isDouble() ? stepValue.toInteger(-1) : -1;
    if (auto s = m_parts.scheduler.progressed(*lease, *job, step); !s)
        qCCritical(lcLeases) << "cannot record the deadline of lease" << leaseId << ":" << s.error();
    lease = m_parts.scheduler.find(leaseId); // another coordinator may have closed it meanwhile
    if (!lease)
        return m_leases.notInMemory(agentId, leaseId);
    reply.insert(QStringLiteral("abort"), false);
    reply.insert(QStringLiteral("deadline_ms"), lease->deadlineMs);
    return HttpResponse::json(200, reply);
}

void LeaseDesk::noteDownloaded(qint64 jobId, const QByteArray& role, quint64 bytes)
{
    if (JobState* job = findJob(jobId)) {
        job->counts.downloadedByRole[role] += qint64(bytes);
        m_parts.tallies.countDownloaded(jobId, role, qint64(bytes));
    }
}

} // namespace gleaner::coordinator
