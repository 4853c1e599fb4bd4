#pragma once
// Where the recorded probe samples live, and a copy of one that a test may change between two samples.

#include "TestSupport.h"

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QTest>

namespace gleaner::test {

inline QString probeData(const QString& relative)
{
    return sourceDir() + QStringLiteral("/tests/agent/probes/data/") + relative;
}

// Copies a recorded tree into `to`; false (after a failed QVERIFY-style message) when a file cannot be
// copied.
inline bool copyTree(const QString& from, const QString& to)
{
    QDirIterator it(from, QDir::Files | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString file = it.next();
        const QString target = to + QLatin1Char('/') + QDir(from).relativeFilePath(file);
        if (!QDir().mkpath(QFileInfo(target).path()) || !QFile::copy(file, target)) {
            qWarning("cannot copy %s to %s", qPrintable(file), qPrintable(target));
            return false;
        }
    }
    return true;
}

} // namespace gleaner::test
