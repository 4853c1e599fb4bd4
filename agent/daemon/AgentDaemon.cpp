#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "config/Enroller.h"
#include "daemon/StopSignal.h"
#include "idle/SystemIdleProbe.h"
#include "net/CoordinatorClient.h"
#include "net/CurlTransport.h"
#include "util/SerialExecutor.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>
#include <QRandomGenerator>
#include <QSet>
#include <QThread>

#include <limits>

namespace gleaner::agent {

Q_LOGGING_CATEGORY(lcDaemon, "gleaner.agent")

using namespace daemon_detail;

Result<std::unique_ptr<AgentDaemon>> AgentDaemon::create(DaemonOptions options)
{
    options.dataDir = QDir(options.dataDir).absolutePath();
    const QString dir = options.dataDir;
    if (!AgentConfig::isEnrolled(dir))
        return fail(
            QStringLiteral(
                "%1 holds no enrolled agent; run `gleaner-agent enroll URL --token TOKEN --data-dir %1` "
                "first")
                .arg(dir));
    auto config = AgentConfig::load(dir);
    if (!config)
        return fail(config.error());
    auto keys = PinnedKeys::load(dir);
    if (!keys)
        return fail(keys.error());
    if (options.maxTasks < 1)
        return fail(QStringLiteral("the number of subtasks at once must be at least 1"));
    if (options.workerProgram.isEmpty())
        options.workerProgram = QCoreApplication::applicationDirPath() + QStringLiteral("/gleaner-worker");
    if (!QFileInfo(options.workerProgram).isExecutable())
        return fail(
            QStringLiteral("%1 is not an executable gleaner-worker; reinstall Gleaner or pass --worker PATH")
                .arg(options.workerProgram));
    if (options.threads <= 0)
        options.threads = std::max(1, QThread::idealThreadCount() / options.maxTasks);

    // Two daemons on one folder would run each subtask twice and delete each other's task folders.
    auto lock = DirectoryLock::acquire(dir, QStringLiteral("gleaner-agent"));
    if (!lock)
        return fail(lock.error());
    // The owner's preferences and the organisation's policy: a broken policy file stops the agent here, so an
    // organisation's limits are never silently ignored.
    const QString policyFile =
        options.policyFile.isEmpty() ? PreferenceStore::defaultPolicyFile() : options.policyFile;
    auto preferences = PreferenceStore::open(dir + QStringLiteral("/preferences.json"), policyFile);
    if (!preferences && options.dedicated) {
        // The preferences do not govern a dedicated agent: a policy file meant for desktops does not stop it.
        qCWarning(lcDaemon).noquote()
            << preferences.error() << "(ignored: a --dedicated agent computes whatever the policy says)";
        preferences = PreferenceStore::open(dir + QStringLiteral("/preferences.json"), QString());
    }
    if (!preferences)
        return fail(preferences.error());
    for (const QString& warning : preferences->warnings())
        qCWarning(lcDaemon).noquote() << warning;
    if (!options.dedicated) {
        const Preferences& p = preferences->current();
        options.cpuShare = p.cpuSharePercent() / 100.0;
        options.checkpointIntervalSeconds = p.checkpointSeconds();
        options.cacheCapBytes = p.cacheBytes();
        options.uploadBytesPerSecond = p.uploadBytesPerSecond();
        options.downloadBytesPerSecond = p.downloadBytesPerSecond();
    }
    auto store = SubtaskStore::open(dir + QStringLiteral("/subtasks.db"));
    if (!store)
        return fail(store.error());
    static SystemClock cacheClock;
    auto cache = FileCache::open(dir + QStringLiteral("/cache"), options.cacheCapBytes, cacheClock);
    if (!cache)
        return fail(cache.error());
    if (!QDir().mkpath(dir + QStringLiteral("/tasks")))
        return fail(QStringLiteral("cannot create %1/tasks").arg(dir));
    if (auto source = SystemIdleProbe::checkPreference(options.idleSource); !source)
        return fail(source.error());
    DesktopProbes probes = options.dedicated ? DesktopProbes() : DesktopProbes::system(options.idleSource);
    return std::unique_ptr<AgentDaemon>(new AgentDaemon(std::move(options), *config, std::move(*keys), std::move(*lock),
                                                        std::move(*store), std::move(*cache),
                                                        std::move(*preferences), std::move(probes)));
}

AgentDaemon::AgentDaemon(DaemonOptions options, AgentConfig config, PinnedKeys keys, DirectoryLock lock,
                         std::unique_ptr<SubtaskStore> store, std::unique_ptr<FileCache> cache,
                         PreferenceStore preferences, DesktopProbes probes)
    : m_options(std::move(options)), m_config(std::move(config)), m_keys(std::move(keys)),
      m_lock(std::move(lock)), m_store(std::move(store)), m_cache(std::move(cache)),
      m_stop(std::make_unique<StopSignal>())
{
    m_desktop = std::make_unique<DesktopPolicy>(std::move(preferences), std::move(probes), m_clock,
                                                m_options.dedicated);
    connect(m_desktop.get(), &DesktopPolicy::decisionChanged, this, &AgentDaemon::applyDecision);
    connect(m_desktop.get(), &DesktopPolicy::preferencesChanged, this, &AgentDaemon::applyPreferences);
    m_snoozeTimer.setSingleShot(true);
    connect(&m_snoozeTimer, &QTimer::timeout, this, &AgentDaemon::endSnooze);
    const QString ca = AgentConfig::caPath(m_options.dataDir);
    m_transport = std::make_unique<CurlTransport>(QFileInfo::exists(ca) ? ca : QString());
    RetryOptions retry;
    retry.maxAttempts =
        4; // the daemon tries a step again later itself; the network thread must not hang on one
    retry.maxDelayMs = 15'000;
    StopSignal* stop = m_stop.get();
    m_client = std::make_unique<CoordinatorClient>(*m_transport, m_config.coordinatorUrl, m_clock,
                                                   RetryPolicy(retry),
                                                   [stop](qint64 ms) { return stop->sleep(ms); });
    QFile token(AgentConfig::tokenPath(m_options.dataDir));
    if (token.open(QIODevice::ReadOnly))
        m_client->setAgentToken(token.readAll().trimmed());
    m_client->setRateLimits(m_options.uploadBytesPerSecond, m_options.downloadBytesPerSecond);
    m_network = std::make_unique<SerialExecutor>();

    m_leaseTimer.setSingleShot(true);
    connect(&m_leaseTimer, &QTimer::timeout, this, &AgentDaemon::requestLease);
    m_keepAlive.setInterval(int(std::max<qint64>(m_options.progressReportMs / 2, 500)));
    connect(&m_keepAlive, &QTimer::timeout, this, &AgentDaemon::keepLeasesAlive);
    m_shutdownTimer.setSingleShot(true);
    connect(&m_shutdownTimer, &QTimer::timeout, this, [this] {
        if (m_leaving) {
            // The grace budget is spent: what was not handed back stays for the next start.
            m_leaving = false;
            m_stop->stop();
            int kept = 0;
            for (const auto& active : std::as_const(m_active))
                if (!active->kept) {
                    active->kept = true;
                    ++kept;
                    if (active->worker && active->worker->running())
                        active->worker->send("stop");
                }
            if (kept)
                log(QStringLiteral("warning"),
                    QStringLiteral("the grace period (--grace %1 s) ended before %2 subtask(s) were handed back; they "
                                   "stay with this agent")
                        .arg(m_options.graceSeconds)
                        .arg(kept));
            // For the workers to write their checkpoints, within what is left of the budget.
            m_shutdownTimer.start(int(std::min<qint64>(kShutdownGraceMs, kLeaveMarginMs)));
            return checkFinished();
        }
        for (const auto& active : std::as_const(m_active))
            if (active->worker && active->worker->running()) {
                log(QStringLiteral("warning"),
                    QStringLiteral("the worker of lease %1 did not stop in time; killed (its last "
                                   "checkpoint is kept)")
                        .arg(active->record.leaseId.toString()));
                active->worker->kill();
            }
        checkFinished();
    });
}

AgentDaemon::~AgentDaemon()
{
    m_stop->stop();
    m_network->stop(); // before the client, the cache and the store it uses go away
    recordFetchedBytes(); // what a fetch cut short by the stop had already fetched
    for (const auto& active : std::as_const(m_active))
        delete active->worker;
}

void AgentDaemon::log(const QString& level, const QString& message)
{
    if (level == u"error")
        qCCritical(lcDaemon).noquote() << message;
    else if (level == u"warning")
        qCWarning(lcDaemon).noquote() << message;
    else
        qCInfo(lcDaemon).noquote() << message;
    QJsonObject event{{QStringLiteral("event"), QStringLiteral("log")},
                      {QStringLiteral("level"), level},
                      {QStringLiteral("message"), message},
                      {QStringLiteral("time_ms"), nowMs()}};
    m_recentLog.append(event);
    if (m_recentLog.size() > kRecentLogLines)
        m_recentLog.removeFirst();
    Q_EMIT controlEvent(event);
}

void AgentDaemon::start()
{
    const auto& report = m_cache->startupReport();
    if (report.deletedStrays || report.droppedRows || report.removedPartials)
        log(QStringLiteral("info"),
            QStringLiteral("cache checked: %1 altered or odd files deleted, %2 missing files "
                           "forgotten, %3 stale partial downloads removed")
                .arg(report.deletedStrays)
                .arg(report.droppedRows)
                .arg(report.removedPartials));
    log(QStringLiteral("info"),
        QStringLiteral("agent \"%1\" (%2) working for %3; up to %4 subtask(s) at once, %5 "
                       "thread(s) each%6")
            .arg(m_config.name, m_config.agentId, m_config.coordinatorUrl)
            .arg(m_options.maxTasks)
            .arg(m_options.threads)
            .arg(m_options.dedicated ? QStringLiteral(", dedicated") : QString()));
    if (!m_options.dedicated) {
        log(QStringLiteral("info"),
            QStringLiteral("desktop policy on: computing only as the preferences allow (idle source: %1)")
                .arg(m_options.idleSource));
    }
    m_desktop->start(); // the first decision, before any worker starts
    if (m_options.maxRuntimeSeconds > 0) {
        // Leave while the grace budget still fits in the runtime, so that nothing held is lost at its end.
        const double leaveAfter = std::max(0.0, m_options.maxRuntimeSeconds - m_options.graceSeconds);
        m_runtimeTimer.setSingleShot(true);
        connect(&m_runtimeTimer, &QTimer::timeout, this,
                [this] { leave(QStringLiteral("--max-runtime %1 s is up").arg(m_options.maxRuntimeSeconds)); });
        m_runtimeTimer.start(int(std::min(leaveAfter * 1000.0, 2.0e9)));
    }
    resumeUnfinished();
    updateState();
    scheduleLease(0);
    m_keepAlive.start();
}

void AgentDaemon::keepLeasesAlive()
{
    // Progress reports normally ride on the worker's progress events. A worker that sends none (paused, or
    // starved of CPU by the owner's own work, as SCHED_IDLE intends) still holds its lease for as long as the
    // lease was first given for (the job's deadline_seconds) since it last moved: a short pause costs the job
    // nothing, and work stalled for longer goes to another agent (a result from here is still accepted if it
    // comes first).
    const qint64 now = nowMs();
    for (const auto& active : std::as_const(m_active)) {
        if ((!active->worker && !active->startWhenAllowed) || !active->manifest ||
            now - active->lastReportMs < m_options.progressReportMs)
            continue;
        const qint64 holdMs = active->manifest->deadlineMs - active->manifest->issuedMs;
        const qint64 lastMoved = std::max(active->pausedSinceMs, active->lastProgressMs);
        if (now - lastMoved < holdMs)
            reportProgress(active->record.leaseId);
    }
}

void AgentDaemon::resumeUnfinished()
{
    auto unfinished = m_store->unfinished();
    if (!unfinished) {
        log(QStringLiteral("error"), unfinished.error());
        return;
    }
    QSet<QString> keep;
    for (const Subtask& subtask : *unfinished) {
        m_active.insert(subtask.leaseId, std::make_shared<Active>(subtask));
        keep.insert(subtask.leaseId.toString());
    }
    for (const QString& owner : m_cache->pinOwners())
        if (!keep.contains(owner))
            (void)m_cache->releaseOwner(owner);
    for (const Subtask& subtask : *unfinished) {
        auto manifest = checkStoredManifest(subtask);
        if (!manifest) {
            failSubtask(subtask.leaseId, QStringLiteral("verify"), manifest.error());
            continue;
        }
        auto& active = *m_active.value(subtask.leaseId);
        active.manifest = *manifest;
        for (const ManifestFile& file : manifest->files)
            (void)m_cache->pin(file.sha256, subtask.leaseId.toString());
        // An upload asks the coordinator anyway; the other steps check the lease is still open first.
        active.needsLeaseCheck = subtask.state != SubtaskState::Uploading;
        log(QStringLiteral("info"),
            QStringLiteral("resuming lease %1 (job \"%2\", epoch %3, shard %4) from state %5")
                .arg(subtask.leaseId.toString(), manifest->jobName)
                .arg(manifest->epoch)
                .arg(manifest->shard)
                .arg(subtaskStateName(subtask.state)));
        continueSubtask(subtask.leaseId);
    }
}

// ---- leasing ---------------------------------------------------------------------------------------------

void AgentDaemon::scheduleLease(qint64 delayMs)
{
    if (m_stopping || m_finishing || !m_fatal.isEmpty())
        return;
    if (m_leaseTimer.isActive() && m_leaseTimer.remainingTime() <= delayMs)
        return;
    m_leaseTimer.start(int(std::clamp<qint64>(delayMs, 0, 24 * 3600 * 1000)));
    m_nextTryMs = nowMs() + delayMs;
}

qint64 AgentDaemon::backoffMs(int failures) const
{
    // Full jitter over an exponential ceiling: 1 s, 2 s, 4 s, ... up to maxBackoffMs.
    const qint64 ceiling = std::min<qint64>(m_options.maxBackoffMs, 1000LL << std::min(failures, 16));
    return 500 + qint64(QRandomGenerator::global()->bounded(double(ceiling)));
}

void AgentDaemon::requestLease()
{
    if (m_leaseInFlight || m_stopping || m_finishing || !computeAllowed() || !m_fatal.isEmpty())
        return;
    const int free = taskSlots() - int(m_active.size());
    if (free <= 0)
        return;
    m_leaseInFlight = true;
    const QStringList held = m_cache->heldHashes();
    // The machine as the coordinator should see it (cores, memory, GPU), read once, and how this agent runs.
    if (m_hardware.isEmpty())
        m_hardware = machineHardware();
    QJsonObject capabilities = m_hardware;
    capabilities.insert(QStringLiteral("threads"), m_options.threads);
    capabilities.insert(QStringLiteral("device"), workerDevice());
    capabilities.insert(QStringLiteral("dedicated"), m_options.dedicated);
    capabilities.insert(QStringLiteral("kind"), !m_options.kind.isEmpty() ? m_options.kind
                                                : m_options.dedicated    ? QStringLiteral("dedicated")
                                                                          : QStringLiteral("desktop"));
    onNetwork([this, held, free, capabilities] { return m_client->lease(held, free, capabilities); },
              [this](Result<LeaseReply> reply) {
                  if (m_stopping) {
                      m_leaseInFlight = false;
                      return;
                  }
                  if (!reply) {
                      m_leaseInFlight = false;
                      if (CoordinatorClient::isCredentialRefusal(reply.error()))
                          return refuseCredentials(reply.error());
                      coordinatorUnreachable(reply.error());
                      scheduleLease(backoffMs(++m_leaseFailures));
                      updateState();
                      return;
                  }
                  m_leaseFailures = 0;
                  coordinatorReached();
                  // A key this agent failed to follow is tried again only after a while: a coordinator (or
                  // whoever answers for it) that names one in every reply does not make it fetch each time.
                  const bool knownUntrusted = reply->signingKey == m_untrustedKey && nowMs() < m_untrustedUntilMs;
                  if (!reply->signingKey.isEmpty() && reply->signingKey != m_keys.current().fingerprint() &&
                      !knownUntrusted)
                      return followSigningKey(*reply); // still in flight: no second request meanwhile
                  m_leaseInFlight = false;
                  takeLeaseReply(*reply);
              });
}

void AgentDaemon::followSigningKey(const LeaseReply& reply)
{
    onNetwork([this] { return m_client->signingKeys(); },
              [this, reply](Result<SigningKeysReply> keys) {
                  m_leaseInFlight = false;
                  if (m_stopping)
                      return;
                  // Whatever happens here, the reply is taken: its manifests verify only with the key pinned in
                  // the end, so a rotation that could not be followed makes them fail as a key change would.
                  // A key that cannot be followed is not tried again for a while (a network failure is).
                  const auto distrust = [this, &reply] {
                      m_untrustedKey = reply.signingKey;
                      m_untrustedUntilMs = nowMs() + kRetryUntrustedKeyMs;
                  };
                  if (!keys) {
                      log(QStringLiteral("warning"), keys.error());
                  } else if (keys->fingerprint != reply.signingKey) {
                      distrust();
                      log(QStringLiteral("warning"),
                          QStringLiteral("the coordinator's lease reply names signing key %1 but its key list names "
                                         "%2; the pinned key stays %3")
                              .arg(reply.signingKey, keys->fingerprint.left(64), m_keys.current().fingerprint()));
                  } else {
                      const QString before = m_keys.current().fingerprint();
                      auto followed = m_keys.follow(keys->rotations, reply.signingKey);
                      if (!followed) {
                          distrust();
                          log(QStringLiteral("error"),
                              QStringLiteral("the coordinator signs with key %1, which this agent cannot trust: %2. "
                                             "Its manifests are refused; if its operator replaced the key without "
                                             "a rotation, enroll the agent again")
                                  .arg(reply.signingKey, followed.error()));
                      }
                      if (followed && *followed > 0) {
                          log(QStringLiteral("info"),
                              QStringLiteral("the coordinator rotated its signing key: now pinned %1 (was %2, %3 "
                                             "signed rotation(s) followed)")
                                  .arg(m_keys.current().fingerprint(), before)
                                  .arg(*followed));
                          Q_EMIT controlEvent(QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                                                          {QStringLiteral("signing_key"),
                                                           m_keys.current().fingerprint()}});
                      }
                  }
                  takeLeaseReply(reply);
              });
}

