#pragma once
// What the agent knows of its workers' sandbox, from the "sandbox" event each worker sends first
// (docs/worker-protocol.md): which layers of the sandbox hold (Landlock on the file system, the seccomp filter, a
// private network namespace, the kernel's memory cap, ...), and why Landlock does not when it does not. It is a property of
// the machine, not of a subtask, so the status shows it once and the log says it once, when it changes.

#include <QJsonObject>
#include <QJsonValue>
#include <QString>
#include <QStringList>

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
        QStringList layers;  // in force, by the event's names (SandboxReport::layers); only names known here
        QStringList missing; // the known ones not in force
        qint64 memoryCapMb = 0; // 0: none
        bool operator==(const Observed&) const = default;
    };

    // Takes a worker's "sandbox" event; returns the log line to write when it changes what the agent knew
    // (the first event, or a different one), empty otherwise and for an event that is not well formed.
    QString observe(const QJsonObject& event);
    // {"landlock": bool, "landlock_abi": n, "tcp_denied": bool, "reason": "..." or null, "layers": [...],
    // "missing": [...], "memory_cap_mb": n or null, "summary": one line}; null until a worker has reported.
    QJsonValue toJson() const;
    // Whether the last report said the workers run unconfined; false before the first.
    bool unconfined() const { return m_observed && !m_observed->landlock; }

    // The event's fields, checked: a worker is a child of ours, but its output is still input.
    static std::optional<Observed> parse(const QJsonObject& event);
    // One line for people: "landlock (ABI 3), seccomp, network namespace, memory cap 2048 MB; missing: landlock
    // TCP rules, landlock scopes".
    static QString summary(const Observed& observed);

private:
    std::optional<Observed> m_observed;
};

} // namespace gleaner::agent
