#pragma once
// The agent as people and programs see it: its state ("training", "paused", "offline", ...) with a reason and
// a reason code, worked out again whenever something it depends on changes, logged when what the reason says
// changes and sent to the control socket's subscribers; the subtask events; and the status object
// (docs/control-protocol.md). It only reads the parts of the daemon it describes. Per machine; on the event
// loop's thread.

#include "runner/SandboxStatus.h"
#include "util/Clock.h"

#include <QJsonObject>
#include <QString>

namespace gleaner::agent {

class Departure;
class EventFeed;
class LeaseDesk;
class MachineGate;
class PinnedKeys;
class Reachability;
class SubtaskStore;
class SubtaskTable;
struct ActiveSubtask;
struct AgentConfig;
struct FailureStreak;
struct Lifecycle;

class AgentStatus
{
public:
    // What the status describes.
    struct Sources
    {
        QString dataDir;
        bool dedicated = false;
        int maxTasks = 1;
        const AgentConfig& config;
        const PinnedKeys& keys;
        const Lifecycle& lifecycle;
        const FailureStreak& failures;
        const SubtaskTable& subtasks;
        SubtaskStore& store;
        const Reachability& reachability;
        const LeaseDesk& leasing;
        const MachineGate& gate;
        const Departure& departure;
        EventFeed& feed;
        const Clock& clock;
    };

    explicit AgentStatus(Sources sources) : m_in(std::move(sources)) {}

    // Works the state out again; an event when it changed.
    void update();
    // A subtask's state changed: an event (with the error of a final outcome).
    void publish(const ActiveSubtask& active, const QString& error = {}) const;
    QJsonObject toJson() const;
    const QString& state() const { return m_state; }

    // The machine's GPUs (or why none is known), read once at start.
    void setGpu(QJsonObject gpu) { m_gpu = std::move(gpu); }
    // What the workers' "sandbox" events said, shown once.
    SandboxStatus& sandbox() { return m_sandbox; }

private:
    const Sources m_in;
    QString m_state;
    QString m_reason;
    QString m_reasonCode;
    QString m_loggedReason; // what the log last said of the reason
    QJsonObject m_gpu;
    SandboxStatus m_sandbox;
};

} // namespace gleaner::agent
