// The worker's sandbox: the Landlock rights each ABI version knows, the reasons given when Landlock is missing,
// the event the agent reads, and the real thing applied to a process (sandbox_probe) that then tries to read a
// fake agent's token file, write beside its task folder, connect, execute and signal its parent.
#include "worker/WorkerSandbox.h"

#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QTcpServer>
#include <QTest>

#include <cerrno>
#include <cstdint>
#include <linux/landlock.h>
#include <sys/syscall.h>
#include <unistd.h>

using namespace gleaner;
using namespace gleaner::agent;

class TestWorkerSandbox : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void handledRightsFollowTheAbi_data();
    void handledRightsFollowTheAbi();
    void missingLandlockIsExplained_data();
    void missingLandlockIsExplained();
    void eventSaysWhyTheFileSystemIsOpen();
    void workerRulesHoldTheTaskFolderAndNoHome();
    void probeCannotReadTheAgentsToken();
};

void TestWorkerSandbox::handledRightsFollowTheAbi_data()
{
    QTest::addColumn<int>("abi");
    QTest::addColumn<quint64>("rights");
    QTest::newRow("none") << 0 << quint64(0);
    QTest::newRow("1: execute .. make_sym") << 1 << quint64(0x1fff);
    QTest::newRow("2: + refer") << 2 << quint64(0x3fff);
    QTest::newRow("3: + truncate") << 3 << quint64(0x7fff);
    QTest::newRow("4: network only") << 4 << quint64(0x7fff);
    QTest::newRow("5: + ioctl_dev") << 5 << quint64(0xffff);
    QTest::newRow("7: nothing new for files") << 7 << quint64(0xffff);
}

void TestWorkerSandbox::handledRightsFollowTheAbi()
{
    QFETCH(int, abi);
    QFETCH(quint64, rights);
    QCOMPARE(quint64(WorkerSandbox::handledFileAccess(abi)), rights);
}

void TestWorkerSandbox::missingLandlockIsExplained_data()
{
    QTest::addColumn<int>("error");
    QTest::addColumn<QString>("says");
    QTest::newRow("old kernel") << int(ENOSYS) << QStringLiteral("Linux 5.13");
    QTest::newRow("not enabled") << int(EOPNOTSUPP) << QStringLiteral("lsm=");
    QTest::newRow("other") << int(EPERM) << QStringLiteral("not usable");
}

void TestWorkerSandbox::missingLandlockIsExplained()
{
    QFETCH(int, error);
    QFETCH(QString, says);
    QVERIFY2(WorkerSandbox::missingReason(error).contains(says), qPrintable(WorkerSandbox::missingReason(error)));
}

void TestWorkerSandbox::eventSaysWhyTheFileSystemIsOpen()
{
    SandboxReport open;
    open.noNewPrivs = true;
    open.landlockReason = WorkerSandbox::missingReason(ENOSYS);
    const QJsonObject event = open.toEvent();
    QCOMPARE(event.value(QStringLiteral("event")).toString(), QStringLiteral("sandbox"));
    QCOMPARE(event.value(QStringLiteral("landlock")), QJsonValue(false));
    QCOMPARE(event.value(QStringLiteral("reason")).toString(), open.landlockReason);

    SandboxReport confined;
    confined.landlock = true;
    confined.landlockAbi = 6;
    QVERIFY(!confined.toEvent().contains(QStringLiteral("reason")));
    QCOMPARE(confined.toEvent().value(QStringLiteral("landlock_abi")).toInt(), 6);
}

void TestWorkerSandbox::workerRulesHoldTheTaskFolderAndNoHome()
{
    const SandboxRules rules = SandboxRules::forWorker(QStringLiteral("/tmp/task"), false);
    QCOMPARE(rules.readWrite, QStringList{QStringLiteral("/tmp/task")});
    QVERIFY(rules.readOnly.contains(QStringLiteral("/usr")));
    QVERIFY(rules.devices.contains(QStringLiteral("/dev/null")));
    for (const QString& path : rules.readOnly + rules.devices) {
        QVERIFY2(!path.startsWith(QDir::homePath()) && path != u"/" && path != u"/etc" && path != u"/tmp"
                     && path != u"/proc",
                 qPrintable(path));
    }
    const SandboxRules gpu = SandboxRules::forWorker(QStringLiteral("/tmp/task"), true);
    for (const QString& device : gpu.devices)
        QVERIFY2(device == u"/dev/null" || device.startsWith(u"/dev/nvidia"), qPrintable(device));
}

