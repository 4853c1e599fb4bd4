#include "daemon/AgentStatus.h"

#include "config/AgentConfig.h"
#include "config/PinnedKeys.h"
#include "daemon/ActiveSubtask.h"
#include "daemon/Backoff.h"
#include "daemon/Departure.h"
#include "daemon/EventFeed.h"
#include "daemon/LeaseDesk.h"
#include "daemon/Lifecycle.h"
#include "daemon/MachineGate.h"
#include "daemon/Reachability.h"
#include "daemon/SubtaskTable.h"

#include <QDateTime>
#include <QJsonArray>
#include <QSet>

namespace gleaner::agent {

namespace {
// Subtasks failed in a row after which the agent's state is "error" (a wrong pinned key, a broken worker).
constexpr int kFailuresBeforeError = 3;
} // namespace

void AgentStatus::update()
{
    int training = 0, pausedWorkers = 0;
    for (const auto& active : std::as_const(m_in.subtasks))
        if (active->worker) {
            ++training;
            pausedWorkers += active->workerPaused ? 1 : 0;
        }
    QString state, reason, code;
    if (m_in.lifecycle.stopping) {
        state = QStringLiteral("stopped");
        code = QStringLiteral("stopping");
        reason = m_in.lifecycle.leaving
                     ? QStringLiteral("Leaving (%1): handing the subtasks back to the coordinator")
                           .arg(m_in.departure.leaveReason())
                 : m_in.subtasks.isEmpty()
                     ? QStringLiteral("Stopping")
                     : QStringLiteral("Stopping: the subtasks are kept for the next start");
    } else if (!m_in.lifecycle.fatal.isEmpty()) {
        state = QStringLiteral("error");
        code = QStringLiteral("error");
        reason = QStringLiteral("Stopped: %1").arg(m_in.lifecycle.fatal);
    } else if (m_in.failures.count >= kFailuresBeforeError && !m_in.failures.last.isEmpty()) {
        // Still leasing (with backoff): the cause may be fixed on the coordinator's side.
        state = QStringLiteral("error");
        code = QStringLiteral("error");
        reason = QStringLiteral("The last %1 subtasks failed; the last one: %2")
                     .arg(m_in.failures.count)
                     .arg(m_in.failures.last);
    } else if (m_in.gate.paused()) {
        state = QStringLiteral("paused");
        code = QStringLiteral("paused_by_user");
        reason = pausedWorkers < training
                     ? QStringLiteral("Pausing %1 subtask(s)").arg(training - pausedWorkers)
                     : QStringLiteral("Paused by you");
    } else if (m_in.gate.snoozed()) {
        state = QStringLiteral("paused");
        code = QStringLiteral("snoozed");
        reason = QStringLiteral("Snoozed until %1; resuming by itself then")
                     .arg(QDateTime::fromMSecsSinceEpoch(m_in.gate.snoozeUntilMs())
                              .toString(QStringLiteral("HH:mm")));
    } else if (m_in.lifecycle.finishing) {
        state = QStringLiteral("finishing");
        code = QStringLiteral("finishing");
        reason = QStringLiteral("Finishing %1 subtask(s), then stopping").arg(m_in.subtasks.size());
        if (auto held = m_in.gate.policyState())
            reason += QStringLiteral("; on hold now: ") + std::get<1>(*held);
    } else if (auto held = m_in.gate.policyState()) {
        std::tie(state, reason, code) = *held;
    } else if (training > 0) {
        state = QStringLiteral("training");
        code = QStringLiteral("computing");
        reason = QStringLiteral("Training %1 subtask(s)").arg(training);
        const QString why = m_in.gate.decisionReason();
        if (!m_in.dedicated && why.startsWith(u"Computing: "))
            reason += QStringLiteral(": ") + why.mid(11);
    } else if (!m_in.reachability.reachable()) {
        state = QStringLiteral("offline");
        code = QStringLiteral("offline");
        reason = QStringLiteral("Cannot reach the coordinator %1: %2; next try in %3")
                     .arg(m_in.config.coordinatorUrl, m_in.reachability.lastError(),
                          spokenDuration(std::max<qint64>(0, m_in.leasing.nextTryMs() - m_in.clock.nowMs())));
    } else if (!m_in.subtasks.isEmpty()) {
        state = QStringLiteral("waiting");
        code = QStringLiteral("preparing");
        reason = QStringLiteral("Preparing %1 subtask(s)").arg(m_in.subtasks.size());
    } else if (!m_in.leasing.quarantined().isEmpty()) {
        // The coordinator's admin must act; the agent keeps asking, rarely, and says why it has nothing.
        state = QStringLiteral("waiting");
        code = QStringLiteral("quarantined");
        reason =
            QStringLiteral("The coordinator gives this agent no work: %1").arg(m_in.leasing.quarantined());
    } else {
        state = QStringLiteral("waiting");
        code = QStringLiteral("no_work");
        reason = QStringLiteral("Waiting for work from %1").arg(m_in.config.coordinatorUrl);
    }
    // The offline reason carries a countdown; only a change of state or of the reason's kind is an event. The
    // desktop's reasons count too ("you were active 40 s ago"): the tray's tooltip follows them, but the log
    // takes a line only when what the reason says changes, not its clock (the idle time in "Training 2
    // subtask(s): you have been idle for 5 min", the percentage of a busy CPU).
    const bool changed = state != m_state || (state != u"offline" && reason != m_reason);
    static const QSet<QString> ticking{QStringLiteral("idle_wait"), QStringLiteral("user_active"),
                                       QStringLiteral("cpu_busy"), QStringLiteral("offline")};
    const QString logKey = code == u"computing"     ? reason.section(QStringLiteral(": "), 0, 0)
                           : code == u"finishing"   ? reason.section(QStringLiteral("; on hold now"), 0, 0)
                           : ticking.contains(code) ? code
                                                    : reason;
    const bool worthLogging = state != m_state || logKey != m_loggedReason;
    m_state = state;
    m_reason = reason;
    m_reasonCode = code;
    if (worthLogging) {
        m_loggedReason = logKey;
        m_in.feed.log(QStringLiteral("info"), reason);
    }
    if (changed)
        m_in.feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("state")},
                                      {QStringLiteral("state"), state},
                                      {QStringLiteral("reason"), reason},
                                      {QStringLiteral("reason_code"), code}});
}

