// chaos_soak: a chaos soak (ChaosSoak) from the command line; tests/e2e/chaos-soak.sh runs it from a build.
// Prints its figures (JSON with --json, else one line each) and exits 0 when every invariant held, 1 when one
// broke (the scratch folder with every log and the coordinator's data is kept and named), 2 for a usage
// error.
#include "ChaosSoak.h"
#include "TestSupport.h"

#include <QCoreApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTextStream>

using namespace gleaner;
using namespace gleaner::e2e;

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help")) || args.contains(QStringLiteral("-h"))) {
        QTextStream(stdout) << ChaosOptions::usage();
        return 0;
    }
    auto options = ChaosOptions::parse(args);
    if (!options) {
        QTextStream(stderr) << "chaos_soak: " << options.error() << "\n";
        return 2;
    }
    auto scratch = test::scratchDir();
    ChaosSoak soak(*options, scratch->path());
    QJsonObject figures = soak.run();
    const bool ok = figures.value(QStringLiteral("ok")).toBool();
    if (options->keep || !ok) {
        scratch->setAutoRemove(false);
        figures.insert(QStringLiteral("scratch"), scratch->path());
    }
    QTextStream out(stdout);
    if (options->json) {
        out << QJsonDocument(figures).toJson(QJsonDocument::Indented);
    } else {
        for (auto it = figures.begin(); it != figures.end(); ++it) {
            const QJsonValue value = it.value();
            if (it.key() == u"violations")
                continue;
            QString text = value.toVariant().toString();
            if (value.isObject())
                text = QString::fromUtf8(QJsonDocument(value.toObject()).toJson(QJsonDocument::Compact));
            else if (value.isArray())
                text = QString::fromUtf8(QJsonDocument(value.toArray()).toJson(QJsonDocument::Compact));
            out << it.key() << ": " << text << "\n";
        }
        for (const auto& violation : figures.value(QStringLiteral("violations")).toArray())
            out << "VIOLATION: " << violation.toString() << "\n";
    }
    return ok ? 0 : 1;
}
