#pragma once
// gleaner-agent's command line. Exit codes: 0 success, 1 the operation failed (the message says why and what
// to do), 2 the command line was wrong.

#include <QStringList>

namespace gleaner::agent::cli {

int run(const QStringList& arguments);

} // namespace gleaner::agent::cli
