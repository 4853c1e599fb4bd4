#pragma once
// What every benchmark program shares: order statistics, options and failing with a message.

#include <QString>
#include <QStringList>
#include <QTextStream>

#include <algorithm>
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

} // namespace gleaner::bench
