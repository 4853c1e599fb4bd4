#pragma once
// `gleaner-agent enroll`: registers this machine with a coordinator and keeps what the agent needs to work with it
// safely afterwards: the agent token (0600), the coordinator's signing key (pinned: a manifest that does not
// verify with it is never run) and, when given, its TLS certificate (pinned: the only trust anchor).

#include "Result.h"
#include "config/AgentConfig.h"

#include <QJsonObject>

namespace gleaner::agent {

struct EnrollOptions
{
    QString url;            // https://host:port of the coordinator
    QString token;          // enrollment token; empty on an open coordinator
    QString caFile;         // the coordinator's certificate to pin; empty trusts the system store
    QString name;           // shown to the coordinator's admin; default: this machine's host name
    QString dataDir;        // must not hold an enrolled agent yet
};

Result<AgentConfig> enrollAgent(const EnrollOptions& options);

// What the agent declares of its machine at enrollment and with every lease request (`capabilities`: "cores",
// "arch", "ram_mb" and, when an NVIDIA driver answers, "gpu" (the first GPU's name) and "gpus" (their count)),
// and what its status says of the GPUs (`gpu`). The coordinator shows the capabilities to the admin and caps an
// agent's leases by its cores.
struct MachineHardware
{
    QJsonObject capabilities;
    // {"count", "name", "note"}: the NVIDIA GPUs, or with count 0 and a note why none is known (no driver, or
    // a driver that failed; the probe warned of the latter).
    QJsonObject gpu;
    bool gpuDriverMissing = false; // the note is the common "no NVIDIA driver": information, not a fault
};

// `nvmlLibrary` is for tests; the default is the NVIDIA driver's.
MachineHardware machineHardware(const QString& nvmlLibrary = QStringLiteral("libnvidia-ml.so.1"));

} // namespace gleaner::agent
