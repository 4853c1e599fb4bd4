// ProcCpuProbe and the /proc/<pid>/stat parser it shares with the process probe: other programs' CPU share
// from a recorded /proc tree changed between two samples, with the agent's own workers subtracted even when
// one of them exits between the samples.
#include "ProbeTestData.h"
#include "system/ProcCpuProbe.h"
#include "system/ProcStat.h"

#include <QDeadlineTimer>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

namespace {

constexpr qint64 kAgentPid = 100; // the recorded tree's agent; 101 is its worker, 102 the worker's child

QByteArray statLine(qint64 pid, const char* comm, qint64 ppid, qint64 utime, qint64 stime, qint64 cutime,
                    qint64 cstime)
{
    return QStringLiteral(
               "%1 (%2) R %3 %1 %1 0 -1 4194560 1520 0 3 0 %4 %5 %6 %7 20 0 1 0 1100 12345678 345\n")
        .arg(pid)
        .arg(QLatin1String(comm))
        .arg(ppid)
        .arg(utime)
        .arg(stime)
        .arg(cutime)
        .arg(cstime)
        .toUtf8();
}

} // namespace

class TestProcCpuProbe : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void parse_data();
    void parse();
    void treeOfTheAgent();
    void firstSampleKnowsNothing();
    void otherProgramsShare();
    void workerExitingBetweenSamplesIsStillOurs();
    void ourBurstLargerThanTheMachinesIsClampedToZero();
    void missingProcIsUnknown();
    void realProc();
};

void TestProcCpuProbe::parse_data()
{
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<bool>("ok");
    QTest::addColumn<QByteArray>("comm");
    QTest::addColumn<qint64>("ppid");
    QTest::addColumn<qint64>("ticks"); // utime + stime + cutime + cstime

    QTest::newRow("plain") << statLine(42, "bash", 7, 1, 2, 3, 4) << true << QByteArray("bash") << qint64(7)
                           << qint64(10);
    QTest::newRow("spaces and parentheses in the name")
        << statLine(200, "my (odd) prog", 1, 40, 2, 0, 0) << true << QByteArray("my (odd) prog") << qint64(1)
        << qint64(42);
    QTest::newRow("') ' inside the name") << statLine(901, "Web) Content", 900, 50, 5, 0, 0) << true
                                          << QByteArray("Web) Content") << qint64(900) << qint64(55);
    QTest::newRow("a newline inside the name") << statLine(5, "two\nlines", 1, 1, 1, 1, 1) << true
                                               << QByteArray("two\nlines") << qint64(1) << qint64(4);
    QTest::newRow("empty name") << statLine(6, "", 1, 0, 0, 0, 9) << true << QByteArray() << qint64(1)
                                << qint64(9);
    QTest::newRow("recorded file") << readFile(probeData(QStringLiteral("proc/200/stat"))) << true
                                   << QByteArray("my (odd) prog") << qint64(1) << qint64(42);
    QTest::newRow("no parentheses") << QByteArray("42 bash R 1 2 3") << false << QByteArray() << qint64(0)
                                    << qint64(0);
    QTest::newRow("cut short") << QByteArray("42 (bash) R 1 42 42 0 -1 0 0 0 0 0 5") << false << QByteArray()
                               << qint64(0) << qint64(0);
    QTest::newRow("pid not a number") << QByteArray("x (bash) R 1 42 42 0 -1 0 0 0 0 0 5 6 7 8") << false
                                      << QByteArray() << qint64(0) << qint64(0);
    QTest::newRow("utime not a number") << QByteArray("42 (bash) R 1 42 42 0 -1 0 0 0 0 0 5x 6 7 8") << false
                                        << QByteArray() << qint64(0) << qint64(0);
    QTest::newRow("empty") << QByteArray() << false << QByteArray() << qint64(0) << qint64(0);
}

void TestProcCpuProbe::parse()
{
    QFETCH(QByteArray, line);
    QFETCH(bool, ok);
    const Result<ProcStat> stat = parseProcStat(line);
    QCOMPARE(stat.ok(), ok);
    if (!ok) {
        QVERIFY2(stat.error().contains(u"/proc/"), qPrintable(stat.error())); // says what it was reading
        return;
    }
    QTEST(stat->comm, "comm");
    QTEST(stat->ppid, "ppid");
    QTEST(stat->treeTicks(), "ticks");
}

void TestProcCpuProbe::treeOfTheAgent()
{
    const QList<ProcStat> all = readAllProcStats(probeData(QStringLiteral("proc")));
    QCOMPARE(all.size(), 13);
    QCOMPARE(processTree(kAgentPid, all), (QSet<qint64>{100, 101, 102}));
    QCOMPARE(processTree(900, all), (QSet<qint64>{900, 901}));
    QCOMPARE(processTree(12345, all), QSet<qint64>{12345}); // gone: itself only, no crash
}

void TestProcCpuProbe::firstSampleKnowsNothing()
{
    ProcCpuProbe probe(probeData(QStringLiteral("proc")), kAgentPid);
    QVERIFY(!probe.sample().known);
    // Nothing moved since: still nothing to say rather than a division by zero.
    QVERIFY(!probe.sample().known);
}

