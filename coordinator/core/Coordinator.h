#pragma once
// The coordinator's core: jobs, agents, workunits, leases, aggregation and validation, without HTTP.
//
// Threads. All state (the database connection, the jobs and their workunits and leases) lives on one state
// thread, a SerialExecutor: the API layer posts each request's work to it, so no state needs a lock and every
// decision sees a consistent picture. The server weights live on a second thread (weights), which folds accepted
// updates in, in the order they were received, publishes weights files for new leases and writes snapshots. A
// third thread (validation) evaluates snapshots of the weights on the test split. Dataset imports run on a
// worker thread of their own. Threads hand work to each other only by posting tasks; nothing blocks on another
// thread except start-up and shutdown.
//
// Methods marked [state] must run on state(); the rest are thread-safe.

#include "Result.h"
#include "admission/AdmissionCache.h"
#include "aggregation/ListenerRelay.h"
#include "aggregation/UpdateChecker.h"
#include "config/DataDirectory.h"
#include "config/SigningKeys.h"
#include "crypto/Ed25519.h"
#include "enrollment/Enrollment.h"
#include "events/EventHub.h"
#include "http/HttpTypes.h"
#include "intake/HandBacks.h"
#include "intake/ResultDesk.h"
#include "jobs/JobState.h"
#include "leasing/LeaseDesk.h"
#include "lifecycle/FoldReports.h"
#include "lifecycle/JobDesk.h"
#include "lifecycle/JobTakeUp.h"
#include "lifecycle/WeightsExport.h"
#include "metrics/CoordinatorMetrics.h"
#include "peers/Deployment.h"
#include "scheduling/LeasePacer.h"
#include "scheduling/ResultIntake.h"
#include "store/BlobStore.h"
#include "util/Clock.h"
#include "util/DirectoryLock.h"
#include "util/SerialExecutor.h"
#include "views/DashboardFeed.h"
#include "views/JobViews.h"

#include <QJsonArray>
#include <QSqlQuery>

#include <atomic>
#include <map>
#include <memory>
#include <optional>

namespace gleaner::coordinator {

class AgentStanding;
class Database;
class Scheduler;
class SchedulerTables;
class JobTallies;
class JobRecords;
class WeightsKeeper;
class ValidationRunner;
namespace dashboard {
class EventRelay;
}

class Coordinator
{
public:
    static Result<std::unique_ptr<Coordinator>> open(const DataDirectory& dir, const CoordinatorConfig& config,
                                                     const Clock& clock);
    ~Coordinator();

    // Finishes queued work, folds every received update in, writes a snapshot of every job and stops the threads.
    void shutdown();

    SerialExecutor& state() { return *m_state; }
    AdmissionCache& admission() { return m_admission; }
    const BlobStore& blobs() const { return m_blobs; }
    BlobStore& blobs() { return m_blobs; } // thread-safe
    const DataDirectory& dataDirectory() const { return m_dir; }
    const CoordinatorConfig& config() const { return m_config; }
    // [state] The port the server really listens on, when the configuration left it to the system (0): the URL
    // in manifests must be the one agents can reach.
    void setListeningPort(quint16 port);
    QByteArray signingPublicKeyPem() const { return m_keys->publicKey().toPem(); }
    // Thread-safe: the key in force and the signed rotations that lead to it (GET /api/v1/signing-keys).
    QJsonObject signingKeys() const { return m_keys->toJson(); }
    // [state] A new manifest signing key, announced by the current one (POST /api/v1/admin/signing-key/rotate).
    HttpResponse rotateSigningKey();
    const Clock& clock() const { return m_clock; }
    // Thread-safe: counters and histograms (docs/dashboard.md), and the dashboard's live events.
    metrics::CoordinatorMetrics& metrics() { return m_metrics; }
    dashboard::EventHub& events() { return m_events; }

    // [state] The dashboard's views and /metrics (views/JobViews).
    JobViews& views() { return *m_views; }

    // [state] Agents and tokens (enrollment/Enrollment), and whether an agent may have work
    // (intake/AgentStanding).
    Enrollment& enrollment() { return *m_enrollment; }
    AgentStanding& standing() { return *m_standing; }

    // [state] Jobs: submitted, shown, paused, validated, ended (lifecycle/JobDesk; its submit with a
    // responder from any thread).
    JobDesk& jobs() { return *m_jobDesk; }
    // [state] A job's weights for its admin (lifecycle/WeightsExport).
    WeightsExport& weightsExport() { return *m_export; }

    // [state] Work: leases granted and kept (leasing/LeaseDesk).
    LeaseDesk& leases() { return *m_leaseDesk; }
    // The lease request as agents make it, answered when the agent's own last update is published
    // (scheduling/LeasePacer).
    LeasePacer& pacer() { return *m_pacer; }
    // This coordinator among the others of its deployment (peers/Deployment): the agents and leases they
    // made.
    Deployment& deployment() { return *m_deployment; }
    // [state] Results (intake/ResultDesk) and leases given or handed back (intake/HandBacks).
    ResultDesk& results() { return *m_results; }
    HandBacks& handBacks() { return *m_handBacks; }
    // The answer for a lease that is not (or no longer) in memory: 409 with the reason it was closed, else 404.
    HttpResponse leaseNotInMemory(const QString& agentId, const QString& leaseId) const;