void AgentDaemon::takeLeaseReply(const LeaseReply& reply)
{
    if (reply.quarantined != m_quarantined) {
        m_quarantined = reply.quarantined;
        if (!m_quarantined.isEmpty())
            log(QStringLiteral("error"), QStringLiteral("the coordinator gives this agent no work: %1").arg(m_quarantined));
        else
            log(QStringLiteral("info"), QStringLiteral("the coordinator gives this agent work again"));
        Q_EMIT controlEvent(QJsonObject{
            {QStringLiteral("event"), QStringLiteral("coordinator")},
            {QStringLiteral("quarantined"),
             m_quarantined.isEmpty() ? QJsonValue(QJsonValue::Null) : QJsonValue(m_quarantined)}});
    }
    // A task refused here (malformed, an id that is not one, a lease sent again) counts as a failure, so a
    // coordinator that keeps sending such replies is not asked again at once.
    QString refusal;
    for (const QString& reason : reply.refused) {
        log(QStringLiteral("warning"), reason);
        refusal = reason;
    }
    for (const LeasedTask& task : reply.tasks)
        if (auto taken = accept(task); !taken)
            refusal = taken.error();
    if (!refusal.isEmpty()) {
        m_lastFailure = refusal;
        ++m_failureStreak;
    }
    if (reply.tasks.isEmpty())
        noteNoWork();
    else
        m_noWorkSinceMs = -1;
    if (reply.tasks.isEmpty() && reply.refused.isEmpty())
        // Batch mode asks again by the end of its idle wait at the latest, to stop on time.
        scheduleLease(std::min<qint64>(std::max<qint64>(1, reply.retryAfterSeconds) * 1000,
                                       m_options.untilEmpty ? qint64(m_options.idleExitSeconds * 1000) + 100
                                                            : std::numeric_limits<qint64>::max()));
    else
        // Fill the remaining slots, if any; not at once after refusing work.
        scheduleLease(m_failureStreak > 0 ? backoffMs(m_failureStreak) : 0);
    updateState();
}

