#include "core/Coordinator.h"
#include "events/EventRelay.h"

#include "aggregation/WeightsKeeper.h"
#include "core/AgentStanding.h"
#include "enrollment/EnrollmentTokenUse.h"
#include "enrollment/Tokens.h"
#include "format/SafeTensors.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "store/RedisConnection.h"
#include "scheduling/SchedulerTables.h"
#include "util/LargeBuffers.h"
#include "validation/ValidationRunner.h"

#include <QDir>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QFile>
#include <QSqlRecord>

Q_LOGGING_CATEGORY(lcCoordinator, "gleaner.coordinator")

namespace gleaner::coordinator {

// ---- AdmissionCache ----------------------------------------------------------------------------------------

std::optional<AdmissionCache::AgentEntry> AdmissionCache::agentByTokenHash(const QString& hash) const
{
    std::shared_lock lock(m_mutex);
    auto it = m_agents.constFind(hash);
    if (it == m_agents.cend())
        return std::nullopt;
    return *it;
}

bool AdmissionCache::isAdminTokenHash(const QString& hash) const
{
    std::shared_lock lock(m_mutex);
    return m_adminHashes.contains(hash);
}

std::optional<AdmissionCache::LeaseEntry> AdmissionCache::lease(const QString& leaseId) const
{
    std::shared_lock lock(m_mutex);
    auto it = m_leases.constFind(leaseId);
    if (it == m_leases.cend())
        return std::nullopt;
    return *it;
}

void AdmissionCache::setAgent(const QString& tokenHash, AgentEntry entry)
{
    std::unique_lock lock(m_mutex);
    m_agents.insert(tokenHash, std::move(entry));
}

void AdmissionCache::addAdminTokenHash(const QString& hash)
{
    std::unique_lock lock(m_mutex);
    m_adminHashes.insert(hash);
}

bool AdmissionCache::agentMayRead(const QString& agentId, const QString& sha256) const
{
    std::shared_lock lock(m_mutex);
    auto files = m_agentFiles.constFind(agentId);
    return files != m_agentFiles.cend() && files->contains(sha256);
}

std::optional<AdmissionCache::FileUse> AdmissionCache::fileUse(const QString& sha256) const
{
    std::shared_lock lock(m_mutex);
    auto use = m_fileUses.constFind(sha256);
    if (use == m_fileUses.cend())
        return std::nullopt;
    return *use;
}

void AdmissionCache::addFiles(const LeaseEntry& entry)
{
    if (!entry.closedReason.isEmpty())
        return;
    auto& files = m_agentFiles[entry.agentId];
    for (qsizetype i = 0; i < entry.files.size(); ++i) {
        const QString& sha = entry.files.at(i);
        files[sha] += 1;
        FileUse& use = m_fileUses[sha];
        use.leases += 1;
        use.role = entry.roles.value(i);
        use.jobId = entry.jobId;
    }
}

void AdmissionCache::removeFiles(const LeaseEntry& entry)
{
    if (!entry.closedReason.isEmpty())
        return;
    auto agent = m_agentFiles.find(entry.agentId);
    if (agent == m_agentFiles.end())
        return;
    for (const QString& sha : entry.files) {
        auto file = agent->find(sha);
        if (file != agent->end() && --*file <= 0)
            agent->erase(file);
        auto use = m_fileUses.find(sha);
        if (use != m_fileUses.end() && --use->leases <= 0)
            m_fileUses.erase(use);
    }
    if (agent->isEmpty())
        m_agentFiles.erase(agent);
}

void AdmissionCache::setLease(const QString& leaseId, LeaseEntry entry)
{
    std::unique_lock lock(m_mutex);
    if (auto old = m_leases.constFind(leaseId); old != m_leases.cend())
        removeFiles(*old);
    addFiles(entry);
    m_leases.insert(leaseId, std::move(entry));
}

void AdmissionCache::closeLease(const QString& leaseId, const QString& reason)
{
    std::unique_lock lock(m_mutex);
    auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return;
    removeFiles(*it);
    it->closedReason = reason;
    it->files.clear();
}

void AdmissionCache::removeLease(const QString& leaseId)
{
    std::unique_lock lock(m_mutex);
    auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return;
    removeFiles(*it);
    m_leases.erase(it);
}

// ---- life cycle ---------------------------------------------------------------------------------------------

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
    m_weights = std::make_unique<WeightsKeeper>(m_weightsReports, m_blobs, m_clock, m_config, m_metrics, *m_validation);
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
                if (auto s = checkDeployment(*deployment); !s)
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
            [this](const Lease& lease, const JobState& job) { onLeaseLearnt(lease, job); });
        m_intake = std::make_unique<ResultIntake>(m_jobs, *m_scheduler);
        m_standing = std::make_unique<AgentStanding>(*m_db);
        if (auto s = m_standing->load(); !s)
            return s;
        return loadState();
    });
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
        for (ParkedLease& parked : m_parkedLeases)
            parked.respond(HttpResponse::error(503, QStringLiteral("the coordinator is stopping; ask again later")));
        m_parkedLeases.clear();
        if (auto s = m_tallies ? m_tallies->flush() : Status(); !s)
            qCWarning(lcCoordinator) << "cannot store the file bytes sent since the last tick:" << s.error();
        m_intake.reset();
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

