#include "Notices.h"

namespace gleaner::gui {

bool NoticeTracker::isPolicyCause(const QString& reasonCode)
{
    static const QSet<QString> causes{QStringLiteral("user_active"),     QStringLiteral("inhibited"),
                                      QStringLiteral("on_battery"),      QStringLiteral("schedule"),
                                      QStringLiteral("program_running"), QStringLiteral("cpu_busy")};
    return causes.contains(reasonCode);
}

std::optional<Notice> NoticeTracker::update(const QString& state, const QString& reasonCode,
                                            const QString& reason)
{
    const QString key = state + u'/' + reasonCode;
    const bool keyChanged = key != m_lastKey;
    const bool reasonChanged = reason != m_lastReason;
    m_lastKey = key;
    m_lastReason = reason;

    if (state == u"error" || reasonCode == u"agent_start_failed") {
        // Once per error, not at each new wording of it ("the last 4 subtasks failed", then 5, ...); a failed
        // agent start is news each time it happens.
        if (!keyChanged && (reasonCode != u"agent_start_failed" || !reasonChanged))
            return std::nullopt;
        return Notice{Notice::Kind::Error, QStringLiteral("Gleaner needs your attention"), reason};
    }
    if (state == u"stopped" || reasonCode == u"agent_finished") {
        if (m_finishedShown)
            return std::nullopt;
        m_finishedShown = true;
        return Notice{Notice::Kind::Finished, QStringLiteral("Gleaner has finished"), reason};
    }
    m_finishedShown = false;
    if (state == u"offline") {
        // Connecting at start, starting the agent, or waiting for enrollment are not news.
        if (!keyChanged || reasonCode == u"connecting" || reasonCode == u"agent_starting" ||
            reasonCode == u"not_enrolled")
            return std::nullopt;
        return Notice{Notice::Kind::Offline, QStringLiteral("Gleaner is offline"), reason};
    }
    if ((state == u"waiting" || state == u"paused") && isPolicyCause(reasonCode) &&
        !m_causesSeen.contains(reasonCode)) {
        m_causesSeen.insert(reasonCode);
        return Notice{Notice::Kind::PolicyPause, QStringLiteral("Gleaner paused"),
                      reason + QStringLiteral("\nYour preferences say when Gleaner may compute.")};
    }
    return std::nullopt;
}

} // namespace gleaner::gui