Result<TaskManifest> AgentDaemon::checkStoredManifest(const Subtask& record) const
{
    const ManifestExpectation expected{m_config.agentId, record.leaseId, m_config.coordinatorUrl};
    auto manifest = checkManifest(m_keys.current(), record.manifest, record.signature, expected);
    if (manifest)
        return manifest;
    for (const VerifyKey& former : m_keys.all().mid(1))
        if (auto older = checkManifest(former, record.manifest, record.signature, expected))
            return older;
    return manifest;
}

Status AgentDaemon::accept(const LeasedTask& task)
{
    // A lease this agent holds, or held once, is a reply sent again (by a broken front end, or by someone
    // between the agent and its coordinator replaying what it saw): nothing of it is recorded, reported to
    // the coordinator, fetched or run again. Its folder and its record belong to the first copy.
    auto known = m_store->find(task.leaseId);
    if (!known) {
        log(QStringLiteral("error"), known.error());
        return fail(known.error());
    }
    if (*known || m_active.contains(task.leaseId)) {
        const QString reason =
            QStringLiteral("lease %1 was refused: this agent has had it before (%2); a lease sent again is "
                           "never run twice")
                .arg(task.leaseId.toString(),
                     *known ? subtaskStateName((*known)->state) : QStringLiteral("in progress"));
        log(QStringLiteral("warning"), reason);
        return fail(reason);
    }
    Subtask record{task.leaseId};
    record.manifest = task.manifest;
    record.signature = task.signature.toLatin1();
    record.deadlineMs = task.deadlineMs;
    record.state = SubtaskState::Leased;
    if (auto s = m_store->add(record); !s) {
        log(QStringLiteral("error"), s.error());
        return s;
    }
    auto active = std::make_shared<Active>(record);
    m_active.insert(record.leaseId, active);
    auto manifest = checkManifest(m_keys.current(), record.manifest, record.signature,
                                  {m_config.agentId, record.leaseId, m_config.coordinatorUrl});
    if (!manifest) {
        failSubtask(record.leaseId, QStringLiteral("verify"), manifest.error());
        return {};
    }
    // Only a new lease: a resumed one's deadline has moved on with its progress reports since it was signed.
    if (auto fresh = checkManifestFresh(*manifest, nowMs()); !fresh) {
        failSubtask(record.leaseId, QStringLiteral("verify"), fresh.error());
        return {};
    }
    active->manifest = *manifest;
    active->record.deadlineMs = manifest->deadlineMs;
    (void)m_store->setDeadline(record.leaseId, manifest->deadlineMs);
    log(QStringLiteral("info"),
        QStringLiteral("leased %1: job \"%2\" epoch %3 shard %4 (%5 samples, weights v%6)")
            .arg(record.leaseId.toString(), manifest->jobName)
            .arg(manifest->epoch)
            .arg(manifest->shard)
            .arg(manifest->samples)
            .arg(manifest->baseVersion));
    publishSubtask(*active);
    continueSubtask(record.leaseId);
    return {};
}

