#pragma once
// Helpers every Gleaner test may use: where the sources and the Debian datasets are, and fresh scratch
// folders.

#include <QString>
#include <QTemporaryDir>

#include <memory>

namespace gleaner::test {

// The project's source tree (for fixtures under tests/ and tools like tests/tools/*.py).
QString sourceDir();

// The Fashion-MNIST folder of Debian's dataset-fashion-mnist package.
QString fashionMnistDir();

// A scratch folder that is removed when the pointer goes; fails the calling test when it cannot be made.
std::unique_ptr<QTemporaryDir> scratchDir();

} // namespace gleaner::test
