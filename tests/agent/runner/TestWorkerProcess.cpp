// WorkerProcess with stand-in workers (small shell scripts): events from stdout, commands to stdin, and each
// way a worker can end, including the memory cap. The real gleaner-worker is covered by test_worker and the
// end-to-end tests.
#include "runner/WorkerProcess.h"

#include "TestSupport.h"

#include <QSignalSpy>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

Q_DECLARE_METATYPE(gleaner::agent::WorkerEnd)

class TestWorkerProcess : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void argumentsFollowTheWorkerProtocol();
    void eventsAndADoneExit();
    void commandsReachTheWorker();
    void failureCarriesTheErrorEvent();
    void crashIsNamed();
    void memoryCapStopsTheWorker();
    void kernelMemoryCapIsNamed();
    void missingProgramIsReported();

private:
    QString script(const QString& name, const QByteArray& body);
    WorkerEnd runToEnd(WorkerProcess& worker, QList<QJsonObject>* events = nullptr, int timeoutMs = 20'000);

    std::unique_ptr<QTemporaryDir> m_dir;
};

void TestWorkerProcess::init()
{
    qRegisterMetaType<WorkerEnd>();
    m_dir = test::scratchDir();
}

QString TestWorkerProcess::script(const QString& name, const QByteArray& body)
{
    const QString path = m_dir->filePath(name);
    test::writeFile(path, QByteArray(QByteArray("#!/bin/sh\n") + body));
    QFile::setPermissions(path, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
    return path;
}

WorkerEnd TestWorkerProcess::runToEnd(WorkerProcess& worker, QList<QJsonObject>* events, int timeoutMs)
{
    QSignalSpy ended(&worker, &WorkerProcess::ended);
    if (events)
        connect(&worker, &WorkerProcess::event, this, [events](const QJsonObject& e) { events->append(e); });
    worker.start();
    if (!ended.wait(timeoutMs))
        return WorkerEnd{};
    return ended.first().first().value<WorkerEnd>();
}

void TestWorkerProcess::argumentsFollowTheWorkerProtocol()
{
    WorkerLaunch launch;
    launch.taskDir = QStringLiteral("/t");
    launch.threads = 3;
    launch.cpuShare = 0.5;
    launch.checkpointIntervalSeconds = 10;
    QCOMPARE(WorkerProcess::arguments(launch),
             (QStringList{"--task", "/t", "--threads", "3", "--cpu-share", "0.5", "--checkpoint-interval",
                          "10", "--device", "cpu"}));
    launch.threads = 0;
    QVERIFY(!WorkerProcess::arguments(launch).contains(QStringLiteral("--threads")));
    QVERIFY(!WorkerProcess::arguments(launch).contains(QStringLiteral("--max-memory-mb")));
    QVERIFY(!WorkerProcess::arguments(launch).contains(QStringLiteral("--allow-unconfined-models")));
    // Whole MiB, rounded up: the kernel's cap never undercuts the owner's.
    launch.kernelMemoryCapBytes = 1536LL * 1024 * 1024 + 1;
    launch.allowUnconfinedModels = true;
    const QStringList args = WorkerProcess::arguments(launch);
    QCOMPARE(args.mid(args.indexOf(QStringLiteral("--max-memory-mb")), 2),
             (QStringList{"--max-memory-mb", "1537"}));
    QVERIFY(args.contains(QStringLiteral("--allow-unconfined-models")));
}

void TestWorkerProcess::eventsAndADoneExit()
{
    WorkerLaunch launch;
    launch.program = script(QStringLiteral("done.sh"), R"(echo '{"event":"started","step":0,"of":2}'
echo 'not json'
printf '{"event":"progress","step":1,'
printf '"of":2}\n'
echo 'a note for the log' >&2
echo '{"event":"done","samples":64}'
exit 0
)");
    WorkerProcess worker(launch);
    QList<QJsonObject> events;
    const WorkerEnd end = runToEnd(worker, &events);
    QCOMPARE(int(end.kind), int(WorkerEnd::Kind::Done));
    QCOMPARE(events.size(), 3); // the line that is not JSON is logged, not passed on; a split line is joined
    QCOMPARE(events[1].value(QStringLiteral("step")).toInt(), 1);
    QCOMPARE(events[2].value(QStringLiteral("event")).toString(), QStringLiteral("done"));
}

void TestWorkerProcess::commandsReachTheWorker()
{
    WorkerLaunch launch;
    launch.program = script(QStringLiteral("echo.sh"), R"(while read cmd; do
  echo "{\"event\":\"got\",\"command\":\"$cmd\"}"
  [ "$cmd" = stop ] && exit 3
done
exit 1
)");
    WorkerProcess worker(launch);
    QList<QJsonObject> events;
    connect(&worker, &WorkerProcess::event, this, [&](const QJsonObject& e) {
        events.append(e);
        if (events.size() == 1)
            worker.send("stop");
    });
    QSignalSpy ended(&worker, &WorkerProcess::ended);
    worker.start();
    worker.send("pause");
    QVERIFY(ended.wait(10'000));
    QCOMPARE(int(ended.first().first().value<WorkerEnd>().kind), int(WorkerEnd::Kind::Stopped));
    QCOMPARE(events.size(), 2);
    QCOMPARE(events[0].value(QStringLiteral("command")).toString(), QStringLiteral("pause"));
    QCOMPARE(events[1].value(QStringLiteral("command")).toString(), QStringLiteral("stop"));
}

void TestWorkerProcess::failureCarriesTheErrorEvent()
{
    WorkerLaunch launch;
    launch.program = script(QStringLiteral("fail.sh"),
                            R"(echo '{"event":"error","message":"shard.safetensors: x has 3 rows, y has 4"}'
exit 1
)");
    WorkerProcess worker(launch);
    const WorkerEnd end = runToEnd(worker);
    QCOMPARE(int(end.kind), int(WorkerEnd::Kind::Failed));
    QCOMPARE(end.reason, QStringLiteral("shard.safetensors: x has 3 rows, y has 4"));

    WorkerLaunch silent;
    silent.program = script(QStringLiteral("silent.sh"), "echo 'libtorch: out of cheese' >&2\nexit 7\n");
    WorkerProcess other(silent);
    const WorkerEnd odd = runToEnd(other);
    QCOMPARE(int(odd.kind), int(WorkerEnd::Kind::Crashed));
    QVERIFY2(odd.reason.contains(u"code 7") && odd.reason.contains(u"out of cheese"), qPrintable(odd.reason));
}

void TestWorkerProcess::crashIsNamed()
{
    WorkerLaunch launch;
    launch.program = script(QStringLiteral("crash.sh"), "echo 'about to fall' >&2\nkill -SEGV $$\n");
    WorkerProcess worker(launch);
    const WorkerEnd end = runToEnd(worker);
    QCOMPARE(int(end.kind), int(WorkerEnd::Kind::Crashed));
    QVERIFY2(end.reason.contains(u"crashed") && end.reason.contains(u"about to fall"),
             qPrintable(end.reason));
}

void TestWorkerProcess::memoryCapStopsTheWorker()
{
    WorkerLaunch launch;
    // The shell becomes python, which holds 200 MB until it is killed.
    launch.program =
        script(QStringLiteral("hog.sh"),
               "exec python3 -c 'import time; x = bytearray(200 * 1024 * 1024); time.sleep(60)'\n");
    launch.memoryCapBytes = 64LL * 1024 * 1024;
    WorkerProcess worker(launch);
    const WorkerEnd end = runToEnd(worker);
    QCOMPARE(int(end.kind), int(WorkerEnd::Kind::OverMemory));
    QVERIFY2(end.reason.contains(u"over the cap of 64 MB"), qPrintable(end.reason));
    QVERIFY(worker.residentBytes() > launch.memoryCapBytes);
}

void TestWorkerProcess::kernelMemoryCapIsNamed()
{
    // The worker's allocation failed under RLIMIT_DATA (what test_worker's memoryCapEndsTheSubtask does for
    // real): the agent names the cap it gave, whatever the worker's own words.
    WorkerLaunch launch;
    launch.kernelMemoryCapBytes = 64LL * 1024 * 1024;
    launch.program = script(QStringLiteral("capped.sh"),
                            R"(echo '{"event":"error","message":"training: out of memory","memory_cap":true}'
exit 1
)");
    WorkerProcess worker(launch);
    const WorkerEnd end = runToEnd(worker);
    QCOMPARE(int(end.kind), int(WorkerEnd::Kind::OverMemory));
    QVERIFY2(end.reason.startsWith(u"the worker exceeded its memory cap of 64 MB"), qPrintable(end.reason));

    // Failed outside libtorch (a thread's stack): glibc's or OpenMP's last words on stderr say so.
    WorkerLaunch threads = launch;
    threads.program = script(QStringLiteral("nothread.sh"),
                             "echo 'libgomp: Thread creation failed: Cannot allocate memory' >&2\nexit 1\n");
    WorkerProcess other(threads);
    QCOMPARE(int(runToEnd(other).kind), int(WorkerEnd::Kind::OverMemory));

    // Without a kernel cap the same words are an ordinary failure.
    WorkerLaunch uncapped = launch;
    uncapped.kernelMemoryCapBytes = 0;
    WorkerProcess plain(uncapped);
    const WorkerEnd failed = runToEnd(plain);
    QCOMPARE(int(failed.kind), int(WorkerEnd::Kind::Failed));
    QCOMPARE(failed.reason, QStringLiteral("training: out of memory"));
}

void TestWorkerProcess::missingProgramIsReported()
{
    WorkerLaunch launch;
    launch.program = m_dir->filePath(QStringLiteral("no-such-worker"));
    WorkerProcess worker(launch);
    const WorkerEnd end = runToEnd(worker);
    QCOMPARE(int(end.kind), int(WorkerEnd::Kind::NotStarted));
    QVERIFY2(end.reason.contains(u"no-such-worker"), qPrintable(end.reason));
}

QTEST_GUILESS_MAIN(TestWorkerProcess)
#include "TestWorkerProcess.moc"
