// The daemon's state as people and programs see it (the state and its reason, the status object, the subtask
// events), its control requests, and its shutdown. See AgentDaemon.h.

#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "daemon/StopSignal.h"

#include <QDateTime>
#include <QJsonArray>
#include <QSet>

namespace gleaner::agent {

using namespace daemon_detail;

void AgentDaemon::updateState()
{
    int training = 0, pausedWorkers = 0;
    for (const auto& active : std::as_const(m_active))
        if (active->worker) {
            ++training;
            pausedWorkers += active->workerPaused ? 1 : 0;
        }
    QString state, reason, code;
    if (m_lifecycle.stopping) {
        state = QStringLiteral("stopped");
        code = QStringLiteral("stopping");
        reason = m_lifecycle.leaving
                     ? QStringLiteral("Leaving (%1): handing the subtasks back to the coordinator")
                           .arg(m_departure->leaveReason())
                 : m_active.isEmpty() ? QStringLiteral("Stopping")
                                      : QStringLiteral("Stopping: the subtasks are kept for the next start");
    } else if (!m_lifecycle.fatal.isEmpty()) {
        state = QStringLiteral("error");
        code = QStringLiteral("error");
        reason = QStringLiteral("Stopped: %1").arg(m_lifecycle.fatal);
    } else if (m_failures.count >= kFailuresBeforeError && !m_failures.last.isEmpty()) {
        // Still leasing (with backoff): the cause may be fixed on the coordinator's side.
        state = QStringLiteral("error");
        code = QStringLiteral("error");
        reason = QStringLiteral("The last %1 subtasks failed; the last one: %2")
                     .arg(m_failures.count)
                     .arg(m_failures.last);
    } else if (m_gate->paused()) {
        state = QStringLiteral("paused");
        code = QStringLiteral("paused_by_user");
        reason = pausedWorkers < training
                     ? QStringLiteral("Pausing %1 subtask(s)").arg(training - pausedWorkers)
                     : QStringLiteral("Paused by you");
    } else if (m_gate->snoozed()) {
        state = QStringLiteral("paused");
        code = QStringLiteral("snoozed");
        reason = QStringLiteral("Snoozed until %1; resuming by itself then")
                     .arg(QDateTime::fromMSecsSinceEpoch(m_gate->snoozeUntilMs())
                              .toString(QStringLiteral("HH:mm")));
    } else if (m_lifecycle.finishing) {
        state = QStringLiteral("finishing");
        code = QStringLiteral("finishing");
        reason = QStringLiteral("Finishing %1 subtask(s), then stopping").arg(m_active.size());
        if (auto held = m_gate->policyState())
            reason += QStringLiteral("; on hold now: ") + std::get<1>(*held);
    } else if (auto held = m_gate->policyState()) {
        std::tie(state, reason, code) = *held;
    } else if (training > 0) {
        state = QStringLiteral("training");
        code = QStringLiteral("computing");
        reason = QStringLiteral("Training %1 subtask(s)").arg(training);
        const QString why = m_gate->decisionReason();
        if (!m_options.dedicated && why.startsWith(u"Computing: "))
            reason += QStringLiteral(": ") + why.mid(11);
    } else if (!m_reachable) {
        state = QStringLiteral("offline");
        code = QStringLiteral("offline");
        reason = QStringLiteral("Cannot reach the coordinator %1: %2; next try in %3")
                     .arg(m_config.coordinatorUrl, m_lastNetworkError,
                          spokenDuration(std::max<qint64>(0, m_leasing->nextTryMs() - nowMs())));
    } else if (!m_active.isEmpty()) {
        state = QStringLiteral("waiting");
        code = QStringLiteral("preparing");
        reason = QStringLiteral("Preparing %1 subtask(s)").arg(m_active.size());
    } else if (!m_leasing->quarantined().isEmpty()) {
        // The coordinator's admin must act; the agent keeps asking, rarely, and says why it has nothing.
        state = QStringLiteral("waiting");
        code = QStringLiteral("quarantined");
        reason = QStringLiteral("The coordinator gives this agent no work: %1").arg(m_leasing->quarantined());
    } else {
        state = QStringLiteral("waiting");
        code = QStringLiteral("no_work");
        reason = QStringLiteral("Waiting for work from %1").arg(m_config.coordinatorUrl);
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
        m_feed.log(QStringLiteral("info"), reason);
    }
    if (changed)
        m_feed.publish(QJsonObject{{QStringLiteral("event"), QStringLiteral("state")},
                                   {QStringLiteral("state"), state},
                                   {QStringLiteral("reason"), reason},
                                   {QStringLiteral("reason_code"), code}});
}

void AgentDaemon::publishSubtask(const Active& active, const QString& error)
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
    m_feed.publish(event);
}

