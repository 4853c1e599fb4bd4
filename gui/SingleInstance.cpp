#include "SingleInstance.h"

#include "GuiLogging.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFileInfo>
#include <QLocalSocket>
#include <QStandardPaths>

#include <unistd.h>

namespace gleaner::gui {

SingleInstance::SingleInstance(const QString& dataDir, QObject* parent) : QObject(parent)
{
    QString folder = QStandardPaths::writableLocation(QStandardPaths::RuntimeLocation);
    if (folder.isEmpty())
        folder = QDir::tempPath();
    const QString canonical = QFileInfo(dataDir).canonicalFilePath();
    const QByteArray key = QByteArray::number(uint(getuid())) + '\n' +
                           (canonical.isEmpty() ? QDir::cleanPath(dataDir) : canonical).toUtf8();
    m_path = QDir(folder).filePath(
        QStringLiteral("gleaner-gui-%1.sock")
            .arg(QString::fromLatin1(
                QCryptographicHash::hash(key, QCryptographicHash::Sha256).toHex().left(16))));
    connect(&m_server, &QLocalServer::newConnection, this, [this] {
        while (QLocalSocket* socket = m_server.nextPendingConnection()) {
            connect(socket, &QLocalSocket::disconnected, socket, &QObject::deleteLater);
            connect(socket, &QLocalSocket::readyRead, this, [this, socket] {
                if (socket->readAll().contains("show"))
                    Q_EMIT activated();
                socket->disconnectFromServer();
            });
        }
    });
}

bool SingleInstance::claim()
{
    QLocalSocket other;
    other.connectToServer(m_path);
    if (other.waitForConnected(500)) {
        other.write("show\n");
        other.waitForBytesWritten(500);
        other.disconnectFromServer();
        return false;
    }
    // Nobody answers: what is there was left by an instance that crashed.
    QLocalServer::removeServer(m_path);
    m_server.setSocketOptions(QLocalServer::UserAccessOption);
    if (!m_server.listen(m_path))
        qCWarning(lcGui) << "cannot listen on" << m_path << "(" << m_server.errorString()
                         << "); a second gleaner started for the same folder will not find this one";
    return true;
}

} // namespace gleaner::gui
