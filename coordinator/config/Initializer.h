#pragma once
// Creates a coordinator data directory (see DataDirectory.h): signing key, TLS identity, admin token, database
// and configuration. Used by `gleaner-coordinator init` and by tests. Refuses a folder that exists and is not
// empty; takes an empty one (the package's /var/lib/gleaner-coordinator) and keeps it. Leaves nothing it made
// behind when a step fails.

#include "Result.h"
#include "config/DataDirectory.h"

namespace gleaner::coordinator {

struct InitResult
{
    QByteArray adminToken; // shown once; the data directory keeps it in a 0600 file for the CLI
    QByteArray signingPublicKeyPem;
    QString certificatePath;
};

// With `certificateFile` / `keyFile` empty, a self-signed certificate is made for config.hosts.
Result<InitResult> initializeDataDirectory(const DataDirectory& dir, const CoordinatorConfig& config,
                                           const QString& certificateFile = {}, const QString& keyFile = {});

} // namespace gleaner::coordinator
