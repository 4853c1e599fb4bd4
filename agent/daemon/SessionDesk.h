#pragma once
// The system agent's session socket (docs/fleet.md, "A shared workstation"): what the people at a shared
// workstation may ask of the organisation's agent. Every local user may connect; nothing here changes the agent.
//
//  - report_idle {"session": ID, "idle_ms": N, "source": NAME}: a session's helper (`gleaner-agent
//    session-report`) tells the agent how long its session has been idle; see SessionReports.
//  - status, preferences: what the agent does and why, read-only (the tray app of a desk user shows them;
//    every preference is listed as locked).
//  - pause, resume, finish, snooze, set_preferences: refused, naming the policy file: the machine's agent
//    belongs to the organisation.
// subscribe gives the status events (state, progress, subtask, preferences, coordinator), not the log.

#include "control/ControlHandler.h"
#include "idle/SessionReports.h"
#include "idle/IdleSource.h"

#include <memory>

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

    // Whether a daemon event goes to the session socket's subscribers.
    static bool forDesks(const QJsonObject& event);

private:
    AgentDaemon& m_daemon;
    std::shared_ptr<SessionReports> m_reports;
    MonotonicClock m_clock;
};

} // namespace gleaner::agent
