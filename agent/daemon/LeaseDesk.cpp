#include "daemon/LeaseDesk.h"

#include "cache/FileCache.h"
#include "daemon/Backoff.h"
#include "daemon/EventFeed.h"
#include "daemon/NetworkHop.h"
#include "daemon/SubtaskTable.h"
#include "net/CoordinatorClient.h"

#include <algorithm>
#include <limits>

namespace gleaner::agent {

LeaseDesk::LeaseDesk(const AgentConfig& config, PinnedKeys& keys, CoordinatorClient& client,
                     NetworkHop& network, FileCache& cache, SubtaskStore& store, SubtaskTable& subtasks,
                     EventFeed& feed, FailureStreak& failures, const Clock& clock, Settings settings,
                     Hooks hooks)
    : m_config(config), m_keys(keys), m_client(client), m_network(network), m_cache(cache), m_store(store),
      m_subtasks(subtasks), m_feed(feed), m_failures(failures), m_clock(clock), m_settings(settings),
      m_hooks(std::move(hooks))
{
    m_timer.setSingleShot(true);
    QObject::connect(&m_timer, &QTimer::timeout, &m_timer, [this] { request(); });
}

void LeaseDesk::schedule(qint64 delayMs)
{
    if (m_hooks.closed())
        return;
    if (m_timer.isActive() && m_timer.remainingTime() <= delayMs)
        return;
    m_timer.start(int(std::clamp<qint64>(delayMs, 0, 24 * 3600 * 1000)));
    m_nextTryMs = m_clock.nowMs() + delayMs;
}

void LeaseDesk::request()
{
    if (m_inFlight || m_hooks.closed())
        return;
    const int free = m_hooks.freeSlots();
    if (free <= 0)
        return;
    m_inFlight = true;
    const QStringList held = m_cache.heldHashes();
    const QJsonObject capabilities = m_hooks.capabilities();
    m_network.run([this, held, free, capabilities] { return m_client.lease(held, free, capabilities); },
                  [this](Result<LeaseReply> reply) {
                      if (m_hooks.stopping()) {
                          m_inFlight = false;
                          return;
                      }
                      if (!reply) {
                          m_inFlight = false;
                          if (CoordinatorClient::isCredentialRefusal(reply.error()))
                              return m_hooks.credentialsRefused(reply.error());
                          m_hooks.unreachable(reply.error());
                          schedule(backoffMs(++m_requestFailures, m_settings.maxBackoffMs));
                          m_hooks.stateChanged();
                          return;
                      }
                      m_requestFailures = 0;
                      m_hooks.reached();
                      // A key this agent failed to follow is tried again only after a while: a coordinator
                      // (or whoever answers for it) that names one in every reply does not make it fetch
                      // each time.
                      const bool knownUntrusted =
                          reply->signingKey == m_untrustedKey && m_clock.nowMs() < m_untrustedUntilMs;
                      if (!reply->signingKey.isEmpty() &&
                          reply->signingKey != m_keys.current().fingerprint() && !knownUntrusted)
                          return followSigningKey(*reply); // still in flight: no second request meanwhile
                      m_inFlight = false;
                      takeReply(*reply);
                  });
}

void LeaseDesk::followSigningKey(const LeaseReply& reply)
{
    m_network.run(
        [this] { return m_client.signingKeys(); },
        [this, reply](Result<SigningKeysReply> keys) {
            m_inFlight = false;
            if (m_hooks.stopping())
                return;
            // Whatever happens here, the reply is taken: its manifests verify only with the key pinned in
            // the end, so a rotation that could not be followed makes them fail as a key change would.
            // A key that cannot be followed is not tried again for a while (a network failure is).
            const auto distrust = [this, &reply] {
                m_untrustedKey = reply.signingKey;
                m_untrustedUntilMs = m_clock.nowMs() + kRetryUntrustedKeyMs;
            };
            if (!keys) {
                m_feed.log(QStringLiteral("warning"), keys.error());
            } else if (keys->fingerprint != reply.signingKey) {
                distrust();
                m_feed.log(
                    QStringLiteral("warning"),
                    QStringLiteral(
                        "the coordinator's lease reply names signing key %1 but its key list names "
                        "%2; the pinned key stays %3")
                        .arg(reply.signingKey, keys->fingerprint.left(64), m_keys.current().fingerprint()));
            } else {
                const QString before = m_keys.current().fingerprint();
                auto followed = m_keys.follow(keys->rotations, reply.signingKey);
                if (!followed) {
                    distrust();
                    m_feed.log(QStringLiteral("error"),
                               QStringLiteral(
                                   "the coordinator signs with key %1, which this agent cannot trust: %2. "
                                   "Its manifests are refused; if its operator replaced the key without "
                                   "a rotation, enroll the agent again")
                                   .arg(reply.signingKey, followed.error()));
                }
                if (followed && *followed > 0) {
                    m_feed.log(
                        QStringLiteral("info"),
                        QStringLiteral("the coordinator rotated its signing key: now pinned %1 (was %2, %3 "
                                       "signed rotation(s) followed)")
                            .arg(m_keys.current().fingerprint(), before)
                            .arg(*followed));
                    m_feed.publish(
                        QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                                    {QStringLiteral("signing_key"), m_keys.current().fingerprint()}});
                }
            }
            takeReply(reply);
        });
}