void TestWorkerSandbox::probeCannotReadTheAgentsToken()
{
    const auto scratch = test::scratchDir();
    const QString task = scratch->filePath(QStringLiteral("task"));
    const QString agent = scratch->filePath(QStringLiteral("agent"));
    QVERIFY(QDir().mkpath(task) && QDir().mkpath(agent));
    QVERIFY(test::writeFile(task + QStringLiteral("/input.txt"), "shard"));
    const QString token = agent + QStringLiteral("/token");
    QVERIFY(test::writeFile(token, "secret"));
    QVERIFY(QFile::setPermissions(token, QFileDevice::ReadOwner | QFileDevice::WriteOwner));
    QTcpServer server;
    QVERIFY(server.listen(QHostAddress::LocalHost, 0));

    QProcess probe;
    probe.start(QStringLiteral(GLEANER_SANDBOX_PROBE_BIN),
                {task, token, QString::number(server.serverPort())});
    QVERIFY(probe.waitForFinished(60'000));
    QCOMPARE(probe.exitCode(), 0);
    const QJsonObject answers = QJsonDocument::fromJson(probe.readAllStandardOutput()).object();
    const QJsonObject report = answers.value(QStringLiteral("report")).toObject();
    QVERIFY2(!report.isEmpty(), probe.readAllStandardError().constData());
    const auto errnoOf = [&answers](const char* name) { return answers.value(QLatin1String(name)).toInt(-1); };

    // What holds on every Linux kernel.
    QVERIFY(report.value(QStringLiteral("no_new_privs")).toBool());
    QVERIFY(report.value(QStringLiteral("no_core_dumps")).toBool());
    QCOMPARE(answers.value(QStringLiteral("core_limit")).toInteger(), 0);
    QCOMPARE(answers.value(QStringLiteral("dumpable")).toInt(), 0);
    QVERIFY(report.value(QStringLiteral("max_open_files")).toInteger() <= WorkerSandbox::kMaxOpenFiles);
    QVERIFY(report.value(QStringLiteral("max_open_files")).toInteger() > 0);

    // Asked directly, so that a sandbox that fails to use a Landlock the kernel has fails this test.
    const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi <= 0) {
        const QString reason = WorkerSandbox::missingReason(errno);
        QCOMPARE(report.value(QStringLiteral("reason")).toString(), reason);
        QSKIP(qPrintable(QStringLiteral("the file-system sandbox cannot be tested here: %1").arg(reason)));
    }
    QVERIFY2(report.value(QStringLiteral("landlock")).toBool(), qPrintable(report.value(QStringLiteral("reason")).toString()));
    QCOMPARE(report.value(QStringLiteral("landlock_abi")).toInt(), int(abi));
    QCOMPARE(errnoOf("read_forbidden"), int(EACCES));
    QCOMPARE(errnoOf("list_forbidden_folder"), int(EACCES));
    QCOMPARE(errnoOf("write_beside_task"), int(EACCES));
    QCOMPARE(errnoOf("read_passwd"), int(EACCES));
    QCOMPARE(errnoOf("exec"), int(EACCES));
    QCOMPARE(errnoOf("read_task"), 0);
    QCOMPARE(errnoOf("write_task"), 0);
    QCOMPARE(errnoOf("rename_in_task"), 0);
    QCOMPARE(errnoOf("remove_in_task"), 0);
    QCOMPARE(errnoOf("read_library"), 0);
    QCOMPARE(errnoOf("read_cpu_count"), 0);
    QCOMPARE(errnoOf("write_dev_null"), 0);
    QVERIFY(!QFile::exists(task + QStringLiteral("-beside.txt")));
    QVERIFY(report.value(QStringLiteral("problems")).toArray().isEmpty());
    if (report.value(QStringLiteral("landlock_abi")).toInt() >= 4)
        QCOMPARE(errnoOf("tcp_connect"), int(EACCES));
    if (report.value(QStringLiteral("landlock_abi")).toInt() >= 6)
        QCOMPARE(errnoOf("signal_parent"), int(EPERM));
}

QTEST_GUILESS_MAIN(TestWorkerSandbox)
#include "TestWorkerSandbox.moc"
