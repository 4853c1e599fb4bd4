#include "AgentPaths.h"

#include <QDir>
#include <QStandardPaths>

namespace gleaner::agent {

QString defaultDataDir(AgentScope scope)
{
    if (scope == AgentScope::System)
        return QStringLiteral("/var/lib/gleaner");
    // GenericDataLocation + "gleaner" rather than AppDataLocation: the CLI and the tray app are different
    // executables and must find the same folder.
    return QDir(QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation)).filePath(QStringLiteral("gleaner"));
}

} // namespace gleaner::agent
