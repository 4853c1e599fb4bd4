#pragma once
// Starts the per-user agent daemon (`gleaner-agent run --data-dir DIR`) for the tray app, detached: it
// outlives the tray app, which never stops it. Behind an interface so tests check that the tray app starts an
// agent without running one.

#include "Result.h"

#include <QString>

namespace gleaner::gui {

class AgentLauncher
{
public:
    virtual ~AgentLauncher();
    // Starts an agent for `dataDir`; fails with a sentence naming the program or folder and what to do.
    virtual Status start(const QString& dataDir) = 0;
    // Whether the agent the last start() began has ended already (an agent that could not start exits at
    // once); false when unknown.
    virtual bool hasExited() const { return false; }
};

class ProcessAgentLauncher : public AgentLauncher
{
public:
    // `program` empty: findAgentProgram() at each start.
    explicit ProcessAgentLauncher(QString program = {});

    // Runs PROGRAM run --data-dir DIR in DIR, detached, with stdout and stderr appended to DIR/agent.log.
    Status start(const QString& dataDir) override;
    bool hasExited() const override;

    // The gleaner-agent next to this program's executable, else the one in PATH.
    static Result<QString> findAgentProgram();
    // Where start() sends the agent's output.
    static QString logPath(const QString& dataDir);
    // The last non-empty line the agent wrote to its log since the latest start() (what a daemon that could
    // not start printed last); empty when it wrote nothing.
    static QString lastLogLine(const QString& dataDir);

private:
    QString m_program;
    qint64 m_pid = 0;
};

} // namespace gleaner::gui