void AgentStatus::publish(const ActiveSubtask& active, const QString& error) const
{
    QJsonObject event{{QStringLiteral("event"), QStringLiteral("subtask")},
                      {QStringLiteral("lease_id"), active.record.leaseId.toString()},
                      {QStringLiteral("state"), active.shownState()}};
    if (active.manifest) {
        event.insert(QStringLiteral("job"), QJsonObject{{QStringLiteral("id"), active.manifest->jobId},
                                                        {QStringLiteral("name"), active.manifest->jobName}});
        event.insert(QStringLiteral("epoch"), active.manifest->epoch);
        event.insert(QStringLiteral("shard"), active.manifest->shard);
    }
    if (!error.isEmpty())
        event.insert(QStringLiteral("error"), error);
    m_in.feed.publish(event);
}

QJsonObject AgentStatus::toJson() const
{
    QJsonArray subtasks;
    const qint64 now = m_in.clock.nowMs();
    for (const auto& active : std::as_const(m_in.subtasks)) {
        QJsonObject s{{QStringLiteral("lease_id"), active->record.leaseId.toString()},
                      {QStringLiteral("state"), active->shownState()},
                      {QStringLiteral("step"), active->step},
                      {QStringLiteral("of"), active->of},
                      {QStringLiteral("loss"), active->loss},
                      {QStringLiteral("samples_per_s"), active->samplesPerSecond},
                      {QStringLiteral("deadline_ms"), active->record.deadlineMs}};
        const qint64 eta = active->etaSeconds(now);
        s.insert(QStringLiteral("eta_seconds"), eta >= 0 ? QJsonValue(eta) : QJsonValue(QJsonValue::Null));
        if (active->manifest) {
            s.insert(QStringLiteral("job"), QJsonObject{{QStringLiteral("id"), active->manifest->jobId},
                                                        {QStringLiteral("name"), active->manifest->jobName}});
            s.insert(QStringLiteral("epoch"), active->manifest->epoch);
            s.insert(QStringLiteral("shard"), active->manifest->shard);
        }
        subtasks.append(s);
    }
    QJsonArray recentLog;
    for (const QJsonObject& line : m_in.feed.recentLog())
        recentLog.append(line);
    const QJsonObject policy = m_in.gate.statusObject();
    QJsonObject totals;
    if (auto t = m_in.store.totals()) {
        totals = QJsonObject{{QStringLiteral("subtasks_done"), t->subtasksDone},
                             {QStringLiteral("subtasks_failed"), t->subtasksFailed},
                             {QStringLiteral("samples"), t->samples},
                             {QStringLiteral("train_seconds"), t->trainSeconds},
                             {QStringLiteral("uploaded_bytes"), t->uploadedBytes},
                             {QStringLiteral("downloaded_bytes"), t->downloadedBytes}};
    }
    return QJsonObject{
        {QStringLiteral("state"), m_state},
        {QStringLiteral("reason"), m_reason},
        {QStringLiteral("reason_code"), m_reasonCode},
        {QStringLiteral("agent_id"), m_in.config.agentId},
        {QStringLiteral("name"), m_in.config.name},
        {QStringLiteral("data_dir"), m_in.dataDir},
        {QStringLiteral("dedicated"), m_in.dedicated},
        {QStringLiteral("coordinator"),
         QJsonObject{{QStringLiteral("url"), m_in.config.coordinatorUrl},
                     {QStringLiteral("reachable"), m_in.reachability.reachable()},
                     {QStringLiteral("last_error"), m_in.reachability.lastError().isEmpty()
                                                        ? QJsonValue(QJsonValue::Null)
                                                        : QJsonValue(m_in.reachability.lastError())},
                     {QStringLiteral("next_try_ms"), m_in.leasing.due() ? QJsonValue(m_in.leasing.nextTryMs())
                                                                        : QJsonValue(QJsonValue::Null)},
                     {QStringLiteral("signing_key"), m_in.keys.current().fingerprint()},
                     {QStringLiteral("quarantined"), m_in.leasing.quarantined().isEmpty()
                                                         ? QJsonValue(QJsonValue::Null)
                                                         : QJsonValue(m_in.leasing.quarantined())}}},
        {QStringLiteral("max_tasks"), m_in.maxTasks},
        {QStringLiteral("threads"), m_in.gate.limits().threads},
        {QStringLiteral("subtasks"), subtasks},
        {QStringLiteral("totals"), totals},
        {QStringLiteral("policy"), policy},
        {QStringLiteral("gpu"), m_gpu.isEmpty() ? QJsonValue(QJsonValue::Null) : QJsonValue(m_gpu)},
        {QStringLiteral("sandbox"), m_sandbox.toJson()},
        {QStringLiteral("log"), recentLog},
    };
}

} // namespace gleaner::agent