    // Thread-safe: 503 for an agent's request about its lease `leaseId` (when empty, as for a file: about any
    // of its open leases) while that lease's job is one this coordinator left to the others
    // (JobTakeUp::leaveToOthers): the agent tries again, perhaps at another coordinator. nullopt otherwise,
    // at the cost of one atomic load while no job is left.
    std::optional<HttpResponse> notServedHere(const QString& agentId, const QString& leaseId);

    // [state] Whether this coordinator does the deployment's housekeeping (snapshots, validation, imports
    // left unfinished): always when it runs alone; among several, the one holding the housekeeper's lock.
    bool doesHousekeeping() const { return m_housekeeper; }

    // [state] Periodic housekeeping: expire leases, publish weights, snapshots. Called by the ticker thread;
    // tests call it after moving their clock.
    void tick();

    // Thread-safe: waits until every update received so far is folded in and validated (for tests and shutdown).
    void drain();
    // The weights thread (folds, publications, snapshots): a test that holds it stands for folds that lag.
    SerialExecutor& weightsThread();

private:
    Coordinator(DataDirectory dir, CoordinatorConfig config, const Clock& clock);
    Status start();
    Status loadState();
    // What the coordinator does when the scheduler lets a lease expire: the agent's record and the dashboard.
    void onLeaseExpired(const Lease& lease, const JobState* job);
    // `alsoNeeded`: blobs other coordinators of the deployment still need (keepSharedHouse).
    void removeRetiredWeights(const QSet<QString>& alsoNeeded = {});

    DataDirectory m_dir;
    CoordinatorConfig m_config;
    const Clock& m_clock;
    // The weights thread's reports, handed to the state thread and FoldReports there.
    ListenerRelay m_weightsRelay{[this](std::function<void()> report) { m_state->post(std::move(report)); }};
    QString m_storage; // where blobs/ and updates/ are (DataDirectory::storageRoot); update rows are relative
                       // to it
    BlobStore m_blobs;
    std::optional<SigningKeys> m_keys;
    AdmissionCache m_admission;
    metrics::CoordinatorMetrics m_metrics;
    dashboard::EventHub m_events;
    // Among several coordinators, their events (set at start, before any other thread reads it).
    std::unique_ptr<dashboard::EventRelay> m_relay;

    // State thread only.
    std::unique_ptr<Database> m_db;
    std::unique_ptr<AgentStanding> m_standing;
    std::unique_ptr<Enrollment> m_enrollment;
    std::unique_ptr<JobViews> m_views;     // what the admin sees (views/)
    std::unique_ptr<DashboardFeed> m_feed; // the dashboard's live events (views/)
    std::map<qint64, JobState> m_jobs;
    std::unique_ptr<SchedulerTables> m_schedulerTables;
    std::unique_ptr<JobTallies> m_tallies; // each job's counts, the deployment's
    std::unique_ptr<Scheduler> m_scheduler; // workunits, leases and epochs (coordinator/scheduling/)
    std::unique_ptr<ResultIntake> m_intake; // what a received result counts for (coordinator/scheduling/)
    std::unique_ptr<LeasePacer> m_pacer;    // when lease requests are answered (parked, held back)
    std::unique_ptr<LeaseDesk> m_leaseDesk; // leases granted and kept (leasing/)
    std::unique_ptr<ResultDesk> m_results;  // results stored, recorded and queued for the fold (intake/)
    std::unique_ptr<HandBacks> m_handBacks; // leases given back, handed-back checkpoints (intake/)
    std::unique_ptr<JobRecords> m_records;  // jobs' rows (lifecycle/)
    std::unique_ptr<JobTakeUp> m_takeUp;    // jobs read back, imported and set going (lifecycle/)
    std::unique_ptr<JobDesk> m_jobDesk;     // jobs' life (lifecycle/)
    std::unique_ptr<FoldReports> m_foldReports; // the weights thread's reports (lifecycle/)
    std::unique_ptr<WeightsExport> m_export;    // jobs' weights for their admin (lifecycle/)
    std::unique_ptr<Deployment> m_deployment;   // the coordinator among its deployment's others (peers/)

    std::unique_ptr<SerialExecutor> m_importer;
    // TorchScript programs loaded off the state thread, and apart from imports, which may take minutes: checked at
    // submit, written at export.
    std::unique_ptr<SerialExecutor> m_programs;
    std::unique_ptr<WeightsKeeper> m_weights;
    std::unique_ptr<ValidationRunner> m_validation;
    std::unique_ptr<SerialExecutor> m_state; // last: destroyed first, after shutdown() stopped the others
    std::atomic<bool> m_stopping{false};
    std::atomic<int> m_jobsLeftToOthers{0}; // jobs JobTakeUp left to other coordinators, for notServedHere
    bool m_housekeeper =
        true; // state thread: does the deployment's housekeeping (Database::holdsHousekeeping)
    std::optional<DirectoryLock> m_lock; // one coordinator per data directory
};

} // namespace gleaner::coordinator
