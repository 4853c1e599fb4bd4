// gleaner-sim: the aggregation lab (coordinator/sim/Simulation.h, docs/aggregation.md).
#include "sim/Simulation.h"

#include <QCoreApplication>
#include <QFile>
#include <QJsonDocument>
#include <QTextStream>

using namespace gleaner::coordinator::sim;

namespace {

bool writeFile(const QString& path, const QByteArray& bytes)
{
    if (path == u"-") {
        QTextStream(stdout) << bytes;
        return true;
    }
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(bytes) != bytes.size()) {
        QTextStream(stderr) << "gleaner-sim: cannot write " << path << ": " << file.errorString() << "\n";
        return false;
    }
    return true;
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    QStringList arguments = app.arguments().mid(1);
    if (arguments.contains(QStringLiteral("--help")) || arguments.contains(QStringLiteral("-h"))) {
        QTextStream(stdout) << SimOptions::usage();
        return 0;
    }
    auto options = SimOptions::parse(arguments);
    if (!options) {
        QTextStream(stderr) << "gleaner-sim: " << options.error() << "\n\n" << SimOptions::usage();
        return 2;
    }
    QTextStream err(stderr);
    const auto progress = [&](const QString& line) {
        if (!options->quiet)
            err << "gleaner-sim: " << line << Qt::endl;
    };
    auto report = Simulation::run(*options, progress);
    if (!report) {
        err << "gleaner-sim: " << report.error() << Qt::endl;
        return 1;
    }
    progress(QStringLiteral("%1: best accuracy %2 (%3)").arg(report->rule).arg(report->bestAccuracy(), 0, 'f', 4).arg(report->ended));
    const QByteArray json = QJsonDocument(report->toJson(*options)).toJson(QJsonDocument::Indented);
    if (!options->jsonPath.isEmpty() && !writeFile(options->jsonPath, json))
        return 1;
    if (!options->csvPath.isEmpty() && !writeFile(options->csvPath, report->toCsv()))
        return 1;
    if (options->jsonPath.isEmpty())
        QTextStream(stdout) << json;
    return 0;
}