QJsonObject AgentDaemon::status() const
{
    QJsonArray subtasks;
    const qint64 now = nowMs();
    for (const auto& active : std::as_const(m_active)) {
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
    for (const QJsonObject& line : m_feed.recentLog())
        recentLog.append(line);
    const QJsonObject policy = m_gate->statusObject();
    QJsonObject totals;
    if (auto t = m_store->totals()) {
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
        {QStringLiteral("agent_id"), m_config.agentId},
        {QStringLiteral("name"), m_config.name},
        {QStringLiteral("data_dir"), m_options.dataDir},
        {QStringLiteral("dedicated"), m_options.dedicated},
        {QStringLiteral("coordinator"),
         QJsonObject{{QStringLiteral("url"), m_config.coordinatorUrl},
                     {QStringLiteral("reachable"), m_reachable},
                     {QStringLiteral("last_error"), m_lastNetworkError.isEmpty()
                                                        ? QJsonValue(QJsonValue::Null)
                                                        : QJsonValue(m_lastNetworkError)},
                     {QStringLiteral("next_try_ms"),
                      m_leasing->due() ? QJsonValue(m_leasing->nextTryMs()) : QJsonValue(QJsonValue::Null)},
                     {QStringLiteral("signing_key"), m_keys.current().fingerprint()},
                     {QStringLiteral("quarantined"), m_leasing->quarantined().isEmpty()
                                                         ? QJsonValue(QJsonValue::Null)
                                                         : QJsonValue(m_leasing->quarantined())}}},
        {QStringLiteral("max_tasks"), m_options.maxTasks},
        {QStringLiteral("threads"), m_gate->limits().threads},
        {QStringLiteral("subtasks"), subtasks},
        {QStringLiteral("totals"), totals},
        {QStringLiteral("policy"), policy},
        {QStringLiteral("gpu"), m_gpu.isEmpty() ? QJsonValue(QJsonValue::Null) : QJsonValue(m_gpu)},
        {QStringLiteral("sandbox"), m_sandbox.toJson()},
        {QStringLiteral("log"), recentLog},
    };
}

QStringList AgentDaemon::commands() const
{
    return {QStringLiteral("status"),         QStringLiteral("pause"),  QStringLiteral("resume"),
            QStringLiteral("finish"),         QStringLiteral("snooze"), QStringLiteral("preferences"),
            QStringLiteral("set_preferences")};
}

Result<QJsonObject> AgentDaemon::handle(const QString& command, const QJsonObject& args)
{
    if (command == u"status")
        return status();
    if (command == u"preferences" || command == u"set_preferences")
        return m_gate->preferences(command,
                                   args); // the preferences can be read and changed while stopping too
    if (m_lifecycle.stopping)
        return fail(QStringLiteral("the agent is stopping"));
    if (command == u"pause" || command == u"resume") {
        if (command == u"pause")
            m_gate->pause();
        else
            m_gate->resume();
        updateState();
        return QJsonObject{{QStringLiteral("state"), m_state}};
    }
    if (command == u"finish" && args.value(QStringLiteral("now")).toBool()) {
        m_departure->leave(QStringLiteral("finish --now"));
        return QJsonObject{{QStringLiteral("state"), m_state}, {QStringLiteral("leaving"), true}};
    }
    if (command == u"finish") {
        m_lifecycle.finishing = true;
        m_leasing->hold();
        // Finishing means computing what is held: the owner's pause ends; the desktop policy still holds.
        m_gate->endOwnerHold();
        m_feed.log(QStringLiteral("info"), QStringLiteral("finishing the current subtasks, then stopping"));
        updateState();
        QTimer::singleShot(0, this, [this] { m_departure->checkFinished(); });
        return QJsonObject{{QStringLiteral("state"), m_state}};
    }
    if (command == u"snooze") {
        auto until = m_gate->snooze(args);
        if (!until)
            return fail(until.error());
        updateState();
        return QJsonObject{{QStringLiteral("state"), m_state}, {QStringLiteral("until_ms"), *until}};
    }
    return fail(QStringLiteral("unknown command \"%1\"").arg(command));
}

void AgentDaemon::shutdown()
{
    m_departure->shutdown();
}

void AgentDaemon::reloadPolicy(const QString& why)
{
    m_gate->reloadPolicy(why);
}

QString AgentDaemon::policyFile() const
{
    return m_gate->policyFile();
}

} // namespace gleaner::agent