void LeaseDesk::takeReply(const LeaseReply& reply)
{
    if (reply.quarantined != m_quarantined) {
        m_quarantined = reply.quarantined;
        if (!m_quarantined.isEmpty())
            m_feed.log(QStringLiteral("error"),
                       QStringLiteral("the coordinator gives this agent no work: %1").arg(m_quarantined));
        else
            m_feed.log(QStringLiteral("info"), QStringLiteral("the coordinator gives this agent work again"));
        m_feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("coordinator")},
                                   {QStringLiteral("quarantined"), m_quarantined.isEmpty()
                                                                       ? QJsonValue(QJsonValue::Null)
                                                                       : QJsonValue(m_quarantined)}});
    }
    // For a moment only (the coordinator folds in what it received): said once, not at every ask.
    if (!reply.heldBack.isEmpty() && m_heldBack.isEmpty())
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("the coordinator holds new work back: %1").arg(reply.heldBack));
    m_heldBack = reply.heldBack;
    // The job has the agents it can use: said once, until work comes or the reason changes. A batch agent
    // (--until-empty) counts it as time without work: it is not needed there now.
    if (!reply.atWidth.isEmpty() && reply.atWidth != m_atWidth)
        m_feed.log(QStringLiteral("info"),
                   QStringLiteral("no work for this agent now: %1").arg(reply.atWidth));
    m_atWidth = reply.tasks.isEmpty() ? reply.atWidth : QString();
    // A task refused here (malformed, an id that is not one, a lease sent again) counts as a failure, so a
    // coordinator that keeps sending such replies is not asked again at once.
    QString refusal;
    for (const QString& reason : reply.refused) {
        m_feed.log(QStringLiteral("warning"), reason);
        refusal = reason;
    }
    for (const LeasedTask& task : reply.tasks)
        if (auto taken = accept(task); !taken)
            refusal = taken.error();
    if (!refusal.isEmpty())
        m_failures.failed(refusal);
    // Held back, the job is not done: a batch agent (--until-empty) does not count it as time without work.
    m_hooks.answered(reply.tasks.isEmpty() && reply.heldBack.isEmpty());
    if (reply.tasks.isEmpty() && reply.refused.isEmpty())
        // Batch mode asks again by the end of its idle wait at the latest, to stop on time.
        schedule(std::min<qint64>(std::max<qint64>(1, reply.retryAfterSeconds) * 1000,
                                  m_settings.untilEmpty ? qint64(m_settings.idleExitSeconds * 1000) + 100
                                                        : std::numeric_limits<qint64>::max()));
    else
        // Fill the remaining slots, if any; not at once after refusing work.
        schedule(m_failures.count > 0 ? backoffMs(m_failures.count, m_settings.maxBackoffMs) : 0);
    m_hooks.stateChanged();
}

Result<TaskManifest> LeaseDesk::checkStoredManifest(const Subtask& record) const
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

Status LeaseDesk::accept(const LeasedTask& task)
{
    // A lease this agent holds, or held once, is a reply sent again (by a broken front end, or by someone
    // between the agent and its coordinator replaying what it saw): nothing of it is recorded, reported to
    // the coordinator, fetched or run again. Its folder and its record belong to the first copy.
    auto known = m_store.find(task.leaseId);
    if (!known) {
        m_feed.log(QStringLiteral("error"), known.error());
        return fail(known.error());
    }
    if (*known || m_subtasks.contains(task.leaseId)) {
        const QString reason =
            QStringLiteral("lease %1 was refused: this agent has had it before (%2); a lease sent again is "
                           "never run twice")
                .arg(task.leaseId.toString(),
                     *known ? subtaskStateName((*known)->state) : QStringLiteral("in progress"));
        m_feed.log(QStringLiteral("warning"), reason);
        return fail(reason);
    }
    Subtask record{task.leaseId};
    record.manifest = task.manifest;
    record.signature = task.signature.toLatin1();
    record.deadlineMs = task.deadlineMs;
    record.state = SubtaskState::Leased;
    if (auto s = m_store.add(record); !s) {
        m_feed.log(QStringLiteral("error"), s.error());
        return s;
    }
    auto active = std::make_shared<ActiveSubtask>(record);
    m_subtasks.insert(record.leaseId, active);
    auto manifest = checkManifest(m_keys.current(), record.manifest, record.signature,
                                  {m_config.agentId, record.leaseId, m_config.coordinatorUrl});
    if (!manifest) {
        m_hooks.failSubtask(record.leaseId, QStringLiteral("verify"), manifest.error());
        return {};
    }
    // Only a new lease: a resumed one's deadline has moved on with its progress reports since it was signed.
    if (auto fresh = checkManifestFresh(*manifest, m_clock.nowMs()); !fresh) {
        m_hooks.failSubtask(record.leaseId, QStringLiteral("verify"), fresh.error());
        return {};
    }
    active->manifest = *manifest;
    active->record.deadlineMs = manifest->deadlineMs;
    (void)m_store.setDeadline(record.leaseId, manifest->deadlineMs);
    m_feed.log(QStringLiteral("info"),
               QStringLiteral("leased %1: job \"%2\" epoch %3 shard %4 (%5 samples, weights v%6)")
                   .arg(record.leaseId.toString(), manifest->jobName)
                   .arg(manifest->epoch)
                   .arg(manifest->shard)
                   .arg(manifest->samples)
                   .arg(manifest->baseVersion));
    m_hooks.taken(record.leaseId);
    return {};
}

} // namespace gleaner::agent
