// The worker's sandbox: the Landlock rights each ABI version knows, the reasons given when Landlock is missing,
// the event the agent reads, and the real thing applied to a process (sandbox_probe) that then tries to read a
// fake agent's token file, write beside its task folder, connect, execute and signal its parent, open a Unix socket,
// trace, leave its namespaces, call by another architecture's numbers and allocate past its memory cap.
#include "worker/PrivateNetwork.h"
#include "worker/WorkerRun.h"
#include "worker/WorkerSandbox.h"

#include "TestSupport.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLocalServer>
#include <QProcess>
#include <QTcpServer>
#include <QTest>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <sys/resource.h>
#include <sys/stat.h>
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
    void probeCannotReachTheNetworkOrLeave();
    void probeUnderAUserNamespaceKeepsTheOwner();
    void eventNamesEveryLayer();
    void stackAllowanceFollowsTheThreads();
    void torchScriptNeedsTheFilterOrTheCap_data();
    void torchScriptNeedsTheFilterOrTheCap();
    void failedAllocationIsTheCapsDoing();
    void refusedNamespaceIsExplained_data();
    void refusedNamespaceIsExplained();

private:
    // Runs sandbox_probe (as `user` through setpriv when not empty) on a fresh task folder; its answers.
    QJsonObject probe(const QStringList& extra = {}, const QString& user = {}, QString* taskDir = nullptr);
    std::unique_ptr<QTemporaryDir> m_scratch;
};

QJsonObject TestWorkerSandbox::probe(const QStringList& extra, const QString& user, QString* taskDir)
{
    m_scratch = test::scratchDir();
    const QString task = m_scratch->filePath(QStringLiteral("task"));
    const QString agent = m_scratch->filePath(QStringLiteral("agent"));
    if (!QDir().mkpath(task) || !QDir().mkpath(agent) || !test::writeFile(task + QStringLiteral("/input.txt"), "shard"))
        return {};
    if (taskDir)
        *taskDir = task;
    QLocalServer unixServer;
    if (!unixServer.listen(m_scratch->filePath(QStringLiteral("agent.sock"))))
        return {};
    QTcpServer server;
    if (!server.listen(QHostAddress::LocalHost, 0))
        return {};
    QStringList args{task, agent + QStringLiteral("/token"), QString::number(server.serverPort()),
                     unixServer.fullServerName()};
    args << extra;
    QString program = QStringLiteral(GLEANER_SANDBOX_PROBE_BIN);
    if (!user.isEmpty()) {
        // The probe's folders must be its user's: that user is who writes in the task folder.
        for (const QString& path : QStringList{m_scratch->path(), task, task + QStringLiteral("/input.txt")})
            if (::chown(QFile::encodeName(path).constData(), 65534, 65534) != 0)
                return {};
        args.prepend(program);
        args = QStringList{QStringLiteral("--reuid=") + user, QStringLiteral("--regid=") + user,
                           QStringLiteral("--clear-groups")} + args;
        program = QStringLiteral("setpriv");
    }
    QProcess process;
    process.start(program, args);
    if (!process.waitForFinished(60'000) || process.exitCode() != 0) {
        qWarning() << "sandbox_probe:" << process.readAllStandardError();
        return {};
    }
    return QJsonDocument::fromJson(process.readAllStandardOutput()).object();
}

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
                {task, token, QString::number(server.serverPort()), scratch->filePath(QStringLiteral("none.sock"))});
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
    // The seccomp filter kills it before Landlock could refuse it.
    QCOMPARE(errnoOf("exec"), report.value(QStringLiteral("seccomp")).toBool() ? -SIGSYS : int(EACCES));
    QCOMPARE(errnoOf("read_task"), 0);
    QCOMPARE(errnoOf("write_task"), 0);
    QCOMPARE(errnoOf("rename_in_task"), 0);
    QCOMPARE(errnoOf("remove_in_task"), 0);
    QCOMPARE(errnoOf("read_library"), 0);
    QCOMPARE(errnoOf("read_cpu_count"), 0);
    QCOMPARE(errnoOf("write_dev_null"), 0);
    QVERIFY(!QFile::exists(task + QStringLiteral("-beside.txt")));
    QVERIFY(report.value(QStringLiteral("problems")).toArray().isEmpty());
    if (report.value(QStringLiteral("seccomp")).toBool())
        QCOMPARE(errnoOf("tcp_connect"), int(EPERM)); // no socket at all
    else if (report.value(QStringLiteral("landlock_abi")).toInt() >= 4)
        QCOMPARE(errnoOf("tcp_connect"), int(EACCES));
    if (report.value(QStringLiteral("landlock_abi")).toInt() >= 6)
        QCOMPARE(errnoOf("signal_parent"), int(EPERM));
}

