#include "TestSupport.h"

#include <QDir>
#include <QTest>

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

} // namespace gleaner::test
