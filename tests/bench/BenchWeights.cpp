// Per-update costs at the paper's model size (pre-activation ResNet, 4.98 M parameters, about 20 MB of F32):
// folding an upload into the server weights (VC-ASGD blend), checking it for non-finite values, and reading,
// writing and hashing its safetensors file. Prints one JSON object; times are medians in milliseconds.
//   bench_weights [--iterations N] [--quick]
#include "crypto/Sha256.h"
#include "format/SafeTensors.h"
#include "ml/Model.h"
#include "ml/WeightMath.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>

#include <algorithm>
#include <functional>
#include <vector>

using namespace gleaner;

namespace {

double medianMs(int iterations, const std::function<void()>& work)
{
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
        QElapsedTimer timer;
        timer.start();
        work();
        times.push_back(double(timer.nsecsElapsed()) / 1e6);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    int iterations = 21;
    if (args.contains(QStringLiteral("--quick")))
        iterations = 1;
    if (const qsizetype at = args.indexOf(QStringLiteral("--iterations")); at >= 0 && at + 1 < args.size())
        iterations = std::max(1, args.at(at + 1).toInt());
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_weights [--iterations N] [--quick]\n"
                               "Prints per-update costs at the paper's model size as JSON (medians, ms).\n";
        return 0;
    }

    ModelSpec spec;
    spec.arch = Architecture::ResNet;
    spec.inputShape = {3, 32, 32};
    spec.depth = 20;
    spec.width = 77;
    auto server = ml::Model::create(spec, 1);
    auto client = ml::Model::create(spec, 2);
    if (!server || !client) {
        QTextStream(stderr) << "bench_weights: " << (server ? client.error() : server.error()) << '\n';
        return 1;
    }
    TensorBundle serverWeights = server->weights();
    const TensorBundle clientWeights = client->weights();
    const QByteArray file = SafeTensors::serialize(clientWeights);

    QJsonObject out;
    out.insert(QStringLiteral("model"), QStringLiteral("resnet depth 20 width 77"));
    out.insert(QStringLiteral("parameters"), server->parameterCount());
    out.insert(QStringLiteral("tensors"), serverWeights.size());
    out.insert(QStringLiteral("file_bytes"), file.size());
    out.insert(QStringLiteral("iterations"), iterations);
    out.insert(QStringLiteral("blend_ms"), medianMs(iterations, [&] {
                   (void)ml::WeightMath::blend(serverWeights, clientWeights, 0.95);
               }));
    out.insert(QStringLiteral("finite_check_ms"),
               medianMs(iterations, [&] { (void)ml::WeightMath::allFinite(clientWeights); }));
    out.insert(QStringLiteral("safetensors_parse_ms"),
               medianMs(iterations, [&] { (void)SafeTensors::parse(file); }));
    out.insert(QStringLiteral("safetensors_serialize_ms"),
               medianMs(iterations, [&] { (void)SafeTensors::serialize(clientWeights); }));
    out.insert(QStringLiteral("sha256_ms"), medianMs(iterations, [&] { (void)Sha256::hash(file); }));
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return 0;
}
