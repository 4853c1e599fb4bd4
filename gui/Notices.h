#pragma once
// Which changes of the agent are worth interrupting the user for, when there is no tray icon to glance at:
// an error, going offline (the agent or the coordinator), the agent having finished, and a pause by the
// owner's rules, once per cause (on battery, a listed program, ...), not each time the user touches the
// mouse. Plain logic fed with the link's state, so the rules are tested without a desktop.

#include <QSet>
#include <QString>

#include <optional>

namespace gleaner::gui {

struct Notice
{
    enum class Kind
    {
        Error,
        Offline,
        Finished,
        PolicyPause
    };
    Kind kind;
    QString summary;
    QString body;
};

class NoticeTracker
{
public:
    // The agent's state, reason_code and reason now; a notice when this is an important change.
    std::optional<Notice> update(const QString& state, const QString& reasonCode, const QString& reason);

    // The reason codes of a pause by the owner's rules (docs/desktop.md).
    static bool isPolicyCause(const QString& reasonCode);

private:
    QString m_lastKey;
    QString m_lastReason;
    QSet<QString> m_causesSeen;
    bool m_finishedShown = false;
};

} // namespace gleaner::gui
