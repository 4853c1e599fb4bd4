#pragma once
// What every benchmark program shares: order statistics, options and failing with a message.

#include <QByteArray>
#include <QFile>
#include <QString>
#include <QStringList>
#include <QTextStream>

#include <algorithm>
#include <sys/resource.h>
#include <vector>

namespace gleaner::bench {

// The value below which a fraction `p` of `values` lies (p = 0.5: the median).
inline double percentile(std::vector<double> values, double p)
{
    if (values.empty())
        return 0.0;
    std::sort(values.begin(), values.end());
    return values[std::min(values.size() - 1, size_t(p * double(values.size())))];
}

inline double median(std::vector<double> values)
{
    return percentile(std::move(values), 0.5);
}

// `--name N` from the command line, or `fallback`.
inline int intOption(const QStringList& arguments, const char* name, int fallback)
{
    const auto at = arguments.indexOf(QString::fromLatin1(name));
    return at >= 0 ? arguments.value(at + 1).toInt() : fallback;
}

// Prints "program: message" on stderr; returns the exit code 1.
inline int failBench(const char* program, const QString& message)
{
    QTextStream(stderr) << program << ": " << message << "\n";
    return 1;
}

// The peak resident size of this process as getrusage knows it, in MiB. Linux carries ru_maxrss over exec from
// the process that forked and counts the libraries' start-up: prefer resetPeak() and statusMiB("VmHWM").
inline double peakRssMiB()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return double(usage.ru_maxrss) / 1024.0; // kilobytes on Linux
}

// A line of /proc/self/status ("VmRSS", "VmHWM") in MiB; 0 where there is none.
inline double statusMiB(const QByteArray& key)
{
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly))
        return 0;
    for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith(QByteArray(key + ':')))
            return line.mid(key.size() + 1).trimmed().split(' ').value(0).toDouble() / 1024.0;
    return 0;
}

// Writing "5" to /proc/self/clear_refs resets the peak (VmHWM) to the present resident size, so the peak read
// afterwards is what came after, not the start-up's; false where the kernel does not allow it.
inline bool resetPeak()
{
    QFile refs(QStringLiteral("/proc/self/clear_refs"));
    return refs.open(QIODevice::WriteOnly) && refs.write("5") == 1;
}

} // namespace gleaner::bench
