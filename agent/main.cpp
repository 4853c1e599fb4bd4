// gleaner-agent: see cli/AgentCli.h.
#include "cli/AgentCli.h"

#include <QCoreApplication>

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("gleaner-agent"));
    return gleaner::agent::cli::run(QCoreApplication::arguments());
}