void TestWorkerSandbox::probeCannotReachTheNetworkOrLeave()
{
    // 512 MiB: room for what the probe holds (Qt and libtorch are loaded), not for twice that.
    const QJsonObject answers = probe({QStringLiteral("512")});
    QVERIFY(!answers.isEmpty());
    const QJsonObject report = answers.value(QStringLiteral("report")).toObject();
    const auto answer = [&answers](const char* name) { return answers.value(QLatin1String(name)).toInt(-1000); };
    // libseccomp is part of the build: a worker without the filter is a defect here, not a skip.
    QVERIFY2(report.value(QStringLiteral("seccomp")).toBool(),
             qPrintable(report.value(QStringLiteral("seccomp_reason")).toString()));
    QCOMPARE(answer("unix_socket"), int(EPERM));
    QCOMPARE(answer("socketpair"), int(EPERM));
    QCOMPARE(answer("unix_connect"), int(EPERM)); // a socket held from before cannot connect either
    QCOMPARE(answer("tcp_connect"), int(EPERM));
    QCOMPARE(answer("exec"), -SIGSYS);
    QCOMPARE(answer("ptrace"), -SIGSYS);
    QCOMPARE(answer("unshare_user"), -SIGSYS);
    QCOMPARE(answer("personality"), -SIGSYS);
    QCOMPARE(answer("clone3"), int(ENOSYS)); // glibc falls back to clone, whose flags the filter sees
    QCOMPARE(answer("x32_syscall"), -SIGSYS);
    if (answers.contains(QStringLiteral("i386_syscall")) && answer("i386_syscall") != -SIGSEGV) // SEGV: no ia32
        QCOMPARE(answer("i386_syscall"), -SIGSYS);
    QCOMPARE(answer("thread"), 0);

    QCOMPARE(report.value(QStringLiteral("memory_cap_mb")).toInt(), 512);
    QCOMPARE(report.value(QStringLiteral("data_limit_mb")).toInt(),
             512 + int(SandboxLimits::stackAllowance(1) / (1024 * 1024)));
    QCOMPARE(answer("allocate_half_cap"), 0);
    QCOMPARE(answer("allocate_over_cap"), int(ENOMEM));

    // Root (these tests' usual user) enters the network namespace alone.
    QVERIFY2(report.value(QStringLiteral("network_namespace")).toBool(),
             qPrintable(report.value(QStringLiteral("network_reason")).toString()));
    QVERIFY(answers.value(QStringLiteral("network_namespace_changed")).toBool());
}

void TestWorkerSandbox::probeUnderAUserNamespaceKeepsTheOwner()
{
    if (::geteuid() != 0)
        QSKIP("runs the probe as another user, which needs root; as this user probeCannotReachTheNetworkOrLeave "
              "covers it");
    QString task;
    const QJsonObject answers = probe({}, QStringLiteral("65534"), &task);
    QVERIFY(!answers.isEmpty());
    const QJsonObject report = answers.value(QStringLiteral("report")).toObject();
    if (!report.value(QStringLiteral("network_namespace")).toBool()) {
        // The reason must name the remedy; the kernel's setting is the owner's to change.
        const QString reason = report.value(QStringLiteral("network_reason")).toString();
        QVERIFY2(reason.contains(u"user namespace") || reason.contains(u"CONFIG_"), qPrintable(reason));
        QSKIP(qPrintable(QStringLiteral("no user namespaces for other users here: %1").arg(reason)));
    }
    QVERIFY(report.value(QStringLiteral("user_namespace")).toBool());
    QVERIFY(answers.value(QStringLiteral("network_namespace_changed")).toBool());
    QVERIFY2(report.value(QStringLiteral("problems")).toArray().isEmpty(),
             qPrintable(QJsonDocument(report.value(QStringLiteral("problems")).toArray()).toJson()));
    // Files written in the task folder are the user's, as without the namespace (the id map is the identity).
    QCOMPARE(answers.value(QStringLiteral("write_kept")).toInt(-1), 0);
    struct stat st{};
    QCOMPARE(::stat(QFile::encodeName(task + QStringLiteral("/kept.txt")).constData(), &st), 0);
    QCOMPARE(int(st.st_uid), 65534);
    QCOMPARE(int(st.st_gid), 65534);
}

void TestWorkerSandbox::eventNamesEveryLayer()
{
    SandboxReport report;
    report.noNewPrivs = true;
    report.noCoreDumps = true;
    report.maxOpenFiles = 256;
    report.landlock = true;
    report.landlockAbi = 3;
    report.seccomp = true;
    report.memoryCapBytes = 2048LL * 1024 * 1024;
    report.networkReason = QStringLiteral("user namespaces are not allowed to this user");
    const QJsonObject event = report.toEvent();
    QCOMPARE(event.value(QStringLiteral("layers")).toArray().toVariantList(),
             QVariantList({QStringLiteral("no_new_privs"), QStringLiteral("no_core_dumps"), QStringLiteral("open_files"),
                           QStringLiteral("memory_cap"), QStringLiteral("landlock"), QStringLiteral("seccomp")}));
    QCOMPARE(event.value(QStringLiteral("missing")).toArray().toVariantList(),
             QVariantList({QStringLiteral("network_namespace"), QStringLiteral("landlock_tcp"),
                           QStringLiteral("landlock_scoped")}));
    QCOMPARE(event.value(QStringLiteral("memory_cap_mb")).toInt(), 2048);
    QCOMPARE(event.value(QStringLiteral("network_reason")).toString(), report.networkReason);
    QVERIFY(!event.contains(QStringLiteral("seccomp_reason")));
    report.seccomp = false;
    report.seccompReason = QStringLiteral("seccomp exists only on Linux");
    QCOMPARE(report.toEvent().value(QStringLiteral("seccomp_reason")).toString(), report.seccompReason);
    QVERIFY(report.missingLayers().contains(QStringLiteral("seccomp")));
}

