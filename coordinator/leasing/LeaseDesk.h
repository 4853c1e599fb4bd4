#pragma once
// Where agents get work and keep it: a lease request answered with signed subtasks (or why none, and when to
// ask again), within the agent's share of the work (its cap), and the progress reports that extend a lease
// while its training moves. When a request is answered is LeasePacer's; what a lease's manifest says is
// LeaseManifest's. State thread only.

#include "http/HttpTypes.h"
#include "jobs/JobState.h"
#include "jobs/LeaseLookup.h"

#include <QJsonArray>
#include <QJsonObject>

#include <functional>
#include <map>

namespace gleaner::coordinator {

class AdmissionCache;
class AgentStanding;
class BlobStore;
class Database;
class DashboardFeed;
class Enrollment;
class JobTallies;
class LeasePacer;
class Scheduler;
class SigningKeys;
struct CoordinatorConfig;

class LeaseDesk
{
public:
    struct Parts
    {
        std::map<qint64, JobState>& jobs;
        Database& db;
        Scheduler& scheduler;
        LeasePacer& pacer;
        AdmissionCache& admission;
        Enrollment& enrollment;
        AgentStanding& standing;
        DashboardFeed& feed;
        JobTallies& tallies;
        const SigningKeys& keys;
        const BlobStore& blobs;
    };
    LeaseDesk(Parts parts, const CoordinatorConfig& config, LeaseLookup leases);

    // POST /api/v1/work/lease (protocol 6.2), answered now: {"max_tasks", "cached", "capabilities"} -> the
    // tasks granted, in one transaction for the agent's record, the workunits and the leases.
    HttpResponse lease(const QString& agentId, const QJsonObject& request);
    // POST /api/v1/work/LEASE/progress: {"step"} -> the lease's deadline, or whether to abort.
    HttpResponse progress(const QString& agentId, const QString& leaseId, const QJsonObject& report);
    // File bytes sent for one of the job's leases (counted when the response has gone out), by what they were
    // for: the job's counts, and the deployment's (JobTallies).
    void noteDownloaded(qint64 jobId, const QByteArray& role, quint64 bytes);

private:
    // `granted`: the leases it granted (the reply's tasks).
    HttpResponse grant(const QString& agentId, const QJsonObject& request, int& granted);
    // A reply with these tasks, naming the signing key in force.
    QJsonObject tasksReply(const QJsonArray& tasks) const;
    // How many open leases the agent may hold (config max_leases_per_agent, and twice its declared cores);
    // records what the lease request declared of the machine (`capabilities`, checked) on the agent, whose
    // record held `hardware`.
    int capFor(const QString& agentId, const QJsonObject& hardware, const QJsonObject& declared);
    JobState* findJob(qint64 jobId);

    Parts m_parts;
    const CoordinatorConfig& m_config;
    const LeaseLookup m_leases;
};

} // namespace gleaner::coordinator