// ---- agents and tokens --------------------------------------------------------------------------------------

QJsonObject Coordinator::touchAgent(const QString& agentId)
{
    auto seen =
        m_db->exec(QStringLiteral("UPDATE agents SET last_seen_ms = ? WHERE id = ? RETURNING hardware"),
                   {m_clock.nowMs(), agentId});
    return seen && seen->next() ? QJsonDocument::fromJson(seen->value(0).toByteArray()).object()
                                : QJsonObject();
}

void Coordinator::recordAgentOutcome(const QString& agentId, const char* column, qint64 samples, double seconds)
{
    (void)m_db->exec(QStringLiteral("UPDATE agents SET %1 = %1 + 1, samples = samples + ?, train_seconds = "
                                    "train_seconds + ? WHERE id = ?")
                         .arg(QString::fromLatin1(column)),
                     {samples, seconds, agentId});
}

HttpResponse Coordinator::enroll(const QJsonObject& request)
{
    const QString name = request.value(QStringLiteral("name")).toString().trimmed();
    const QString platform = request.value(QStringLiteral("platform")).toString().trimmed();
    if (name.isEmpty() || name.size() > 200)
        return HttpResponse::error(422, QStringLiteral("name: expected the machine's name, 1 to 200 characters"));
    if (platform.size() > 200)
        return HttpResponse::error(422, QStringLiteral("platform: at most 200 characters"));
    const QByteArray token = request.value(QStringLiteral("enrollment_token")).toString().toUtf8();
    const qint64 now = m_clock.nowMs();

    if (!token.isEmpty() || !m_config.openEnrollment) {
        if (token.isEmpty())
            return HttpResponse::error(401, QStringLiteral("this coordinator needs an enrollment token; ask its "
                                                           "admin for one (gleaner-coordinator token create)"));
        auto spent = EnrollmentTokenUse::spend(*m_db, Tokens::hash(token), now);
        if (!spent)
            return HttpResponse::error(500, spent.error());
        if (*spent != EnrollmentTokenUse::Outcome::Enrolled)
            return HttpResponse::error(401, EnrollmentTokenUse::refusal(*spent));
    }

    const QString agentId = Tokens::randomId();
    const QByteArray agentToken = Tokens::generate("gag_");
    const QString tokenHash = Tokens::hash(agentToken);
    const QByteArray hardware =
        QJsonDocument(request.value(QStringLiteral("hardware")).toObject()).toJson(QJsonDocument::Compact);
    auto inserted = m_db->exec(QStringLiteral("INSERT INTO agents (id, token_hash, name, platform, hardware, "
                                              "enrolled_ms, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"),
                               {agentId, tokenHash, name, platform, QString::fromUtf8(hardware), now, now});
    if (!inserted)
        return HttpResponse::error(500, inserted.error());
    m_admission.setAgent(tokenHash, {agentId, false});
    qCInfo(lcCoordinator) << "agent" << agentId << "enrolled:" << name << platform;
    noteAgentChanged(agentId, "enrolled");

    QJsonObject reply;
    reply.insert(QStringLiteral("agent_id"), agentId);
    reply.insert(QStringLiteral("agent_token"), QString::fromLatin1(agentToken));
    reply.insert(QStringLiteral("signing_public_key"), QString::fromLatin1(signingPublicKeyPem()));
    return HttpResponse::json(200, reply);
}

