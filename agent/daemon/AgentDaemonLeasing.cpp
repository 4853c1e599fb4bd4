// AgentDaemon: leasing. Asking the coordinator for work when there are free slots and the computer may be used,
// following its signing key when a reply names another, and taking each leased task on (its manifest checked,
// recorded before anything of it is fetched). See AgentDaemon.h.
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "net/CoordinatorClient.h"

#include <QRandomGenerator>

#include <algorithm>
#include <limits>

namespace gleaner::agent {

using namespace daemon_detail;

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
    // The machine as the coordinator should see it (read at start), and how this agent runs.
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
    // For a moment only (the coordinator folds in what it received): said once, not at every ask.
    if (!reply.heldBack.isEmpty() && m_heldBack.isEmpty())
        log(QStringLiteral("info"),
            QStringLiteral("the coordinator holds new work back: %1").arg(reply.heldBack));
    m_heldBack = reply.heldBack;
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
    // Held back, the job is not done: a batch agent (--until-empty) does not count it as time without work.
    if (reply.tasks.isEmpty() && reply.heldBack.isEmpty())
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

} // namespace gleaner::agent
