#include "AgentPaths.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

#include <sys/un.h>

namespace gleaner::agent {

QString defaultDataDir(AgentScope scope)
{
    if (scope == AgentScope::System)
        return QStringLiteral("/var/lib/gleaner");
    // GenericDataLocation + "gleaner" rather than AppDataLocation: the CLI and the tray app are different
    // executables and must find the same folder.
    return QDir(QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation)).filePath(QStringLiteral("gleaner"));
}

QString controlSocketPath(const QString& dataDir)
{
    // The canonical path when the folder exists, so a symlinked and a real spelling of the same data dir agree on
    // both the length test and the hash.
    const QFileInfo info(dataDir);
    QString base = info.canonicalFilePath();
    if (base.isEmpty())
        base = QDir::cleanPath(info.absoluteFilePath());
    const QString path = QDir(base).filePath(QStringLiteral("control.sock"));
    constexpr qsizetype kMaxPathBytes = sizeof(sockaddr_un::sun_path) - 1;
    if (QFile::encodeName(path).size() <= kMaxPathBytes)
        return path;

    QString runtime = QStandardPaths::writableLocation(QStandardPaths::RuntimeLocation);
    if (runtime.isEmpty())
        runtime = QDir::tempPath();
    const QByteArray hash = QCryptographicHash::hash(base.toUtf8(), QCryptographicHash::Sha256).toHex().left(16);
    return QDir(runtime).filePath(QStringLiteral("gleaner-agent-") + QString::fromLatin1(hash) +
                                  QStringLiteral(".sock"));
}

} // namespace gleaner::agent
