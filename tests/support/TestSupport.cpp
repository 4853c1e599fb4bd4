#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QTest>

#include <sys/stat.h>

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

} // namespace gleaner::test
