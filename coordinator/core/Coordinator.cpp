#include "core/Coordinator.h"
#include "events/EventRelay.h"

#include "aggregation/WeightsKeeper.h"
#include "enrollment/Tokens.h"
#include "intake/AgentStanding.h"
#include "lifecycle/JobRecords.h"
#include "scheduling/Scheduler.h"
#include "scheduling/SchedulerTables.h"
#include "store/Database.h"
#include "store/RedisConnection.h"
#include "util/LargeBuffers.h"
#include "validation/ValidationRunner.h"

#include <QDir>
#include <QLoggingCategory>
#include <QFile>

Q_LOGGING_CATEGORY(lcCoordinator, "gleaner.coordinator")

namespace gleaner::coordinator {

Coordinator::Coordinator(DataDirectory dir, CoordinatorConfig config, const Clock& clock)
    : m_dir(std::move(dir)), m_config(std::move(config)), m_clock(clock),
      m_storage(m_dir.storageRoot(m_config)), m_blobs(m_dir.blobsDir(m_config))
{
    m_events.setDropObserver([this] { m_metrics.eventClientDropped(); });
}

Coordinator::~Coordinator()
{
    shutdown();
}

Result<std::unique_ptr<Coordinator>> Coordinator::open(const DataDirectory& dir, const CoordinatorConfig& config,
                                                       const Clock& clock)
{
    std::unique_ptr<Coordinator> coordinator(new Coordinator(dir, config, clock));
    if (auto s = coordinator->start(); !s) {
        coordinator->shutdown();
        return fail(s.error());
    }
    return coordinator;
}

Status Coordinator::start()
{
    LargeBuffers::keepFreed(); // the model-sized buffers of every update (util/LargeBuffers.h)
    // Two servers on one data directory would share the database and delete each other's uploads.
    auto lock = DirectoryLock::acquire(m_dir.root(), QStringLiteral("coordinator"));
    if (!lock)
        return fail(lock.error());
    m_lock.emplace(std::move(*lock));
    auto keys = SigningKeys::load(m_dir);
    if (!keys)
        return fail(keys.error());
    m_keys.emplace(std::move(*keys));
    for (const QString& folder : {m_dir.blobsDir(m_config), m_dir.updatesDir(m_config), m_dir.uploadsDir()})
        if (!QDir().mkpath(folder))
            return fail(QStringLiteral("%1: cannot create the folder").arg(folder));
    // Uploads in flight when the process stopped were never answered: their agents will send them again.
    QDir uploads(m_dir.uploadsDir());
    for (const QString& name : uploads.entryList(QDir::Files))
        uploads.remove(name);

    m_importer = std::make_unique<SerialExecutor>();
    m_programs = std::make_unique<SerialExecutor>();
    m_validation = std::make_unique<ValidationRunner>();
    m_weights =
        std::make_unique<WeightsKeeper>(m_weightsRelay, m_blobs, m_clock, m_config, m_metrics, *m_validation);
    m_state = std::make_unique<SerialExecutor>();
    return m_state->call([this]() -> Status {
        auto db = Database::open(m_dir.databaseLocation(m_config));
        if (!db)
            return fail(db.error());
        if (auto claimed = (*db)->claimForCoordinator(m_config.isShared()); !claimed)
            return claimed;
        m_db = std::move(*db);
        m_housekeeper = m_db->holdsHousekeeping();
        m_weights->keepSnapshots(m_housekeeper);
        if (!m_config.redis.isEmpty()) {
            auto deployment = m_db->deploymentId();
            if (!deployment)
                return fail(deployment.error());
            if (m_config.isShared()) {
                if (auto s = Deployment::checkIdentity(*m_db, m_dir, m_storage, *deployment, *m_keys); !s)
                    return s;
                // Two coordinators publishing the same version would write the same bytes, one blob, which
                // either could delete while the other's leases name it: each one's publications carry its own
                // name.
                const QString name = Tokens::randomId();
                m_weights->setPublisher(name);
                m_relay = std::make_unique<dashboard::EventRelay>(
                    m_config.redis, QStringLiteral("gleaner:%1:events").arg(*deployment).toUtf8(),
                    name.toUtf8());
            }
            auto redis = RedisConnection::open(m_config.redis);
            if (!redis)
                return fail(redis.error());
            m_weights->shareThrough(std::move(*redis), QStringLiteral("gleaner:") + *deployment);
        }
        m_schedulerTables = std::make_unique<SchedulerTables>(*m_db);
        m_tallies = std::make_unique<JobTallies>(*m_db);
        m_scheduler = std::make_unique<Scheduler>(m_jobs, *m_schedulerTables, m_clock,
                                                  SchedulerLimits{m_config.leaseLifetimeDeadlines}, &Tokens::randomId);
        m_scheduler->setExpiredObserver([this](const Lease& lease, const JobState* job) { onLeaseExpired(lease, job); });
        m_scheduler->setLearntObserver(
            [this](const Lease& lease, const JobState& job) { m_deployment->leaseLearnt(lease, job); });
        m_intake = std::make_unique<ResultIntake>(m_jobs, *m_scheduler);
        m_pacer = std::make_unique<LeasePacer>(m_jobs, *m_intake, *m_weights, m_config, m_clock, m_metrics,
                                               [this](const QString& agentId, const QJsonObject& request) {
                                                   return m_leaseDesk->lease(agentId, request);
                                               });
        m_enrollment = std::make_unique<Enrollment>(
            *m_db, m_admission, m_clock, m_config.openEnrollment,
            Enrollment::Hooks{
                [this](const QString& agentId, const char* what) { m_feed->noteAgentChanged(agentId, what); },
                // Its work in flight will never come back: the workunits go to other agents now, not at the
                // deadline.
                [this](const QString& agentId) { m_scheduler->expireAllOf(agentId); },
                [this] { return signingPublicKeyPem(); }});
        m_views = std::make_unique<JobViews>(m_jobs, *m_scheduler, *m_db, *m_enrollment, m_config, m_clock,
                                             m_metrics, m_events,
                                             [this](qint64 jobId) { return m_takeUp->noSuchJob(jobId); });
        m_feed = std::make_unique<DashboardFeed>(m_jobs, *m_views, *m_db, m_events, m_relay.get(), m_metrics,
                                                 m_clock);
        m_standing = std::make_unique<AgentStanding>(*m_db, *m_enrollment, *m_scheduler, *m_feed, m_clock);
        const LeaseLookup leaseLookup{
            [this](const QString& leaseId) { return m_deployment->findLease(leaseId); },
            [this](const QString& agentId, const QString& leaseId) {
                return leaseNotInMemory(agentId, leaseId);
            }};
        m_results = std::make_unique<ResultDesk>(
            ResultDesk::Parts{m_jobs, *m_db, *m_scheduler, *m_intake, m_admission, *m_enrollment, *m_standing,
                              *m_tallies, *m_weights, *m_feed, m_metrics, m_blobs},
            m_config, m_clock, m_storage, ResultDesk::Hooks{leaseLookup, [this](JobState& job, int epoch) {
                                                                m_jobDesk->afterUpdateQueued(job, epoch);
                                                            }});
        m_leaseDesk = std::make_unique<LeaseDesk>(LeaseDesk::Parts{m_jobs, *m_db, *m_scheduler, *m_pacer,
                                                                   m_admission, *m_enrollment, *m_standing,
                                                                   *m_feed, *m_tallies, *m_keys, m_blobs},
                                                  m_config, leaseLookup);
        m_handBacks = std::make_unique<HandBacks>(
            HandBacks::Parts{m_jobs, *m_db, *m_scheduler, m_admission, *m_enrollment, *m_standing, m_blobs},
            m_config, m_clock, leaseLookup);
        m_records = std::make_unique<JobRecords>(*m_db, *m_scheduler, m_blobs, m_clock);
        m_takeUp = std::make_unique<JobTakeUp>(
            JobTakeUp::Parts{m_jobs, *m_db, *m_records, *m_scheduler, *m_schedulerTables, *m_tallies,
                             m_admission, *m_handBacks, *m_weights, *m_validation, m_blobs, *m_importer,
                             *m_state, m_jobsLeftToOthers},
            m_config, m_clock, m_dir.uploadsDir(), m_storage,
            JobTakeUp::Hooks{[this](JobState& job, JobStatus status, const QString& reason, bool persist) {
                                 m_jobDesk->finish(job, status, reason, persist);
                             },
                             [this](JobState& job) { m_jobDesk->scheduleValidations(job); },
                             [this] { m_deployment->followJobs(); }});
        m_jobDesk = std::make_unique<JobDesk>(
            JobDesk::Parts{m_jobs, *m_db, *m_records, *m_takeUp, *m_scheduler, m_admission, *m_weights,
                           *m_validation, *m_views, *m_feed, *m_programs, *m_state},
            m_config, m_clock, [this] { return m_housekeeper; });
        m_foldReports = std::make_unique<FoldReports>(
            FoldReports::Parts{*m_db, *m_jobDesk, *m_tallies, *m_standing, *m_pacer, *m_feed, m_metrics},
            m_config, m_clock, m_storage);
        m_weightsRelay.setTarget(m_foldReports.get());
        m_deployment = std::make_unique<Deployment>(
            Deployment::Parts{m_jobs, *m_db, *m_scheduler, m_admission, *m_records, *m_takeUp, *m_jobDesk,
                              *m_tallies, *m_standing, *m_handBacks, *m_weights, *m_state},
            m_dir, m_config, m_clock, m_storage,
            Deployment::Hooks{[this](const QSet<QString>& alsoNeeded) { removeRetiredWeights(alsoNeeded); },
                              [this] { return m_housekeeper; }});
        m_export = std::make_unique<WeightsExport>(
            WeightsExport::Parts{*m_jobDesk, *m_takeUp, *m_db, *m_weights, m_blobs, *m_programs},
            m_dir.uploadsDir());
        if (auto s = m_standing->load(); !s)
            return s;
        return loadState();
    });
}

Status Coordinator::loadState()
{
    if (auto s = m_enrollment->load([this](const QString& agentId, qint64 samples, double seconds) {
            m_scheduler->noteSpeed(agentId, samples, seconds);
        });
        !s)
        return s;
    return m_takeUp->loadAll(/*importHere=*/!m_config.isShared() || m_housekeeper);
}

std::optional<HttpResponse> Coordinator::notServedHere(const QString& agentId, const QString& leaseId)
{
    if (m_jobsLeftToOthers.load() == 0)
        return std::nullopt;
    return m_state->call([&] { return m_takeUp->leaseLeftToOthers(agentId, leaseId); });
}

void Coordinator::drain()
{
    // Each hop may post to the next thread; three rounds cover state -> weights -> validation -> state.
    for (int round = 0; round < 4; ++round) {
        m_state->call([] {});
        if (m_relay)
            m_relay->flush();
        m_weights->executor().call([] {});
        m_validation->executor().call([] {});
        m_importer->call([] {});
        m_programs->call([] {});
    }
    m_state->call([] {});
}

SerialExecutor& Coordinator::weightsThread()
{
    return m_weights->executor();
}

void Coordinator::shutdown()
{
    if (m_stopping.exchange(true) || !m_state)
        return;
    m_importer->stop();
    m_programs->stop();
    drain();
    // Every job's weights to disk, so a restart replays nothing.
    m_state->call([this] {
        for (auto& [id, job] : m_jobs)
            if (job.status == JobStatus::Running || job.status == JobStatus::Paused)
                m_weights->snapshot(id, true);
    });
    m_weights->executor().call([] {});
    m_state->call([] {}); // records the snapshots just written
    m_validation->executor().stop();
    m_weights->executor().stop();
    m_state->call([this] {
        if (m_pacer)
            m_pacer->stop();
        if (auto s = m_tallies ? m_tallies->flush() : Status(); !s)
            qCWarning(lcCoordinator) << "cannot store the file bytes sent since the last tick:" << s.error();
        m_pacer.reset();
        m_weightsRelay.setTarget(nullptr);
        m_deployment.reset();
        m_export.reset();
        m_foldReports.reset();
        m_jobDesk.reset();
        m_takeUp.reset();
        m_records.reset();
        m_handBacks.reset();
        m_results.reset();
        m_leaseDesk.reset();
        m_standing.reset();
        m_intake.reset();
        m_feed.reset();
        m_views.reset();
        m_enrollment.reset();
        m_scheduler.reset();
        m_schedulerTables.reset();
        m_db.reset();
    });
    m_events.closeAll(); // live dashboard streams end with the coordinator
    m_state->stop();
    m_lock.reset();
}

void Coordinator::setListeningPort(quint16 port)
{
    if (m_config.listenPort == 0)
        m_config.listenPort = port;
}

HttpResponse Coordinator::rotateSigningKey()
{
    // The key is in every coordinator's data directory; one that rotated alone would sign what the others'
    // agents refuse, and the others would not start again (their key is no longer the deployment's).
    if (m_config.isShared())
        return HttpResponse::error(
            409, QStringLiteral("this coordinator shares its deployment with others: the "
                                "signing key is not rotated while several serve it (run the "
                                "deployment on one coordinator to rotate, then join the others "
                                "again with gleaner-coordinator init --join)"));
    auto rotated = m_keys->rotate(m_clock.nowMs());
    if (!rotated) {
        qCCritical(lcCoordinator) << "the signing key rotation failed:" << rotated.error();
        return HttpResponse::error(500, QStringLiteral("the signing key was not rotated: %1").arg(rotated.error()));
    }
    qCInfo(lcCoordinator).noquote() << "the admin rotated the signing key: new manifests are signed with"
                          << rotated->value(QStringLiteral("fingerprint")).toString() << "instead of"
                          << rotated->value(QStringLiteral("previous_fingerprint")).toString();
    return HttpResponse::json(200, *rotated);
}

} // namespace gleaner::coordinator
