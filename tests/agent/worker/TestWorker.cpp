// gleaner-worker as the agent drives it: a real child process on a task folder, JSON events on stdout, commands
// on stdin, and a stopped-then-resumed subtask that ends with exactly the weights of an uninterrupted one.
#include "codec/UpdateCodec.h"
#include "format/SafeTensors.h"

#include "TestSupport.h"
#include "WorkerTask.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTest>

#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

using namespace gleaner;
using gleaner::test::writeTask;

namespace {

struct Worker
{
    QProcess process;
    QList<QJsonObject> events;

    void start(const QString& dir, const QStringList& extra = {})
    {
        process.start(QStringLiteral(GLEANER_WORKER_BIN),
                      QStringList{QStringLiteral("--task"), dir, QStringLiteral("--threads"), QStringLiteral("1")} + extra);
        QVERIFY(process.waitForStarted());
    }
    // Reads events until one named `name` arrives (or the process ends); returns it.
    QJsonObject waitFor(const QString& name, int timeoutMs = 60'000)
    {
        QElapsedTimer timer;
        timer.start();
        while (timer.elapsed() < timeoutMs) {
            while (process.canReadLine()) {
                const QJsonObject event = QJsonDocument::fromJson(process.readLine()).object();
                events.append(event);
                if (event.value(QStringLiteral("event")).toString() == name)
                    return event;
            }
            if (process.state() == QProcess::NotRunning && !process.canReadLine())
                return {};
            process.waitForReadyRead(100);
        }
        return {};
    }
    int finish()
    {
        process.waitForFinished(60'000);
        while (process.canReadLine())
            events.append(QJsonDocument::fromJson(process.readLine()).object());
        return process.exitCode();
    }
    void send(const char* command) { process.write(QByteArray(command) + '\n'); }
    // Starts and pauses the worker after its first mini-batch: a subtask caught in the middle, for a command.
    bool startPaused(const QString& dir)
    {
        start(dir);
        send("pause");
        return !waitFor(QStringLiteral("paused")).isEmpty();
    }
};

QJsonObject firstNamed(const QList<QJsonObject>& events, const QString& name)
{
    for (const QJsonObject& event : events)
        if (event.value(QStringLiteral("event")).toString() == name)
            return event;
    return {};
}

// The kernel's Landlock ABI, asked directly rather than through the worker, so a worker that does not confine
// itself fails these tests instead of skipping them; 0 when this kernel has none.
int kernelLandlockAbi()
{
    const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return abi > 0 ? int(abi) : 0;
}

QByteArray tensorsOf(const QString& path)
{
    auto bundle = SafeTensors::load(path);
    if (!bundle)
        return {};
    QByteArray bytes;
    for (const auto& entry : bundle->entries())
        bytes += entry.name.toUtf8() + bundle->data(entry).toByteArray();
    return bytes;
}

} // namespace

class TestWorker : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void trainsAndWritesTheResult();
    void trainsTheStepsTheCoordinatorSized();
    void optimizerStateIsWrittenAndTakenUp();
    void encodedResultCarriesItsResidual();
    void stoppedThenResumedEqualsUninterrupted();
    void endOfInputKeepsTheWork();
    void deadAgentsPipesKeepTheWork();
    void cancelKeepsNothing();
    void runsAtTheLowestPriority();
    void badTaskFolderIsReported();
    void sandboxIsTheFirstEvent();
    void hostileTorchScriptIsRefused();
    void symlinkToTheAgentsTokenIsRefused();
};

void TestWorker::trainsAndWritesTheResult()
{
    const auto dir = test::scratchDir();
    writeTask(dir->path(), 2);
    Worker w;
    w.start(dir->path());
    QCOMPARE(w.finish(), 0);
    const QJsonObject done = w.events.isEmpty() ? QJsonObject() : w.events.last();
    QCOMPARE(done.value(QStringLiteral("event")).toString(), QStringLiteral("done"));
    QCOMPARE(done.value(QStringLiteral("samples")).toInteger(), 1024);
    QVERIFY(std::any_of(w.events.cbegin(), w.events.cend(), [](const QJsonObject& e) {
        return e.value(QStringLiteral("event")).toString() == u"progress" && e.value(QStringLiteral("of")).toInt() == 64;
    }));
    auto result = SafeTensors::load(dir->filePath(QStringLiteral("result.safetensors")));
    QVERIFY2(result.ok(), qPrintable(result.error()));
    QCOMPARE(result->metadata().value(QStringLiteral("gleaner.base_version")), QStringLiteral("7"));
    QCOMPARE(result->metadata().value(QStringLiteral("gleaner.samples")), QStringLiteral("1024"));
    QCOMPARE(result->metadata().value(QStringLiteral("gleaner.nonce")), QStringLiteral("f9e7ba5c922dfa993b0564ddb94c1748"));
    QVERIFY(result->metadata().value(QStringLiteral("gleaner.loss")).toDouble() > 0);
    QVERIFY(!QFile::exists(dir->filePath(QStringLiteral("checkpoint.safetensors"))));
}

void TestWorker::trainsTheStepsTheCoordinatorSized()
{
    // 512 samples in mini-batches of 16 are 32 a pass: a subtask sized to 40 steps trains 640 samples.
    const auto dir = test::scratchDir();
    writeTask(dir->path(), 1, 40);
    Worker w;
    w.start(dir->path());
    QCOMPARE(w.finish(), 0);
    QCOMPARE(w.events.last().value(QStringLiteral("event")).toString(), QStringLiteral("done"));
    QCOMPARE(w.events.last().value(QStringLiteral("samples")).toInteger(), 640);
    QVERIFY(std::any_of(w.events.cbegin(), w.events.cend(), [](const QJsonObject& e) {
        return e.value(QStringLiteral("event")).toString() == u"progress" && e.value(QStringLiteral("of")).toInt() == 40;
    }));
    // A size that is not a positive integer is refused by name.
    const auto bad = test::scratchDir();
    writeTask(bad->path(), 1, 0);
    Worker refused;
    refused.start(bad->path());
    QCOMPARE(refused.finish(), 1);
    QVERIFY2(refused.events.last().value(QStringLiteral("message")).toString().contains(u"hyperparameters.steps"),
             qPrintable(refused.events.last().value(QStringLiteral("message")).toString()));
}

void TestWorker::optimizerStateIsWrittenAndTakenUp()
{
    // A finished worker leaves its optimizer's state; a worker that finds one as optimizer-in starts from it
    // (another result than a fresh start), and one that cannot use what it finds warns and trains afresh.
    const auto first = test::scratchDir();
    writeTask(first->path());
    Worker w;
    w.start(first->path());
    QCOMPARE(w.finish(), 0);
    const QString state = first->filePath(QStringLiteral("optimizer.safetensors"));
    QVERIFY(QFile::exists(state));
    QVERIFY(!QFile::exists(first->filePath(QStringLiteral("checkpoint.safetensors"))));

    const auto carried = test::scratchDir();
    writeTask(carried->path());
    QVERIFY(QFile::copy(state, carried->filePath(QStringLiteral("optimizer-in.safetensors"))));
    Worker c;
    c.start(carried->path());
    QCOMPARE(c.finish(), 0);
    QVERIFY(firstNamed(c.events, QStringLiteral("warning")).isEmpty());
    QVERIFY(tensorsOf(carried->filePath(QStringLiteral("result.safetensors"))) !=
            tensorsOf(first->filePath(QStringLiteral("result.safetensors"))));

    const auto damaged = test::scratchDir();
    writeTask(damaged->path());
    QFile junk(damaged->filePath(QStringLiteral("optimizer-in.safetensors")));
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write("not a safetensors file");
    junk.close();
    Worker d;
    d.start(damaged->path());
    QCOMPARE(d.finish(), 0);
    QVERIFY2(firstNamed(d.events, QStringLiteral("warning")).value(QStringLiteral("message")).toString().contains(u"fresh optimizer"),
             "a damaged optimizer state is not reported");
    // Trained afresh: the same result as the first worker's.
    QCOMPARE(tensorsOf(damaged->filePath(QStringLiteral("result.safetensors"))),
             tensorsOf(first->filePath(QStringLiteral("result.safetensors"))));
}

void TestWorker::encodedResultCarriesItsResidual()
{
    // The same subtask sent as full weights and as a top-k update: the update, decoded, plus what it left out
    // (the residual the worker writes for the job's next upload) is the full result.
    const auto full = test::scratchDir();
    writeTask(full->path(), 2);
    Worker plain;
    plain.start(full->path());
    QCOMPARE(plain.finish(), 0);
    auto expected = SafeTensors::load(full->filePath(QStringLiteral("result.safetensors")));
    QVERIFY(expected.ok());
    QVERIFY(!QFile::exists(full->filePath(QStringLiteral("residual.safetensors"))));

    const QJsonObject topk{{QStringLiteral("encoding"), QStringLiteral("topk")}, {QStringLiteral("density"), 0.05}};
    const auto encoded = test::scratchDir();
    writeTask(encoded->path(), 2, std::nullopt, topk);
    Worker w;
    w.start(encoded->path());
    QCOMPARE(w.finish(), 0);
    QVERIFY(firstNamed(w.events, QStringLiteral("warning")).isEmpty());
    QFile body(encoded->filePath(QStringLiteral("result.safetensors")));
    QVERIFY(body.open(QIODevice::ReadOnly));
    const QByteArray bytes = body.readAll();
    QVERIFY(UpdateCodec::isZstd(bytes));
    QVERIFY(bytes.size() * 8 < QFileInfo(full->filePath(QStringLiteral("result.safetensors"))).size());
    auto upload = UpdateCodec::unpack(bytes, 1 << 24);
    QVERIFY(upload.ok());
    QCOMPARE(upload->metadata().value(QStringLiteral("gleaner.nonce")), QStringLiteral("f9e7ba5c922dfa993b0564ddb94c1748"));
    auto base = SafeTensors::load(encoded->filePath(QStringLiteral("weights.safetensors")));
    auto decoded = UpdateCodec::decode(*upload, *base);
    QVERIFY2(decoded.ok(), qPrintable(decoded ? QString() : decoded.error()));
    auto residual = SafeTensors::load(encoded->filePath(QStringLiteral("residual.safetensors")));
    QVERIFY(residual.ok());
    for (const TensorEntry& entry : expected->entries()) {
        const auto want = expected->values<float>(entry);
        const auto got = decoded->values<float>(*decoded->find(entry.name));
        const auto left = residual->values<float>(*residual->find(entry.name));
        for (size_t i = 0; i < want.size(); ++i)
            QVERIFY2(std::fabs(got[i] + left[i] - want[i]) < 1e-5f, qPrintable(entry.name));
    }

    // The next subtask takes the residual up; one it cannot read is reported and left out.
    const auto next = test::scratchDir();
    writeTask(next->path(), 2, std::nullopt, topk);
    QVERIFY(QFile::copy(encoded->filePath(QStringLiteral("residual.safetensors")),
                        next->filePath(QStringLiteral("residual-in.safetensors"))));
    Worker n;
    n.start(next->path());
    QCOMPARE(n.finish(), 0);
    QVERIFY(firstNamed(n.events, QStringLiteral("warning")).isEmpty());
    const auto damaged = test::scratchDir();
    writeTask(damaged->path(), 2, std::nullopt, topk);
    QFile junk(damaged->filePath(QStringLiteral("residual-in.safetensors")));
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write("not a residual");
    junk.close();
    Worker d;
    d.start(damaged->path());
    QCOMPARE(d.finish(), 0);
    QVERIFY(firstNamed(d.events, QStringLiteral("warning")).value(QStringLiteral("message")).toString().contains(u"no earlier residual"));

    // An encoding this agent does not know: full weights, with a warning.
    const auto unknown = test::scratchDir();
    writeTask(unknown->path(), 2, std::nullopt, QJsonObject{{QStringLiteral("encoding"), QStringLiteral("int3")}});
    Worker u;
    u.start(unknown->path());
    QCOMPARE(u.finish(), 0);
    QVERIFY(firstNamed(u.events, QStringLiteral("warning")).value(QStringLiteral("message")).toString().contains(u"sending full weights"));
    QCOMPARE(tensorsOf(unknown->filePath(QStringLiteral("result.safetensors"))),
             tensorsOf(full->filePath(QStringLiteral("result.safetensors"))));
}

void TestWorker::stoppedThenResumedEqualsUninterrupted()
{
    const auto straight = test::scratchDir();
    writeTask(straight->path());
    Worker reference;
    reference.start(straight->path());
    QCOMPARE(reference.finish(), 0);

    const auto dir = test::scratchDir();
    writeTask(dir->path());
    Worker first;
    QVERIFY(first.startPaused(dir->path()));
    first.send("stop"); // while paused: checkpoint and exit
    QCOMPARE(first.finish(), 3);
    QCOMPARE(first.events.last().value(QStringLiteral("event")).toString(), QStringLiteral("stopped"));
    QVERIFY(QFile::exists(dir->filePath(QStringLiteral("checkpoint.safetensors"))));

    Worker second;
    second.start(dir->path());
    QCOMPARE(second.finish(), 0);
    const QJsonObject started = firstNamed(second.events, QStringLiteral("started"));
    QCOMPARE(started.value(QStringLiteral("resumed")).toBool(), true);
    QVERIFY(started.value(QStringLiteral("step")).toInteger() > 0); // it did not restart at zero
    QCOMPARE(tensorsOf(dir->filePath(QStringLiteral("result.safetensors"))),
             tensorsOf(straight->filePath(QStringLiteral("result.safetensors"))));
}

void TestWorker::endOfInputKeepsTheWork()
{
    const auto dir = test::scratchDir();
    writeTask(dir->path());
    Worker w;
    QVERIFY(w.startPaused(dir->path()));
    w.process.closeWriteChannel(); // the agent went away
    QCOMPARE(w.finish(), 3);
    QVERIFY(QFile::exists(dir->filePath(QStringLiteral("checkpoint.safetensors"))));
}

void TestWorker::deadAgentsPipesKeepTheWork()
{
    // An agent that dies closes both ends of the worker's pipes: its next event goes into a pipe nobody reads.
    // It must still see the end of its input, checkpoint and exit, not be ended by SIGPIPE on the way. The
    // worker's stdout is a pipe of this test's own, whose read end is closed once the worker is paused (QProcess
    // keeps its end open whatever its channels are told).
    const auto dir = test::scratchDir();
    writeTask(dir->path());
    int events[2];
    QVERIFY(::pipe2(events, O_CLOEXEC) == 0);
    QProcess worker;
    worker.setChildProcessModifier([&events] { ::dup2(events[1], STDOUT_FILENO); });
    worker.start(QStringLiteral(GLEANER_WORKER_BIN),
                 {QStringLiteral("--task"), dir->path(), QStringLiteral("--threads"), QStringLiteral("1")});
    QVERIFY(worker.waitForStarted());
    ::close(events[1]);
    worker.write("pause\n");
    QVERIFY(worker.waitForBytesWritten(10'000));
    QByteArray seen;
    char buffer[4096];
    while (!seen.contains("\"event\":\"paused\"")) {
        const ssize_t n = ::read(events[0], buffer, sizeof buffer);
        if (n < 0 && errno == EINTR)
            continue;
        QVERIFY2(n > 0, qPrintable(QString::fromUtf8(seen) + QString::fromUtf8(worker.readAllStandardError())));
        seen.append(buffer, n);
    }
    ::close(events[0]); // the agent is gone
    worker.write("resume\n"); // its next events (resumed, progress, stopped) go into the closed pipe
    QVERIFY(worker.waitForBytesWritten(10'000));
    worker.closeWriteChannel();
    QVERIFY(worker.waitForFinished(60'000));
    QCOMPARE(worker.exitStatus(), QProcess::NormalExit); // not ended by SIGPIPE
    QCOMPARE(worker.exitCode(), 3);
    QVERIFY(QFile::exists(dir->filePath(QStringLiteral("checkpoint.safetensors"))));
}

void TestWorker::cancelKeepsNothing()
{
    const auto dir = test::scratchDir();
    writeTask(dir->path());
    Worker w;
    QVERIFY(w.startPaused(dir->path()));
    w.send("cancel");
    QCOMPARE(w.finish(), 4);
    QVERIFY(!QFile::exists(dir->filePath(QStringLiteral("checkpoint.safetensors"))));
    QVERIFY(!QFile::exists(dir->filePath(QStringLiteral("result.safetensors"))));
}

void TestWorker::runsAtTheLowestPriority()
{
    const auto dir = test::scratchDir();
    writeTask(dir->path());
    Worker w;
    QVERIFY(w.startPaused(dir->path()));
    const pid_t pid = pid_t(w.process.processId());
    QCOMPARE(::sched_getscheduler(pid), SCHED_IDLE);
    QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
    QVERIFY(stat.open(QIODevice::ReadOnly));
    const QList<QByteArray> fields = stat.readAll().split(')').last().trimmed().split(' ');
    QCOMPARE(fields.value(16).toInt(), 19); // field 19 of /proc/PID/stat: nice
    w.send("cancel");
    QCOMPARE(w.finish(), 4);
}

void TestWorker::badTaskFolderIsReported()
{
    const auto dir = test::scratchDir();
    Worker w;
    w.start(dir->path());
    QCOMPARE(w.finish(), 1);
    QCOMPARE(w.events.last().value(QStringLiteral("event")).toString(), QStringLiteral("error"));
    QVERIFY(w.events.last().value(QStringLiteral("message")).toString().contains(u"manifest.json"));
}

void TestWorker::hostileTorchScriptIsRefused()
{
    // What a coordinator that was broken into could send: a signed manifest whose model file is a TorchScript
    // program that reads a file. The worker refuses it before the first forward pass, naming the operator; the
    // sandbox (sandboxIsTheFirstEvent) is the wall behind that one.
    const auto dir = test::scratchDir();
    writeTask(dir->path(), 1);
    const QString archive = dir->filePath(QStringLiteral("model.pt"));
    QVERIFY(QFile::copy(QStringLiteral(GLEANER_TORCHSCRIPT_FIXTURES "/reads-file.pt"), archive));
    QFile file(dir->filePath(QStringLiteral("manifest.json")));
    QVERIFY(file.open(QIODevice::ReadOnly));
    QJsonObject manifest = QJsonDocument::fromJson(file.readAll()).object();
    file.close();
    manifest.insert(QStringLiteral("model"),
                    QJsonObject{{QStringLiteral("torchscript"), QString(QStringLiteral("sha256:") + QString(64, u'0'))},
                                {QStringLiteral("input_shape"), QJsonArray{1, 8, 8}},
                                {QStringLiteral("num_classes"), 4}});
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(QJsonDocument(manifest).toJson(QJsonDocument::Compact));
    file.close();

    Worker w;
    w.start(dir->path());
    QCOMPARE(w.finish(), 1);
    const QString message = firstNamed(w.events, QStringLiteral("error")).value(QStringLiteral("message")).toString();
    QVERIFY2(message.contains(u"aten::from_file in __torch__.ReadsFile.forward"), qPrintable(message));
    QVERIFY2(message.contains(archive), qPrintable(message));
    QVERIFY(!QFile::exists(dir->filePath(QStringLiteral("result.safetensors"))));
}

void TestWorker::sandboxIsTheFirstEvent()
{
    const auto dir = test::scratchDir();
    writeTask(dir->path(), 1);
    Worker w;
    w.start(dir->path());
    QCOMPARE(w.finish(), 0);
    QVERIFY(!w.events.isEmpty());
    const QJsonObject sandbox = w.events.first();
    QCOMPARE(sandbox.value(QStringLiteral("event")).toString(), QStringLiteral("sandbox"));
    QVERIFY(sandbox.value(QStringLiteral("no_new_privs")).toBool());
    QVERIFY(sandbox.value(QStringLiteral("no_core_dumps")).toBool());
    if (kernelLandlockAbi() == 0) {
        QCOMPARE(sandbox.value(QStringLiteral("landlock")), QJsonValue(false));
        QSKIP(qPrintable(QStringLiteral("no Landlock here: %1").arg(sandbox.value(QStringLiteral("reason")).toString())));
    }
    QCOMPARE(sandbox.value(QStringLiteral("landlock")), QJsonValue(true));
    QCOMPARE(sandbox.value(QStringLiteral("landlock_abi")).toInt(), kernelLandlockAbi());
    QVERIFY2(sandbox.value(QStringLiteral("problems")).toArray().isEmpty(),
             QJsonDocument(sandbox).toJson().constData());
    QCOMPARE(sandbox.value(QStringLiteral("read_write")).toArray(),
             QJsonArray{QFileInfo(dir->path()).canonicalFilePath()});
}

// The agent's credentials are files of the same user: a task folder whose manifest leads to them (a symbolic link
// here; a model that opens files, later) must not get them. Landlock judges the file the link resolves to.
void TestWorker::symlinkToTheAgentsTokenIsRefused()
{
    const auto scratch = test::scratchDir();
    const QString task = scratch->filePath(QStringLiteral("task"));
    writeTask(task, 1);
    const QString agent = scratch->filePath(QStringLiteral("agent"));
    QVERIFY(QDir().mkpath(agent));
    const QString token = agent + QStringLiteral("/agent.json");
    QVERIFY(test::writeFile(token, R"({"token": "secret"})"));
    QVERIFY(QFile::setPermissions(token, QFileDevice::ReadOwner | QFileDevice::WriteOwner));
    QVERIFY(QFile::remove(task + QStringLiteral("/manifest.json")));
    QVERIFY(QFile::link(token, task + QStringLiteral("/manifest.json")));

    if (kernelLandlockAbi() == 0)
        QSKIP("this kernel has no Landlock: the worker can read what its user can read");
    Worker w;
    w.start(task);
    QCOMPARE(w.finish(), 1);
    const QString message = firstNamed(w.events, QStringLiteral("error")).value(QStringLiteral("message")).toString();
    QVERIFY2(message.contains(u"manifest.json") && message.contains(u"Permission denied"), qPrintable(message));
}

QTEST_GUILESS_MAIN(TestWorker)
#include "TestWorker.moc"