HttpResponse Coordinator::createEnrollmentToken(const QJsonObject& request)
{
    const QJsonValue uses = request.value(QStringLiteral("uses"));
    const QJsonValue expires = request.value(QStringLiteral("expires_seconds"));
    if (!uses.isUndefined() && !uses.isNull() && (!uses.isDouble() || uses.toInteger(-1) < 1))
        return HttpResponse::error(422, QStringLiteral("uses: expected a positive integer"));
    if (!expires.isUndefined() && !expires.isNull() && (!expires.isDouble() || expires.toInteger(-1) < 1))
        return HttpResponse::error(422, QStringLiteral("expires_seconds: expected a positive integer"));
    const QByteArray token = Tokens::generate("gle_");
    const qint64 now = m_clock.nowMs();
    const QVariant expiresMs = expires.isDouble() ? QVariant(now + expires.toInteger() * 1000) : QVariant();
    const QVariant usesLeft = uses.isDouble() ? QVariant(uses.toInteger()) : QVariant();
    auto inserted = m_db->insertReturningId(QStringLiteral("INSERT INTO enrollment_tokens (hash, created_ms, "
                                                           "expires_ms, uses_left) VALUES (?, ?, ?, ?)"),
                                            {Tokens::hash(token), now, expiresMs, usesLeft});
    if (!inserted)
        return HttpResponse::error(500, inserted.error());
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), *inserted);
    reply.insert(QStringLiteral("token"), QString::fromLatin1(token));
    return HttpResponse::json(201, reply);
}

HttpResponse Coordinator::listEnrollmentTokens()
{
    auto rows = m_db->exec(QStringLiteral("SELECT id, created_ms, expires_ms, uses_left, used, revoked FROM "
                                          "enrollment_tokens ORDER BY id"));
    if (!rows)
        return HttpResponse::error(500, rows.error());
    QJsonArray tokens;
    const qint64 now = m_clock.nowMs();
    while (rows->next()) {
        QJsonObject token;
        token.insert(QStringLiteral("id"), rows->value(0).toLongLong());
        token.insert(QStringLiteral("created_ms"), rows->value(1).toLongLong());
        token.insert(QStringLiteral("expires_ms"), rows->value(2).isNull() ? QJsonValue() : rows->value(2).toLongLong());
        token.insert(QStringLiteral("uses_left"), rows->value(3).isNull() ? QJsonValue() : rows->value(3).toLongLong());
        token.insert(QStringLiteral("used"), rows->value(4).toLongLong());
        const bool revoked = rows->value(5).toInt() != 0;
        const bool expired = !rows->value(2).isNull() && rows->value(2).toLongLong() <= now;
        const bool usedUp = !rows->value(3).isNull() && rows->value(3).toLongLong() <= 0;
        token.insert(QStringLiteral("state"), revoked   ? QStringLiteral("revoked")
                                              : expired ? QStringLiteral("expired")
                                              : usedUp  ? QStringLiteral("used up")
                                                        : QStringLiteral("valid"));
        tokens.append(token);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("tokens"), tokens);
    return HttpResponse::json(200, reply);
}

HttpResponse Coordinator::revokeEnrollmentToken(qint64 id)
{
    auto updated = m_db->exec(QStringLiteral("UPDATE enrollment_tokens SET revoked = 1 WHERE id = ?"), {id});
    if (!updated)
        return HttpResponse::error(500, updated.error());
    if (updated->numRowsAffected() == 0)
        return HttpResponse::error(404, QStringLiteral("no enrollment token has id %1").arg(id));
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), id);
    reply.insert(QStringLiteral("state"), QStringLiteral("revoked"));
    return HttpResponse::json(200, reply);
}

