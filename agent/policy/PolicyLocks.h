#pragma once
// Locks that hold on a managed machine. Where the organisation's policy file exists at its system path, a desk
// user cannot run an agent around it: another policy file (--policy-file or $GLEANER_POLICY_FILE) and
// --dedicated (which sets the desktop policy aside) are for root and for the system service's own user, whom
// only root can start a process as. Preferences the policy locks are refused by PreferenceStore::set.

#include "Result.h"

#include <QString>

namespace gleaner::agent {

struct PolicyOverrides
{
    QString policyFlag;        // --policy-file's value, empty when not given
    QString policyEnvironment; // $GLEANER_POLICY_FILE, empty when not set
    bool dedicated = false;    // --dedicated
};

// The organisation's policy file: /etc/gleaner/policy.json.
QString systemPolicyFile();

// Whether the calling user may set the policy aside: root, or the system user `gleaner` the service runs as.
bool mayOverridePolicy();

// Refuses, naming the policy file, an override that `privileged` does not allow while `systemPolicy` exists.
Status checkPolicyOverrides(const PolicyOverrides& overrides, const QString& systemPolicy, bool systemPolicyExists,
                            bool privileged);

} // namespace gleaner::agent
