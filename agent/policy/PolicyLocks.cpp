#include "PolicyLocks.h"

#include <QFileInfo>

#include <pwd.h>
#include <unistd.h>

namespace gleaner::agent {

QString systemPolicyFile()
{
    return QStringLiteral("/etc/gleaner/policy.json");
}

bool mayOverridePolicy()
{
    const uid_t uid = ::getuid();
    if (uid == 0)
        return true;
    const passwd* service = ::getpwnam("gleaner");
    return service && service->pw_uid == uid;
}

Status checkPolicyOverrides(const PolicyOverrides& overrides, const QString& systemPolicy, bool systemPolicyExists,
                            bool privileged)
{
    if (!systemPolicyExists || privileged)
        return {};
    const auto refuse = [&](const QString& what) {
        return fail(QStringLiteral("%1 sets this machine's policy, and %2 would set it aside; only root can do that "
                                   "(ask your organisation's administrator)")
                        .arg(systemPolicy, what));
    };
    const auto other = [&](const QString& path) {
        return !path.isEmpty() && QFileInfo(path).absoluteFilePath() != QFileInfo(systemPolicy).absoluteFilePath();
    };
    if (other(overrides.policyFlag))
        return refuse(QStringLiteral("--policy-file %1").arg(overrides.policyFlag));
    if (other(overrides.policyEnvironment))
        return refuse(QStringLiteral("GLEANER_POLICY_FILE=%1").arg(overrides.policyEnvironment));
    if (overrides.dedicated)
        return refuse(QStringLiteral("--dedicated"));
    return {};
}

} // namespace gleaner::agent
