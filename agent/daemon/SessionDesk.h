#pragma once
// The system agent's session socket (docs/fleet.md, "A shared workstation"): what the people at a shared
// workstation may ask of the organisation's agent. Every local user may connect; nothing here changes the agent.
//
//  - report_idle {"session": ID, "idle_ms": N, "source": NAME}: a session's helper (`gleaner-agent
//    session-report`) tells the agent how long its session has been idle; see SessionReports.
//  - status, preferences: what the agent does and why, read-only (the tray app of a desk user shows them;
//    every preference is listed as locked). A desk user is one of several people who share the machine, not
//    the agent's owner: the status they see leaves out what belongs to the others or to the administrator
//    (deskStatus()).
//  - pause, resume, finish, snooze, set_preferences: refused, naming the policy file: the machine's agent
//    belongs to the organisation.
// subscribe gives the status events (state, progress, subtask, preferences, coordinator), not the log, with
// the same filter (forDesks()).

#include "control/ControlHandler.h"
#include "idle/SessionReports.h"
#include "idle/IdleSource.h"

#include <memory>
#include <optional>

namespace gleaner::agent {

class AgentDaemon;

class SessionDesk final : public ControlHandler
{
public:
    SessionDesk(AgentDaemon& daemon, std::shared_ptr<SessionReports> reports, MonotonicClock clock = steadyClock());

    QStringList commands() const override;
    Result<QJsonObject> handle(const QString& cmd, const QJsonObject& args) override;
    Result<QJsonObject> handleFrom(const QString& cmd, const QJsonObject& args, const ControlPeer& peer) override;
    void connectionClosed(const ControlPeer& peer) override;

    // The owner's status (AgentDaemon::status()) as a desk user sees it: without the log (its lines name other
    // people's activity and the agent's files), the data folder, the idle time of the most active session
    // (another person's, as often as not), and the programs that paused the agent or keep a screen awake
    // (what runs in another person's session); a reason that says any of these in words says instead only
    // why, and "read_only": true.
    static QJsonObject deskStatus(QJsonObject status);
    // A daemon event as the session socket's subscribers get it, filtered as deskStatus() is; nullopt for an
    // event desks never get (the log).
    static std::optional<QJsonObject> forDesks(const QJsonObject& event);

private:
    AgentDaemon& m_daemon;
    std::shared_ptr<SessionReports> m_reports;
    MonotonicClock m_clock;
};

} // namespace gleaner::agent
