#pragma once
// What every fuzz target shares: the input as a QByteArray, a check that aborts (so libFuzzer saves the input
// as a crash) when a parser breaks one of its documented promises, and silence for the parsers' warnings,
// which would otherwise be printed millions of times.

#include <QByteArray>
#include <QString>
#include <QtGlobal>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace gleaner::fuzz {

inline QByteArray bytes(const std::uint8_t* data, std::size_t size)
{
    return QByteArray(reinterpret_cast<const char*>(data), qsizetype(size));
}

// A broken promise is a finding like a crash: say which, and abort so the input is kept.
inline void check(bool condition, const char* promise, const QString& detail = {})
{
    if (condition)
        return;
    std::fprintf(stderr, "fuzz check failed: %s\n%s\n", promise, qPrintable(detail));
    std::abort();
}

inline void silenceQtMessages()
{
    qInstallMessageHandler([](QtMsgType, const QMessageLogContext&, const QString&) {});
}

} // namespace gleaner::fuzz
