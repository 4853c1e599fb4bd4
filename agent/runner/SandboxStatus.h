#pragma once
// What the agent knows of its workers' sandbox, from the "sandbox" event each worker sends first
// (docs/worker-protocol.md): whether Landlock confines their file system and, when not, why. It is a property of
// the machine, not of a subtask, so the status shows it once and the log says it once, when it changes.

#include <QJsonObject>
#include <QJsonValue>
#include <QString>

#include <optional>

namespace gleaner::agent {

class SandboxStatus
{
public:
    struct Observed
    {
        bool landlock = false;
        int landlockAbi = 0;
        bool tcpDenied = false;
        QString reason; // why the file system is not confined; empty when it is
        bool operator==(const Observed&) const = default;
    };

    // Takes a worker's "sandbox" event; returns the log line to write when it changes what the agent knew
    // (the first event, or a different one), empty otherwise and for an event that is not well formed.
    QString observe(const QJsonObject& event);
    // {"landlock": bool, "landlock_abi": n, "tcp_denied": bool, "reason": "..." or null}; null until a worker
    // has reported.
    QJsonValue toJson() const;
    // Whether the last report said the workers run unconfined; false before the first.
    bool unconfined() const { return m_observed && !m_observed->landlock; }

    // The event's fields, checked: a worker is a child of ours, but its output is still input.
    static std::optional<Observed> parse(const QJsonObject& event);

private:
    std::optional<Observed> m_observed;
};

} // namespace gleaner::agent
