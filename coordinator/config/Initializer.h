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

// With `certificateFile` / `keyFile` empty, a self-signed certificate is made for config.hosts. With
// config.sharedDir set (a new deployment for several coordinators), that folder is made too; it must be
// empty.
Result<InitResult> initializeDataDirectory(const DataDirectory& dir, const CoordinatorConfig& config,
                                           const QString& certificateFile = {}, const QString& keyFile = {});

// Another coordinator of the deployment whose data directory is `source` (its config names a shared_dir): the
// deployment's signing key and its rotations, TLS identity and admin token are copied, and the configuration
// too, listening on `listen` ("HOST:PORT"; empty: the source's). Refused while the source is in the middle of
// a key rotation, and when the database does not know the source's admin token (not the deployment it names).
Result<InitResult> joinDeployment(const DataDirectory& dir, const DataDirectory& source,
                                  const QString& listen);

} // namespace gleaner::coordinator
