// ProcProcessProbe: which pause-list programs run, from a recorded /proc tree (kernel names cut to 15 bytes,
// Wine programs with Windows paths, a kernel thread, the agent's own tree) and from the real /proc.
#include "ProbeTestData.h"
#include "system/ProcProcessProbe.h"
#include "system/ProcessProbe.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

class TestProcProcessProbe : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void matches_data();
    void matches();
    void running_data();
    void running();
    void ourOwnTreeIsSkipped();
    void missingProcFindsNothing();
    void realProc();
    void fake();
};

void TestProcProcessProbe::matches_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("comm");
    QTest::addColumn<QString>("argv0");
    QTest::addColumn<bool>("expected");

    const QString steamPath = QStringLiteral("/home/ann/.local/share/Steam/ubuntu12_32/steam");
    const QString wineSteam = QStringLiteral("C:\\Program Files (x86)\\Steam\\steam.exe");
    QTest::newRow("comm") << "steam"
                          << "steam" << steamPath << true;
    QTest::newRow("case-insensitive") << "Steam"
                                      << "steam" << steamPath << true;
    QTest::newRow("argv[0] basename") << "steam"
                                      << "srt-logger" << steamPath << true;
    QTest::newRow("a prefix is not a match") << "ste"
                                             << "steam" << steamPath << false;
    QTest::newRow("a longer name is not a match") << "steamwebhelper"
                                                  << "steam" << steamPath << false;
    QTest::newRow("a folder in the path is not a match") << "ubuntu12_32"
                                                         << "steam" << steamPath << false;
    QTest::newRow("Wine: name with .exe") << "steam.exe"
                                          << "steam.exe" << wineSteam << true;
    QTest::newRow("Wine: name without .exe") << "steam"
                                             << "steam.exe" << wineSteam << true;
    QTest::newRow("Wine: from the Windows path") << "STEAM.EXE"
                                                 << "wine-preloader" << wineSteam << true;
    QTest::newRow("name longer than 15: comm prefix") << "gnome-disk-utility"
                                                      << "gnome-disk-util" << QString() << true;
    QTest::newRow("15-char comm, another long name") << "gnome-disk-usage"
                                                     << "gnome-disk-util" << QString() << false;
    QTest::newRow("exactly 15 characters") << "gnome-disk-util"
                                           << "gnome-disk-util" << QString() << true;
    QTest::newRow("Wine name cut to 15 with .exe") << "RobloxPlayerBeta.exe"
                                                   << "RobloxPlayerBet" << QString() << true;
    QTest::newRow("Wine name cut to 15 without .exe") << "RobloxPlayerBeta"
                                                      << "RobloxPlayerBet" << QString() << true;
    QTest::newRow("short comm is not a truncation") << "obsidian"
                                                    << "obs"
                                                    << "obs" << false;
    QTest::newRow("odd characters") << "my (odd) prog"
                                    << "my (odd) prog"
                                    << "/opt/odd/my (odd) prog" << true;
    QTest::newRow("surrounding spaces in the preference") << "  obs "
                                                          << "obs"
                                                          << "obs" << true;
    QTest::newRow("empty name matches nothing") << ""
                                                << ""
                                                << "" << false;
    QTest::newRow("kernel thread: comm only") << "kworker/0:1-eve"
                                              << "kworker/0:1-eve" << QString() << true;
}

void TestProcProcessProbe::matches()
{
    QFETCH(QString, name);
    QFETCH(QString, comm);
    QFETCH(QString, argv0);
    QTEST(ProcProcessProbe::matches(name, comm, argv0), "expected");
}

void TestProcProcessProbe::running_data()
{
    QTest::addColumn<QStringList>("names");
    QTest::addColumn<QStringList>("expected");

    QTest::newRow("nothing asked") << QStringList() << QStringList();
    QTest::newRow("spelled as given, in the preference's order")
        << QStringList{"vlc", "OBS", "Steam", "gnome-disk-utility", "my (odd) prog"}
        << QStringList{"OBS", "Steam", "gnome-disk-utility", "my (odd) prog"};
    QTest::newRow("Wine programs") << QStringList{"steam.exe", "RobloxPlayerBeta", "RobloxPlayerBeta.exe"}
                                   << QStringList{"steam.exe", "RobloxPlayerBeta", "RobloxPlayerBeta.exe"};
    QTest::newRow("a child process found by its argv[0]")
        << QStringList{"firefox-esr"} << QStringList{"firefox-esr"};
    QTest::newRow("a duplicate listed once") << QStringList{"obs", "obs"} << QStringList{"obs"};
    QTest::newRow("none running") << QStringList{"blender-not", "kodi", "steamwebhelper"} << QStringList();
}

void TestProcProcessProbe::running()
{
    QFETCH(QStringList, names);
    ProcProcessProbe probe(probeData(QStringLiteral("proc")), 100);
    QTEST(probe.running(names), "expected");
}

void TestProcProcessProbe::ourOwnTreeIsSkipped()
{
    const QStringList names{"blender", "gleaner-worker", "gleaner-agent", "obs"};
    // As the agent (pid 100): its worker and the worker's blender are not "another program".
    ProcProcessProbe asAgent(probeData(QStringLiteral("proc")), 100);
    QCOMPARE(asAgent.running(names), QStringList{"obs"});
    // As some other process, the same tree is somebody else's.
    ProcProcessProbe asOther(probeData(QStringLiteral("proc")), 4242);
    QCOMPARE(asOther.running(names), names);
}

void TestProcProcessProbe::missingProcFindsNothing()
{
    ProcProcessProbe probe(QStringLiteral("/nonexistent/proc"), 100);
    QCOMPARE(probe.running({"steam"}), QStringList());
}

void TestProcProcessProbe::realProc()
{
    const QString init = QString::fromUtf8(readFile(QStringLiteral("/proc/1/comm")).trimmed());
    if (init.isEmpty())
        QSKIP("/proc/1/comm cannot be read here (no /proc, or hidepid): nothing to look for");
    ProcProcessProbe probe;
    QCOMPARE(probe.running({init}), QStringList{init});
    // This test program is ours: not found, although it certainly runs.
    const QString self = QString::fromUtf8(readFile(QStringLiteral("/proc/self/comm")).trimmed());
    QCOMPARE(probe.running({self}), QStringList());
}

void TestProcProcessProbe::fake()
{
    FakeProcessProbe probe;
    probe.runningPrograms = {"steam"};
    QCOMPARE(probe.running({"obs", "Steam", "steam"}), (QStringList{"Steam", "steam"}));
}

QTEST_GUILESS_MAIN(TestProcProcessProbe)
#include "TestProcProcessProbe.moc"