void TestWorkerSandbox::stackAllowanceFollowsTheThreads()
{
    // 8 MiB stacks (the usual RLIMIT_STACK): 6 stacks for one compute thread, 36 for sixteen.
    rlimit stack{};
    QCOMPARE(::getrlimit(RLIMIT_STACK, &stack), 0);
    if (stack.rlim_cur != 8 << 20)
        QSKIP("RLIMIT_STACK is not 8 MiB here");
    QCOMPARE(SandboxLimits::stackAllowance(1), 48LL << 20);
    QCOMPARE(SandboxLimits::stackAllowance(16), 288LL << 20);
    QVERIFY(SandboxLimits::stackAllowance(0) >= SandboxLimits::stackAllowance(1)); // one per core
}

void TestWorkerSandbox::torchScriptNeedsTheFilterOrTheCap_data()
{
    QTest::addColumn<bool>("seccomp");
    QTest::addColumn<qint64>("cap");
    QTest::addColumn<bool>("allowed");
    QTest::addColumn<bool>("refused");
    QTest::newRow("both") << true << qint64(1 << 30) << false << false;
    QTest::newRow("filter only") << true << qint64(0) << false << false;
    QTest::newRow("cap only") << false << qint64(1 << 30) << false << false;
    QTest::newRow("neither") << false << qint64(0) << false << true;
    QTest::newRow("neither, owner allowed it") << false << qint64(0) << true << false;
}

void TestWorkerSandbox::torchScriptNeedsTheFilterOrTheCap()
{
    QFETCH(bool, seccomp);
    QFETCH(qint64, cap);
    QFETCH(bool, allowed);
    QFETCH(bool, refused);
    WorkerOptions options;
    options.syscallFilter = seccomp;
    options.memoryCapBytes = cap;
    options.allowUnconfinedModels = allowed;
    const QString refusal = unconfinedModelRefusal(options);
    QCOMPARE(!refusal.isEmpty(), refused);
    if (refused) // the missing layers and every remedy
        for (const char* word : {"seccomp", "memory", "libseccomp", "memory_idle_mb", "allow_unconfined_models"})
            QVERIFY2(refusal.contains(QLatin1String(word)), qPrintable(refusal));
}

void TestWorkerSandbox::failedAllocationIsTheCapsDoing()
{
    WorkerOptions options;
    const QString libtorch = QStringLiteral("training: libtorch: DefaultCPUAllocator: not enough memory: you tried to "
                                            "allocate 67108864 bytes.");
    bool hit = true;
    QCOMPARE(explainMemoryFailure(options, libtorch, &hit), libtorch); // no cap: libtorch's words alone
    QVERIFY(!hit);
    options.memoryCapBytes = 128LL * 1024 * 1024;
    const QString said = explainMemoryFailure(options, libtorch, &hit);
    QVERIFY(hit);
    QVERIFY2(said.startsWith(u"the worker exceeded its memory cap of 128 MB") && said.contains(libtorch), qPrintable(said));
    QCOMPARE(explainMemoryFailure(options, QStringLiteral("shard.safetensors: x has 3 rows"), &hit),
             QStringLiteral("shard.safetensors: x has 3 rows"));
    QVERIFY(!hit);
}

void TestWorkerSandbox::refusedNamespaceIsExplained_data()
{
    QTest::addColumn<int>("error");
    QTest::addColumn<QString>("remedy");
    QTest::newRow("Debian's switch, AppArmor") << int(EPERM) << QStringLiteral("kernel.unprivileged_userns_clone=1");
    QTest::newRow("none left") << int(ENOSPC) << QStringLiteral("user.max_user_namespaces");
    QTest::newRow("threads") << int(EINVAL) << QStringLiteral("threads");
    QTest::newRow("no namespaces") << int(ENOSYS) << QStringLiteral("CONFIG_USER_NS");
}

void TestWorkerSandbox::refusedNamespaceIsExplained()
{
    QFETCH(int, error);
    QFETCH(QString, remedy);
    const QString reason = PrivateNetwork::refusedReason(error);
    QVERIFY2(reason.contains(remedy), qPrintable(reason));
}

QTEST_GUILESS_MAIN(TestWorkerSandbox)
#include "TestWorkerSandbox.moc"
