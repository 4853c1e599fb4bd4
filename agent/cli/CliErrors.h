#pragma once
// How every gleaner-agent command reports a failure (exit code 1) or a wrong command line (exit code 2, with
// the way to its help), so the messages read the same whatever the command.

#include <QString>
#include <QTextStream>

namespace gleaner::agent::cli {

inline int commandFailure(const QString& command, const QString& message)
{
    QTextStream(stderr) << "gleaner-agent " << command << ": " << message << "\n";
    return 1;
}

inline int usageError(const QString& command, const QString& message)
{
    QTextStream(stderr) << "gleaner-agent " << command << ": " << message << "\nRun `gleaner-agent "
                        << command << " --help` for usage.\n";
    return 2;
}

} // namespace gleaner::agent::cli
