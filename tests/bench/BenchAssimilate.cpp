// The coordinator's server-side cost of one accepted update at a given model size: from the uploaded bytes on
// disk to the blended server copy, with everything the real path does in between (parse and check the file,
// fsync it, move it beside the database, record the row, fold it in with VC-ASGD). Also the floor: a bare
// in-memory blend of the same size. Prints one JSON object; times are milliseconds.
//   bench_assimilate [--params N] [--updates K] [--upload ENCODING] [--quick]
// The paper measured 870 ms per update in Redis and 1,290 ms in MySQL at 4,972,746 parameters.
#include "aggregation/UpdateChecker.h"
#include "aggregation/VcAsgd.h"
#include "aggregation/WeightsKeeper.h"
#include "codec/UpdateCodec.h"
#include "format/SafeTensors.h"
#include "ml/WeightMath.h"
#include "store/Database.h"
#include "util/Durability.h"
#include "util/LargeBuffers.h"

#include "BenchSupport.h"
#include "SyntheticWeights.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTextStream>

#include <algorithm>
#include <random>
#include <unistd.h>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

using bench::makeWeights;

double ms(const QElapsedTimer& timer)
{
    return double(timer.nsecsElapsed()) / 1e6;
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    LargeBuffers::keepFreed(); // as the coordinator does at its start
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout)
            << "usage: bench_assimilate [--params N] [--updates K] [--upload ENCODING] [--quick]\n"
               "Prints the per-update server cost (median_ms) and a bare blend (floor_ms) as JSON.\n"
               "  --upload ENCODING  fp32 (default), fp16, int8, topk, or a job's \"upload\" object as JSON: the\n"
               "                     upload comes encoded, and decoding it is part of the cost\n";
        return 0;
    }
    UploadSpec encoding;
    if (const auto at = args.indexOf(QStringLiteral("--upload")); at >= 0) {
        const QString text = args.value(at + 1);
        auto parsed = UploadSpec::fromJson(text.startsWith(u'{') ? QJsonDocument::fromJson(text.toUtf8()).object()
                                                                  : QJsonObject{{QStringLiteral("encoding"), text}},
                                           QStringLiteral("--upload"));
        if (!parsed) {
            QTextStream(stderr) << "bench_assimilate: " << parsed.error() << "\n";
            return 2;
        }
        encoding = *parsed;
    }
    qint64 params = 4972746;
    int updates = 30;
    if (const auto at = args.indexOf(QStringLiteral("--params")); at >= 0)
        params = args.value(at + 1).toLongLong();
    if (const auto at = args.indexOf(QStringLiteral("--updates")); at >= 0)
        updates = args.value(at + 1).toInt();
    if (args.contains(QStringLiteral("--quick"))) {
        params = 100000;
        updates = 3;
    }
    if (params < 1 || updates < 1) {
        QTextStream(stderr) << "bench_assimilate: --params and --updates must be positive\n";
        return 2;
    }

    QTemporaryDir scratch;
    const QString updatesDir = scratch.filePath(QStringLiteral("updates"));
    QDir().mkpath(updatesDir);
    auto db = Database::open(scratch.filePath(QStringLiteral("bench.db")));
    if (!db) {
        QTextStream(stderr) << "bench_assimilate: " << db.error() << "\n";
        return 1;
    }
    TensorBundle server = makeWeights(params, 1);
    TensorBundle schema = server;
    // A plausible local epoch: the base weights moved by a little noise (far moves are refused).
    TensorBundle client = server;
    {
        const TensorBundle noise = makeWeights(params, 2);
        for (const auto& entry : client.entries()) {
            auto values = client.mutableValues<float>(entry);
            const auto delta = noise.values<float>(*noise.find(entry.name));
            for (size_t k = 0; k < values.size(); ++k)
                values[k] += 0.01f * delta[k];
        }
    }
    client.setMetadata(QStringLiteral("gleaner.base_version"), QStringLiteral("0"));
    client.setMetadata(QStringLiteral("gleaner.nonce"), QStringLiteral("0123456789abcdef0123456789abcdef"));
    client.setMetadata(QStringLiteral("gleaner.samples"), QStringLiteral("1200"));
    auto encoded = UpdateCodec::encode(client, server, encoding, nullptr);
    if (!encoded) {
        QTextStream(stderr) << "bench_assimilate: " << encoded.error() << "\n";
        return 1;
    }
    const QByteArray upload = UpdateCodec::pack(*encoded, encoding.isUpdate() && encoding.zstd);
    // The base weights as the checker thread keeps them (read once, then cached).
    const QString basePath = scratch.filePath(QStringLiteral("base.safetensors"));
    if (!SafeTensors::save(basePath, server)) {
        QTextStream(stderr) << "bench_assimilate: cannot write " << basePath << "\n";
        return 1;
    }
    BaseWeightsCache bases;
    auto base = bases.get(QStringLiteral("base"), basePath);
    if (!base) {
        QTextStream(stderr) << "bench_assimilate: " << base.error() << "\n";
        return 1;
    }
    UpdateExpectations expected;
    expected.schema = schema;
    expected.baseWeightsSha = QStringLiteral("base");
    expected.baseWeightsPath = basePath;
    expected.nonce = QStringLiteral("0123456789abcdef0123456789abcdef");
    expected.maxSamples = 1200;
    expected.maxSteps = 38;
    expected.upload = encoding;
    AggregationSpec spec; // vc-asgd, alpha e/(e+1)
    std::unique_ptr<AggregationRule> rule = std::make_unique<VcAsgd>(spec);
    UpdateBound steps;

    std::vector<double> total, check, durable, record, blend, floor;
    for (int i = 0; i < updates; ++i) {
        // The upload as the HTTP layer leaves it: a file just written (in the page cache, not yet synced).
        const QString file = scratch.filePath(QStringLiteral("upload-%1.safetensors").arg(i));
        {
            QFile out(file);
            if (!out.open(QIODevice::WriteOnly) || out.write(upload) != upload.size()) {
                QTextStream(stderr) << "bench_assimilate: cannot write " << file << "\n";
                return 1;
            }
        }
        QElapsedTimer all;
        all.start();
        QElapsedTimer step;
        step.start();
        auto received = UpdateChecker::check(file, expected, **base);
        if (!received) {
            QTextStream(stderr) << "bench_assimilate: " << received.error() << "\n";
            return 1;
        }
        check.push_back(ms(step));
        step.restart();
        if (auto kept = Durability::syncFile(file); !kept) { // as it came, encoded or not
            QTextStream(stderr) << "bench_assimilate: " << kept.error() << "\n";
            return 1;
        }
        const QString stored = QDir(updatesDir).filePath(QStringLiteral("%1.safetensors").arg(i));
        QFile::rename(file, stored);
        if (!Durability::syncFolder(updatesDir))
            return 1;
        durable.push_back(ms(step));
        step.restart();
        auto row = (*db)->exec(QStringLiteral("INSERT INTO updates (job_id, lease_id, agent_id, epoch, base_version, "
                                              "file, samples, loss, train_seconds, received_ms) VALUES (1, ?, 'a', 1, "
                                              "0, ?, 1200, 0.5, 1.0, 0)"),
                               {QStringLiteral("lease-%1").arg(i), stored});
        if (!row)
            return 1;
        record.push_back(ms(step));
        step.restart();
        if (auto folded = WeightsKeeper::fold(server, rule, steps, received->weights, UpdateContext{1, 0, qint64(i)},
                                              /*checked=*/false);
            !folded) {
            QTextStream(stderr) << "bench_assimilate: " << folded.error() << "\n";
            return 1;
        }
        blend.push_back(ms(step));
        total.push_back(ms(all));
        QFile::remove(stored);

        QElapsedTimer bare;
        bare.start();
        (void)ml::WeightMath::blend(schema, client, 0.5);
        floor.push_back(ms(bare));
    }

    QJsonObject out;
    out.insert(QStringLiteral("params"), params);
    out.insert(QStringLiteral("updates"), updates);
    out.insert(QStringLiteral("upload"), encoding.toJson());
    out.insert(QStringLiteral("upload_bytes"), upload.size());
    out.insert(QStringLiteral("median_ms"), bench::median(total));
    out.insert(QStringLiteral("p90_ms"), bench::percentile(total, 0.9));
    out.insert(QStringLiteral("floor_ms"), bench::median(floor));
    QJsonObject parts;
    parts.insert(QStringLiteral("read_decode_and_check_ms"), bench::median(check));
    parts.insert(QStringLiteral("keep_and_move_ms"), bench::median(durable));
    parts.insert(QStringLiteral("record_row_ms"), bench::median(record));
    parts.insert(QStringLiteral("blend_ms"), bench::median(blend));
    out.insert(QStringLiteral("median_parts"), parts);
    out.insert(QStringLiteral("paper_redis_ms"), 870);
    out.insert(QStringLiteral("goal_ms"), 25);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    return 0;
}
