#pragma once
// Helpers every Gleaner test may use: where the sources and the Debian datasets are, and fresh scratch
// folders.

#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QString>
#include <QTemporaryDir>

#include <sys/types.h>

#include <memory>

namespace gleaner::test {

// The project's source tree (for fixtures under tests/ and tools like tests/tools/*.py).
QString sourceDir();

// The Fashion-MNIST folder of Debian's dataset-fashion-mnist package.
QString fashionMnistDir();

// A scratch folder that is removed when the pointer goes; fails the calling test when it cannot be made.
std::unique_ptr<QTemporaryDir> scratchDir();

// A whole file, or empty when it cannot be read.
QByteArray readFile(const QString& path);
// Replaces the file's content; false when it cannot be written whole.
bool writeFile(const QString& path, QByteArrayView bytes);
// The permission bits (07777) of a file, 0 when it does not exist.
mode_t fileMode(const QString& path);

// A JSON object written into a test; a fixture that is not one stops the test program at once.
QJsonObject jsonObject(const QByteArray& text);
// A loopback TCP port nobody listens on right now (0 when none could be found). Another process may take it
// before the caller binds it: servers started on it retry with another.
int freeLoopbackPort();

// For QTest's toString(const T&) overloads: a spec that differs is printed as its compact JSON.
template <typename Spec>
char* jsonToString(const Spec& spec)
{
    return qstrdup(QJsonDocument(spec.toJson()).toJson(QJsonDocument::Compact).constData());
}

} // namespace gleaner::test
