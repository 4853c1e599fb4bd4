// gleaner-coordinator: see cli/Cli.h.
#include "cli/Cli.h"

#include <QCoreApplication>

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("gleaner-coordinator"));
    QCoreApplication::setApplicationVersion(QStringLiteral(GLEANER_VERSION));
    return gleaner::coordinator::cli::run(QCoreApplication::arguments());
}