QString AgentDaemon::taskFolder(const LeaseId& leaseId) const
{
    // 32 hex digits by its type: always one folder directly under tasks/.
    return m_options.dataDir + QStringLiteral("/tasks/") + leaseId.toString();
}

// ---- outcomes ---------------------------------------------------------------------------------------------

void AgentDaemon::failSubtask(const LeaseId& leaseId, const QString& stage, const QString& reason)
{
    log(QStringLiteral("error"), QStringLiteral("lease %1 failed: %2").arg(leaseId.toString(), reason));
    const Status s = m_store->transaction([&]() -> Status {
        if (auto st = m_store->setState(leaseId, SubtaskState::Failed, reason); !st)
            return st;
        SubtaskTotals add;
        add.subtasksFailed = 1;
        return m_store->addTotals(add);
    });
    if (!s)
        log(QStringLiteral("error"), s.error());
    if (auto active = m_active.value(leaseId)) {
        active->record.state = SubtaskState::Failed;
        active->record.error = reason;
        publishSubtask(*active, reason);
    }
    // Tell the coordinator, so that the workunit goes to another agent now rather than at the lease's
    // deadline. A refused result closed the lease already (stage empty): nothing to report.
    if (!stage.isEmpty() && !m_stopping)
        onNetwork([this, leaseId, stage, reason] { return m_client->reportFailure(leaseId, stage, reason); },
                  [this, leaseId](Result<bool> reported) {
                      if (!reported)
                          log(QStringLiteral("warning"),
                              QStringLiteral("could not report the failure of lease %1 to the "
                                             "coordinator (%2); the lease will expire there")
                                  .arg(leaseId.toString(), reported.error()));
                  });
    // A coordinator that keeps handing out work this agent refuses is not asked again at once.
    m_lastFailure = reason;
    release(leaseId, backoffMs(++m_failureStreak));
}

