#include "core/AgentStanding.h"

#include "store/Database.h"

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {

namespace {
constexpr int kMaxReasonLength = 500;
}

Status AgentStanding::load()
{
    auto rows = m_db.exec(QStringLiteral("SELECT id, quarantine_reason FROM agents WHERE quarantined_ms IS NOT NULL"));
    if (!rows)
        return fail(rows.error());
    m_quarantined.clear();
    while (rows->next())
        m_quarantined.insert(rows->value(0).toString(), rows->value(1).toString());
    return {};
}

std::optional<QString> AgentStanding::recordRefusal(const QString& agentId, const QString& reason, qint64 nowMs)
{
    auto streak = m_db.exec(QStringLiteral("UPDATE agents SET invalid_streak = invalid_streak + 1 WHERE id = ? "
                                           "RETURNING invalid_streak"),
                            {agentId});
    if (!streak || !streak->next()) {
        qCCritical(lcCoordinator) << "cannot count a refused result of agent" << agentId << ":"
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
    if (auto s = m_db.exec(QStringLiteral("UPDATE agents SET quarantined_ms = ?, quarantine_reason = ? WHERE id = ?"),
                           {nowMs, why, agentId});
        !s) {
        qCCritical(lcCoordinator) << "cannot quarantine agent" << agentId << ":" << s.error();
        return std::nullopt;
    }
    m_quarantined.insert(agentId, why);
    qCWarning(lcCoordinator).nospace() << "agent " << agentId << " is quarantined: " << why;
    return why;
}

void AgentStanding::recordAccepted(const QString& agentId)
{
    (void)m_db.exec(QStringLiteral("UPDATE agents SET invalid_streak = 0 WHERE id = ? AND invalid_streak != 0"),
                    {agentId});
}

std::optional<QString> AgentStanding::quarantine(const QString& agentId) const
{
    auto it = m_quarantined.constFind(agentId);
    if (it == m_quarantined.cend())
        return std::nullopt;
    return *it;
}

Result<bool> AgentStanding::lift(const QString& agentId)
{
    auto done = m_db.exec(QStringLiteral("UPDATE agents SET quarantined_ms = NULL, quarantine_reason = '', "
                                         "invalid_streak = 0 WHERE id = ?"),
                          {agentId});
    if (!done)
        return fail(done.error());
    return m_quarantined.remove(agentId) > 0;
}

} // namespace gleaner::coordinator
