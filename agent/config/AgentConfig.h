#pragma once
// An agent's data directory and what enrollment leaves in it:
//   agent.json             coordinator URL, agent id, name, when it enrolled
//   agent-token            the bearer token the coordinator issued (0600)
//   coordinator-key.pem    the coordinator's Ed25519 signing key, pinned: every manifest must verify with it
//   coordinator-ca.pem     the coordinator's TLS certificate when enrollment pinned one (--ca); absent: the system
//                          store verifies the coordinator
// The daemon, the CLI and the tray app find the folder through AgentPaths.

#include "Result.h"

#include <QString>

namespace gleaner::agent {

struct AgentConfig
{
    QString coordinatorUrl; // https://host:port
    QString agentId;
    QString name;
    qint64 enrolledMs = 0;

    static QString configPath(const QString& dir);
    static QString tokenPath(const QString& dir);
    static QString signingKeyPath(const QString& dir);
    static QString caPath(const QString& dir);

    static bool isEnrolled(const QString& dir);
    static Result<AgentConfig> load(const QString& dir);
    Status save(const QString& dir) const;
};

} // namespace gleaner::agent