void AgentDaemon::dropSubtask(const LeaseId& leaseId, const QString& reason)
{
    log(QStringLiteral("info"), QStringLiteral("lease %1 dropped: %2").arg(leaseId.toString(), reason));
    if (auto s = m_store->setState(leaseId, SubtaskState::Dropped, reason); !s)
        log(QStringLiteral("error"), s.error());
    if (auto active = m_active.value(leaseId)) {
        active->record.state = SubtaskState::Dropped;
        publishSubtask(*active, reason);
    }
    release(leaseId);
}

void AgentDaemon::finishSubtask(const LeaseId& leaseId)
{
    m_failureStreak = 0;
    if (auto active = m_active.value(leaseId))
        publishSubtask(*active);
    release(leaseId);
}

void AgentDaemon::release(const LeaseId& leaseId, qint64 leaseDelayMs)
{
    auto active = m_active.take(leaseId);
    if (active && active->worker) {
        active->worker->disconnect(this);
        active->worker->kill();
        active->worker->deleteLater();
    }
    (void)m_cache->releaseOwner(leaseId.toString());
    const QString dir = taskFolder(leaseId);
    if (QFileInfo::exists(dir))
        QDir(dir).removeRecursively();
    updateState();
    checkFinished();
    scheduleLease(leaseDelayMs);
}