void TestProcCpuProbe::otherProgramsShare()
{
    const auto dir = scratchDir();
    QVERIFY(copyTree(probeData(QStringLiteral("proc")), dir->path()));
    ProcCpuProbe probe(dir->path(), kAgentPid);
    QVERIFY(!probe.sample().known);

    // 1000 ticks pass on the machine (4 cores x 250): 700 busy (user +600, system +100), 300 idle or iowait.
    QVERIFY(writeFile(dir->filePath(QStringLiteral("stat")), "cpu  10600 0 2100 80280 1020 0 0 0 0 0\n"));
    // Our tree: agent +3, worker +310, worker's child +120 = 433 of the 700.
    QVERIFY(writeFile(dir->filePath(QStringLiteral("100/stat")),
                      statLine(100, "gleaner-agent", 1, 102, 21, 0, 0)));
    QVERIFY(writeFile(dir->filePath(QStringLiteral("101/stat")),
                      statLine(101, "gleaner-worker", 100, 1300, 110, 0, 0)));
    QVERIFY(
        writeFile(dir->filePath(QStringLiteral("102/stat")), statLine(102, "blender", 101, 400, 70, 0, 0)));
    // Another program's own time changing does not enter the sum: it is in the machine's busy time already.
    QVERIFY(writeFile(dir->filePath(QStringLiteral("700/stat")), statLine(700, "obs", 1, 1000, 100, 0, 0)));

    const CpuObservation observation = probe.sample();
    QVERIFY(observation.known);
    QCOMPARE(observation.otherPercent, 26.7); // (700 - 433) / 1000
}

void TestProcCpuProbe::workerExitingBetweenSamplesIsStillOurs()
{
    const auto dir = scratchDir();
    QVERIFY(copyTree(probeData(QStringLiteral("proc")), dir->path()));
    ProcCpuProbe probe(dir->path(), kAgentPid);
    QVERIFY(!probe.sample().known);

    QVERIFY(writeFile(dir->filePath(QStringLiteral("stat")), "cpu  10600 0 2100 80280 1020 0 0 0 0 0\n"));
    QVERIFY(writeFile(dir->filePath(QStringLiteral("100/stat")),
                      statLine(100, "gleaner-agent", 1, 102, 21, 0, 0)));
    // 102 ran 120 more ticks, exited and was waited for: its 400 + 70 now sit in the worker's cutime/cstime.
    QVERIFY(QDir(dir->filePath(QStringLiteral("102"))).removeRecursively());
    QVERIFY(writeFile(dir->filePath(QStringLiteral("101/stat")),
                      statLine(101, "gleaner-worker", 100, 1300, 110, 400, 70)));

    const CpuObservation observation = probe.sample();
    QVERIFY(observation.known);
    // The same 26.7 % as when 102 was alive; without cutime/cstime our tree would seem to have shrunk by 350
    // ticks and the other programs' share would read 73.7 %.
    QCOMPARE(observation.otherPercent, 26.7);
}

void TestProcCpuProbe::ourBurstLargerThanTheMachinesIsClampedToZero()
{
    const auto dir = scratchDir();
    QVERIFY(copyTree(probeData(QStringLiteral("proc")), dir->path()));
    ProcCpuProbe probe(dir->path(), kAgentPid);
    QVERIFY(!probe.sample().known);
    // /proc/stat and the processes are not read at one instant: our tree can show a few ticks more than the
    // machine's busy time. That is "nobody else", not a negative share.
    QVERIFY(writeFile(dir->filePath(QStringLiteral("stat")), "cpu  10100 0 2000 80900 1000 0 0 0 0 0\n"));
    QVERIFY(writeFile(dir->filePath(QStringLiteral("101/stat")),
                      statLine(101, "gleaner-worker", 100, 1105, 100, 0, 0)));
    const CpuObservation observation = probe.sample();
    QVERIFY(observation.known);
    QCOMPARE(observation.otherPercent, 0.0);
}

void TestProcCpuProbe::missingProcIsUnknown()
{
    const auto dir = scratchDir();
    ProcCpuProbe probe(dir->filePath(QStringLiteral("no-proc-here")), kAgentPid);
    QTest::ignoreMessage(QtWarningMsg,
                         QRegularExpression(QStringLiteral("no-proc-here/stat has no \"cpu\" summary "
                                                           "line.*is /proc mounted")));
    QVERIFY(!probe.sample().known);
    QVERIFY(!probe.sample().known); // and warns once
}

void TestProcCpuProbe::realProc()
{
    ProcCpuProbe probe; // this process and its descendants are "ours"
    QVERIFY(!probe.sample().known);
    // Keep one core busy until a clock tick has passed (10 ms at USER_HZ 100): our own burn is subtracted.
    const QDeadlineTimer deadline(5000);
    CpuObservation observation;
    while (!observation.known && !deadline.hasExpired())
        observation = probe.sample();
    QVERIFY(observation.known);
    QVERIFY(observation.otherPercent >= 0.0 && observation.otherPercent <= 100.0);
}

QTEST_GUILESS_MAIN(TestProcCpuProbe)
#include "TestProcCpuProbe.moc"
