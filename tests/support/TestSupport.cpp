#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gleaner::test {

QString sourceDir()
{
    const QString fromEnv = qEnvironmentVariable("GLEANER_SOURCE_DIR");
    return fromEnv.isEmpty() ? QStringLiteral(GLEANER_TEST_SOURCE_DIR) : fromEnv;
}

QString fashionMnistDir()
{
    return QStringLiteral("/usr/share/datasets/fashion-mnist");
}

std::unique_ptr<QTemporaryDir> scratchDir()
{
    auto dir = std::make_unique<QTemporaryDir>(QDir::tempPath() + QStringLiteral("/gleaner-test-XXXXXX"));
    if (!dir->isValid())
        qFatal("cannot create a scratch folder under %s", qPrintable(QDir::tempPath()));
    return dir;
}

QByteArray readFile(const QString& path)
{
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

bool writeFile(const QString& path, QByteArrayView bytes)
{
    QFile file(path);
    return file.open(QIODevice::WriteOnly | QIODevice::Truncate) && file.write(bytes.toByteArray()) == bytes.size();
}

QJsonObject jsonObject(const QByteArray& text)
{
    QJsonParseError error;
    const QJsonDocument document = QJsonDocument::fromJson(text, &error);
    if (error.error != QJsonParseError::NoError || !document.isObject())
        qFatal("test fixture is not a JSON object: %s", text.constData());
    return document.object();
}

mode_t fileMode(const QString& path)
{
    struct stat info = {};
    if (::stat(QFile::encodeName(path).constData(), &info) != 0)
        return 0;
    return info.st_mode & 07777;
}

int freeLoopbackPort()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
        port = ntohs(address.sin_port);
    ::close(fd);
    return port;
}

} // namespace gleaner::test