bool AgentDaemon::setState(const LeaseId& leaseId, SubtaskState state, const QString& error)
{
    auto active = m_active.value(leaseId);
    if (auto s = m_store->setState(leaseId, state, error); !s) {
        log(QStringLiteral("error"), s.error());
        return false;
    }
    if (active)
        active->record.state = state;
    return true;
}

// ---- the coordinator's reachability and credentials -------------------------------------------------------

void AgentDaemon::coordinatorReached()
{
    if (m_reachable)
        return;
    m_reachable = true;
    m_lastNetworkError.clear();
    log(QStringLiteral("info"),
        QStringLiteral("the coordinator %1 answers again").arg(m_config.coordinatorUrl));
    Q_EMIT controlEvent(QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                                    {QStringLiteral("reachable"), true},
                                    {QStringLiteral("last_error"), QJsonValue::Null}});
    // Steps that were waiting for it go on now rather than at their backoff's end.
    for (const auto& active : std::as_const(m_active))
        if (!active->busy && !active->worker)
            QTimer::singleShot(0, this, [this, lease = active->record.leaseId] { continueSubtask(lease); });
}

void AgentDaemon::coordinatorUnreachable(const QString& error)
{
    const bool changed = m_reachable || m_lastNetworkError != error;
    m_reachable = false;
    m_lastNetworkError = error;
    if (changed)
        Q_EMIT controlEvent(QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                                        {QStringLiteral("reachable"), false},
                                        {QStringLiteral("last_error"), error}});
}

void AgentDaemon::refuseCredentials(const QString& error)
{
    if (m_fatal.isEmpty())
        log(QStringLiteral("error"), error);
    m_fatal = error;
    m_leaseTimer.stop();
    for (const auto& active : std::as_const(m_active))
        if (active->worker && active->worker->running())
            active->worker->send("stop"); // keep the work: an operator may restore the agent
    updateState();
}

} // namespace gleaner::agent