HttpResponse Coordinator::listAgents()
{
    auto rows =
        m_db->exec(QStringLiteral("SELECT id, name, platform, hardware, enrolled_ms, last_seen_ms, revoked, "
                                  "done, timed_out, invalid, samples, train_seconds, failed, quarantined_ms, "
                                  "quarantine_reason, disagreed FROM agents ORDER BY enrolled_ms"));
    if (!rows)
        return HttpResponse::error(500, rows.error());
    QJsonArray agents;
    while (rows->next()) {
        QJsonObject agent;
        agent.insert(QStringLiteral("id"), rows->value(0).toString());
        agent.insert(QStringLiteral("name"), rows->value(1).toString());
        agent.insert(QStringLiteral("platform"), rows->value(2).toString());
        agent.insert(QStringLiteral("hardware"), QJsonDocument::fromJson(rows->value(3).toByteArray()).object());
        agent.insert(QStringLiteral("enrolled_ms"), rows->value(4).toLongLong());
        agent.insert(QStringLiteral("last_seen_ms"), rows->value(5).toLongLong());
        agent.insert(QStringLiteral("revoked"), rows->value(6).toInt() != 0);
        agent.insert(QStringLiteral("done"), rows->value(7).toLongLong());
        agent.insert(QStringLiteral("timed_out"), rows->value(8).toLongLong());
        agent.insert(QStringLiteral("invalid"), rows->value(9).toLongLong());
        agent.insert(QStringLiteral("failed"), rows->value(12).toLongLong());
        agent.insert(QStringLiteral("samples"), rows->value(10).toLongLong());
        const double seconds = rows->value(11).toDouble();
        agent.insert(QStringLiteral("train_seconds"), seconds);
        agent.insert(QStringLiteral("samples_per_second"), seconds > 0 ? rows->value(10).toDouble() / seconds : 0.0);
        agent.insert(QStringLiteral("disagreed"), rows->value(15).toLongLong());
        const bool quarantined = !rows->value(13).isNull();
        agent.insert(QStringLiteral("quarantined"), quarantined);
        if (quarantined) {
            agent.insert(QStringLiteral("quarantined_ms"), rows->value(13).toLongLong());
            agent.insert(QStringLiteral("quarantine_reason"), rows->value(14).toString());
        }
        agents.append(agent);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("agents"), agents);
    return HttpResponse::json(200, reply);
}

HttpResponse Coordinator::revokeAgent(const QString& agentId)
{
    auto row = m_db->exec(QStringLiteral("SELECT token_hash FROM agents WHERE id = ?"), {agentId});
    if (!row || !row->next())
        return HttpResponse::error(404, QStringLiteral("no agent has id %1").arg(agentId));
    const QString hash = row->value(0).toString();
    (void)m_db->exec(QStringLiteral("UPDATE agents SET revoked = 1 WHERE id = ?"), {agentId});
    m_admission.setAgent(hash, {agentId, true});
    // Its work in flight will never come back: give the workunits to other agents now, not at the deadline.
    m_scheduler->expireAllOf(agentId);
    noteAgentChanged(agentId, "revoked");
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), agentId);
    reply.insert(QStringLiteral("revoked"), true);
    return HttpResponse::json(200, reply);
}

void Coordinator::countRefusal(const QString& agentId, const QString& reason)
{
    recordAgentOutcome(agentId, "invalid");
    if (!m_standing->recordRefusal(agentId, reason, m_clock.nowMs()))
        return;
    // Its work in flight is suspect and holds workunits honest agents could train: they go back now.
    m_scheduler->expireAllOf(agentId);
    noteAgentChanged(agentId, "quarantined");
}

HttpResponse Coordinator::releaseAgent(const QString& agentId)
{
    auto row = m_db->exec(QStringLiteral("SELECT 1 FROM agents WHERE id = ?"), {agentId});
    if (!row || !row->next())
        return HttpResponse::error(404, QStringLiteral("no agent has id %1").arg(agentId));
    auto lifted = m_standing->lift(agentId);
    if (!lifted)
        return HttpResponse::error(500, lifted.error());
    if (*lifted) {
        qCInfo(lcCoordinator) << "the admin lifted the quarantine of agent" << agentId;
        noteAgentChanged(agentId, "released");
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), agentId);
    reply.insert(QStringLiteral("quarantined"), false);
    reply.insert(QStringLiteral("was_quarantined"), *lifted);
    return HttpResponse::json(200, reply);
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
