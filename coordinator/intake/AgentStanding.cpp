#include "intake/AgentStanding.h"

#include "enrollment/Enrollment.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "views/DashboardFeed.h"

#include <QJsonObject>
#include <QLoggingCategory>

Q_LOGGING_CATEGORY(lcIntake, "gleaner.coordinator.intake")

namespace gleaner::coordinator {

namespace {
constexpr int kMaxReasonLength = 500;
}

Status AgentStanding::load()
{
    auto rows = m_db.exec(
        QStringLiteral("SELECT id, quarantine_reason FROM agents WHERE quarantined_ms IS NOT NULL"));
    if (!rows)
        return fail(rows.error());
    m_quarantined.clear();
    while (rows->next())
        m_quarantined.insert(rows->value(0).toString(), rows->value(1).toString());
    return {};
}

void AgentStanding::refused(const QString& agentId, const QString& reason)
{
    m_enrollment.recordOutcome(agentId, "invalid");
    if (!recordRefusal(agentId, reason))
        return;
    // Its work in flight is suspect and holds workunits honest agents could train: they go back now.
    m_scheduler.expireAllOf(agentId);
    m_feed.noteAgentChanged(agentId, "quarantined");
}

std::optional<QString> AgentStanding::recordRefusal(const QString& agentId, const QString& reason)
{
    auto streak =
        m_db.exec(QStringLiteral("UPDATE agents SET invalid_streak = invalid_streak + 1 WHERE id = ? "
                                 "RETURNING invalid_streak"),
                  {agentId});
    if (!streak || !streak->next()) {
        qCCritical(lcIntake) << "cannot count a refused result of agent" << agentId << ":"
                             << (streak ? QStringLiteral("no such agent") : streak.error());
        return std::nullopt;
    }
    const int run = streak->value(0).toInt();
    streak->finish(); // done before the next statement runs
    if (run < kQuarantineAfter || m_quarantined.contains(agentId))
        return std::nullopt;
    const QString why = QStringLiteral("%1 results refused in a row; the last: %2")
                            .arg(run)
                            .arg(reason.left(kMaxReasonLength));
    if (auto s = m_db.exec(
            QStringLiteral("UPDATE agents SET quarantined_ms = ?, quarantine_reason = ? WHERE id = ?"),
            {m_clock.nowMs(), why, agentId});
        !s) {
        qCCritical(lcIntake) << "cannot quarantine agent" << agentId << ":" << s.error();
        return std::nullopt;
    }
    m_quarantined.insert(agentId, why);
    qCWarning(lcIntake).nospace() << "agent " << agentId << " is quarantined: " << why;
    return why;
}

void AgentStanding::accepted(const QString& agentId)
{
    (void)m_db.exec(
        QStringLiteral("UPDATE agents SET invalid_streak = 0 WHERE id = ? AND invalid_streak != 0"),
        {agentId});
}

std::optional<QString> AgentStanding::quarantine(const QString& agentId) const
{
    auto it = m_quarantined.constFind(agentId);
    if (it == m_quarantined.cend())
        return std::nullopt;
    return *it;
}

HttpResponse AgentStanding::release(const QString& agentId)
{
    auto row = m_db.exec(QStringLiteral("SELECT 1 FROM agents WHERE id = ?"), {agentId});
    if (!row || !row->next())
        return HttpResponse::error(404, QStringLiteral("no agent has id %1").arg(agentId));
    row->finish();
    auto done = m_db.exec(QStringLiteral("UPDATE agents SET quarantined_ms = NULL, quarantine_reason = '', "
                                         "invalid_streak = 0 WHERE id = ?"),
                          {agentId});
    if (!done)
        return HttpResponse::error(500, done.error());
    const bool lifted = m_quarantined.remove(agentId) > 0;
    if (lifted) {
        qCInfo(lcIntake) << "the admin lifted the quarantine of agent" << agentId;
        m_feed.noteAgentChanged(agentId, "released");
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), agentId);
    reply.insert(QStringLiteral("quarantined"), false);
    reply.insert(QStringLiteral("was_quarantined"), lifted);
    return HttpResponse::json(200, reply);
}

} // namespace gleaner::coordinator
