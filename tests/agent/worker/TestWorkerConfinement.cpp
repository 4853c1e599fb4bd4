// The real gleaner-worker under the sandbox's kernel limits, driven by the agent's WorkerProcess: a model past
// the memory cap ends its subtask with the cap named while the agent goes on, and a TorchScript model (libtorch's
// interpreter, a larger part of libtorch than the zoo's modules) trains to the end under the seccomp filter.
// What a model cannot even express (a socket, exec) is sandbox_probe's part, in test_workersandbox.
#include "format/SafeTensors.h"
#include "ml/Model.h"
#include "ml/data/Dataset.h"
#include "runner/WorkerProcess.h"

#include "TestSupport.h"
#include "WorkerTask.h"

#include <QFile>
#include <QJsonArray>
#include <QSignalSpy>
#include <QTest>

#include <random>
#include <vector>

using namespace gleaner;
using namespace gleaner::agent;

Q_DECLARE_METATYPE(gleaner::agent::WorkerEnd)

namespace {

struct Run
{
    WorkerEnd end;
    QJsonObject sandbox; // the first event
    QJsonObject error;   // the last "error" event, if any
};

Run runWorker(const WorkerLaunch& launch)
{
    Run run;
    WorkerProcess worker(launch);
    QSignalSpy ended(&worker, &WorkerProcess::ended);
    QObject::connect(&worker, &WorkerProcess::event, [&run](const QJsonObject& e) {
        const QString name = e.value(QStringLiteral("event")).toString();
        if (name == u"sandbox")
            run.sandbox = e;
        else if (name == u"error")
            run.error = e;
    });
    worker.start();
    if (ended.wait(120'000))
        run.end = ended.first().first().value<WorkerEnd>();
    return run;
}

WorkerLaunch launchFor(const QString& taskDir, qint64 capMb)
{
    WorkerLaunch launch;
    launch.program = QStringLiteral(GLEANER_WORKER_BIN);
    launch.taskDir = taskDir;
    launch.threads = 1;
    launch.kernelMemoryCapBytes = capMb * 1024 * 1024;
    return launch;
}

} // namespace

class TestWorkerConfinement : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { qRegisterMetaType<WorkerEnd>(); }
    void memoryCapEndsTheSubtaskNotTheAgent();
    void torchScriptTrainsUnderTheFilter();
};

void TestWorkerConfinement::memoryCapEndsTheSubtaskNotTheAgent()
{
    // A model whose weights, gradients and Adam's moments need some 270 MB, under a cap of 128 MB the kernel
    // enforces (with one thread's allowance for stacks, 176 MB; a small run maps about 90 MB of data with one
    // thread): the allocation fails in the kernel, the worker ends, and the agent's side names the cap; the
    // agent goes on and runs the next subtask.
    const auto dir = test::scratchDir();
    test::writeTask(dir->path(), 1);
    ModelSpec big;
    big.arch = Architecture::Mlp;
    big.inputShape = {1, 8, 8};
    big.numClasses = 4;
    big.hidden = {4096, 4096};
    auto net = ml::Model::create(big, 1);
    QVERIFY(net);
    QVERIFY(SafeTensors::save(dir->filePath(QStringLiteral("weights.safetensors")), net->weights()).ok());
    test::setModel(dir->path(), big.toJson());

    const Run capped = runWorker(launchFor(dir->path(), 128));
    QCOMPARE(capped.sandbox.value(QStringLiteral("memory_cap_mb")).toInt(), 128);
    QVERIFY(capped.sandbox.value(QStringLiteral("layers")).toArray().contains(QStringLiteral("memory_cap")));
    QCOMPARE(int(capped.end.kind), int(WorkerEnd::Kind::OverMemory));
    QVERIFY2(capped.end.reason.startsWith(u"the worker exceeded its memory cap of 128 MB"),
             qPrintable(capped.end.reason));
    // The worker itself said so (not a crash the agent had to read): the allocation failed and it ended cleanly.
    QCOMPARE(capped.end.exitCode, 1);
    QVERIFY(capped.error.value(QStringLiteral("memory_cap")).toBool());
    const QString said = capped.error.value(QStringLiteral("message")).toString();
    QVERIFY2(said.startsWith(u"the worker exceeded its memory cap of 128 MB"), qPrintable(said));
    QVERIFY(!QFile::exists(dir->filePath(QStringLiteral("result.safetensors"))));

    // The same agent, the next subtask, the same cap: a model that fits trains to the end.
    const auto small = test::scratchDir();
    test::writeTask(small->path(), 1);
    const Run done = runWorker(launchFor(small->path(), 128));
    QVERIFY2(done.end.kind == WorkerEnd::Kind::Done, qPrintable(done.end.reason));
    QVERIFY(QFile::exists(small->filePath(QStringLiteral("result.safetensors"))));
}

void TestWorkerConfinement::torchScriptTrainsUnderTheFilter()
{
    const auto dir = test::scratchDir();
    test::writeTask(dir->path(), 1);
    // residual.pt takes [1, 8, 8] and has three classes: a shard of three.
    std::vector<qint64> labels;
    QByteArray pixels;
    std::mt19937 rng(5);
    for (int i = 0; i < 256; ++i) {
        labels.push_back(qint64(rng() % 3));
        for (int p = 0; p < 64; ++p)
            pixels.append(char(quint8(((p / 16) == labels.back() ? 150 : 0) + rng() % 100)));
    }
    auto shard = ml::Dataset::fromBytes(pixels, {1, 8, 8}, labels, QStringLiteral("shard"));
    QVERIFY(SafeTensors::save(dir->filePath(QStringLiteral("shard.safetensors")), shard->bundle()).ok());
    const QString fixture = QStringLiteral(GLEANER_TORCHSCRIPT_FIXTURES "/residual.pt");
    QVERIFY(QFile::copy(fixture, dir->filePath(QStringLiteral("model.pt"))));
    ModelSpec script;
    script.arch = Architecture::TorchScript;
    script.torchscript = fixture;
    script.inputShape = {1, 8, 8};
    script.numClasses = 3;
    auto net = ml::Model::create(script, 1);
    QVERIFY2(net, qPrintable(net.error()));
    QVERIFY(SafeTensors::save(dir->filePath(QStringLiteral("weights.safetensors")), net->weights()).ok());
    // The agent names the archive by the hash it verified; the worker takes the file it was given.
    test::setModel(dir->path(), QJsonObject{{QStringLiteral("torchscript"),
                                             QString(QStringLiteral("sha256:") + QString(64, u'0'))},
                                            {QStringLiteral("input_shape"), QJsonArray{1, 8, 8}},
                                            {QStringLiteral("num_classes"), 3}});

    const Run run = runWorker(launchFor(dir->path(), 1024));
    QVERIFY2(run.end.kind == WorkerEnd::Kind::Done, qPrintable(run.end.reason));
    QVERIFY2(run.sandbox.value(QStringLiteral("seccomp")).toBool(),
             qPrintable(run.sandbox.value(QStringLiteral("seccomp_reason")).toString()));
    QCOMPARE(run.sandbox.value(QStringLiteral("memory_cap_mb")).toInt(), 1024);
    QVERIFY(QFile::exists(dir->filePath(QStringLiteral("result.safetensors"))));
}

QTEST_GUILESS_MAIN(TestWorkerConfinement)
#include "TestWorkerConfinement.moc"
