// What sticky shards save: one agent trains every shard of a two-epoch job, so in epoch 2 each shard it is
// given is already in its cache. Counts the bytes of the files the agent downloads in each epoch, from its
// network log
// (`gleaner.agent.net: "GET" ".../api/v1/files/HASH" -> 200 N bytes`, attributed to the epoch of the lease
// the download is for) and the role of each file (from the agent's cache log). Epoch 2 should fetch the new
// weights only.
//   bench_second_epoch_bytes [--shards S] [--quick]
#include "E2eCluster.h"
#include "TestSupport.h"

#include "BenchSupport.h"

#include <QCoreApplication>
#include <QHash>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTextStream>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {

const char* const kName = "bench_second_epoch_bytes";

struct EpochBytes
{
    qint64 total = 0;
    qint64 files = 0;
    QHash<QString, qint64> byRole;
};

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.contains(QStringLiteral("--help"))) {
        QTextStream(stdout) << "usage: bench_second_epoch_bytes [--shards S] [--quick]\n";
        return 0;
    }
    const bool quick = args.contains(QStringLiteral("--quick"));
    const int shards = bench::intOption(args, "--shards", quick ? 2 : 6);

    auto scratch = test::scratchDir();
    E2eCluster cluster(scratch->path());
    if (auto s = cluster.initCoordinator(); !s)
        return bench::failBench(kName, s.error());
    if (auto s = cluster.startCoordinator(); !s)
        return bench::failBench(kName, s.error());
    QJsonObject spec = E2eCluster::fashionJob();
    spec.insert(QStringLiteral("name"), QStringLiteral("sticky"));
    spec.insert(QStringLiteral("shards"), shards);
    spec.insert(QStringLiteral("limit_train"), quick ? 2000 : 6000);
    spec.insert(QStringLiteral("max_epochs"), 2);
    spec.insert(QStringLiteral("target_accuracy"), 0.99); // both epochs run
    auto job = cluster.submitJob(spec);
    if (!job)
        return bench::failBench(kName, job.error());
    auto agent = cluster.enrollAgent(QStringLiteral("sticky"));
    if (!agent)
        return bench::failBench(kName, agent.error());
    if (auto s = cluster.startAgent(*agent, E2eCluster::quickAgentOptions()); !s)
        return bench::failBench(kName, s.error());
    auto done = cluster.waitForJobState(*job, QStringLiteral("completed"), 300'000);
    if (!done)
        return bench::failBench(kName, done.error());
    cluster.stopAgent(*agent, SIGTERM);

    // Each file's role as the signed manifest named it, from the agent's cache log (`cached "weights"
    // "HASH"`); the coordinator's blob store for the rest (published weights are pruned there once
    // superseded).
    const QString log = cluster.agentLog(*agent);
    QHash<QString, QString> roles;
    for (const BlobFile& blob : cluster.blobs())
        roles.insert(blob.sha256, blob.role);
    const QRegularExpression cached(
        QStringLiteral("gleaner.agent.cache: cached \"(\\w+)\" \"([0-9a-f]{64})\""));
    for (auto it = cached.globalMatch(log); it.hasNext();) {
        const auto m = it.next();
        roles.insert(m.captured(2), m.captured(1));
    }
    // The agent holds one subtask at a time: every download between "leased ... epoch E" and the next lease
    // is for a subtask of epoch E.
    const QRegularExpression leased(
        QStringLiteral("leased [0-9a-f]+: job \"[^\"]*\" epoch (\\d+) shard (\\d+)"));
    const QRegularExpression fetched(QStringLiteral(
        "gleaner.agent.net: \"GET\" \"[^\"]*/api/v1/files/([0-9a-f]{64})\" -> (200|206) (\\d+) bytes"));
    QHash<int, EpochBytes> epochs;
    int epoch = 0;
    qint64 unattributed = 0;
    for (const QString& line : log.split(u'\n')) {
        if (const auto m = leased.match(line); m.hasMatch()) {
            epoch = m.captured(1).toInt();
        } else if (const auto f = fetched.match(line); f.hasMatch()) {
            const qint64 bytes = f.captured(3).toLongLong();
            if (epoch == 0) {
                unattributed += bytes;
                continue;
            }
            EpochBytes& e = epochs[epoch];
            e.total += bytes;
            e.files += 1;
            e.byRole[roles.value(f.captured(1), QStringLiteral("unknown"))] += bytes;
        }
    }
    const EpochBytes first = epochs.value(1);
    const EpochBytes second = epochs.value(2);
    if (first.files == 0 || second.files == 0)
        return bench::failBench(
            kName, QStringLiteral("no downloads attributed to epoch 1 or 2; the agent's log:\n%1")
                       .arg(cluster.agentLog(*agent).right(3000)));
    const auto roleObject = [](const EpochBytes& e) {
        QJsonObject o;
        for (auto it = e.byRole.begin(); it != e.byRole.end(); ++it)
            o.insert(it.key(), it.value());
        return o;
    };
    QJsonObject out;
    out.insert(QStringLiteral("shards"), shards);
    out.insert(QStringLiteral("epoch1_bytes"), first.total);
    out.insert(QStringLiteral("epoch1_files"), first.files);
    out.insert(QStringLiteral("epoch1_by_role"), roleObject(first));
    out.insert(QStringLiteral("epoch2_bytes"), second.total);
    out.insert(QStringLiteral("epoch2_files"), second.files);
    out.insert(QStringLiteral("epoch2_by_role"), roleObject(second));
    out.insert(QStringLiteral("epoch2_weights_bytes"), second.byRole.value(QStringLiteral("weights")));
    out.insert(QStringLiteral("epoch2_only_weights"),
               second.byRole.value(QStringLiteral("weights")) == second.total);
    out.insert(QStringLiteral("epoch2_to_epoch1"), double(second.total) / double(first.total));
    out.insert(QStringLiteral("unattributed_bytes"), unattributed);
    QTextStream(stdout) << QJsonDocument(out).toJson(QJsonDocument::Indented);
    cluster.stopAll();
    return 0;
}
