// The system agent's session socket serves the people at a shared machine a read-only status: it must not show
// them the agent's log, its data folder, the idle time of the most active session (another person's) or the
// programs that paused it (what runs in another session), while the owner's socket still shows all of it.
//
// A real AgentDaemon (enrolled with a coordinator nobody answers at, so it logs and goes offline) behind both of
// its sockets, as `gleaner-agent run --session-socket` wires them, asked for its status through each.

#include "ControlTestSupport.h"
#include "TestSupport.h"
#include "config/AgentConfig.h"
#include "control/ControlServer.h"
#include "crypto/Ed25519.h"
#include "daemon/AgentDaemon.h"
#include "daemon/SessionDesk.h"
#include "idle/SessionReports.h"

#include <QElapsedTimer>
#include <QJsonArray>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

class TestSessionDesk : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void cleanupTestCase();
    void deskStatusLeavesOutWhatIsNotTheirs();
    void reasonsNameNeitherProgramsNorIdleTimes_data();
    void reasonsNameNeitherProgramsNorIdleTimes();
    void deskEventsAreFilteredToo();

private:
    std::unique_ptr<QTemporaryDir> m_dir;
    QString m_dataDir;
    std::unique_ptr<AgentDaemon> m_daemon;
    std::unique_ptr<SessionDesk> m_desk;
    std::unique_ptr<ControlServer> m_owner;
    std::unique_ptr<ControlServer> m_sessions;
};

void TestSessionDesk::initTestCase()
{
    m_dir = test::scratchDir();
    m_dataDir = m_dir->filePath(QStringLiteral("agent"));
    QVERIFY(QDir().mkpath(m_dataDir));
    AgentConfig config;
    config.coordinatorUrl = QStringLiteral("https://127.0.0.1:1"); // nobody listens there: the agent logs
    config.agentId = QStringLiteral("0123456789abcdef0123456789abcdef");
    config.name = QStringLiteral("desk-machine");
    config.enrolledMs = QDateTime::currentMSecsSinceEpoch();
    QVERIFY(config.save(m_dataDir).ok());
    QVERIFY(test::writeFile(AgentConfig::tokenPath(m_dataDir), "gag_token"));
    auto key = SigningKey::generate();
    QVERIFY(key.ok());
    QVERIFY(test::writeFile(AgentConfig::signingKeyPath(m_dataDir), key->publicKey().toPem()));

    DaemonOptions options;
    options.dataDir = m_dataDir;
    options.idleSource = QStringLiteral("none");
    options.workerProgram = QStringLiteral("/bin/true"); // never started: the coordinator gives no work
    options.maxBackoffMs = 200;
    options.policyFile = m_dir->filePath(QStringLiteral("no-policy.json"));
    auto daemon = AgentDaemon::create(options);
    QVERIFY2(daemon.ok(), qPrintable(daemon.error()));
    m_daemon = std::move(*daemon);
    m_owner = std::make_unique<ControlServer>(*m_daemon);
    QVERIFY2(m_owner->listen(m_dataDir).ok(), "the owner's socket");
    m_desk = std::make_unique<SessionDesk>(*m_daemon, std::make_shared<SessionReports>());
    m_sessions = std::make_unique<ControlServer>(*m_desk);
    const auto shared = m_sessions->listenShared(m_dir->filePath(QStringLiteral("sessions.sock")));
    QVERIFY2(shared.ok(), qPrintable(shared.error()));
    m_daemon->start();
}

void TestSessionDesk::cleanupTestCase()
{
    m_sessions.reset();
    m_owner.reset();
    m_desk.reset();
    m_daemon.reset();
}

void TestSessionDesk::deskStatusLeavesOutWhatIsNotTheirs()
{
    test::LineClient owner;
    QVERIFY(owner.connectTo(m_owner->socketPath()));
    test::LineClient desk;
    QVERIFY(desk.connectTo(m_sessions->socketPath()));

    // The owner's status, once the agent has logged its failed calls to the coordinator.
    QJsonObject mine;
    QElapsedTimer waited;
    waited.start();
    qint64 id = 1;
    do {
        mine = owner.call(id++, QStringLiteral("status")).value(QStringLiteral("result")).toObject();
        if (!mine.value(QStringLiteral("log")).toArray().isEmpty())
            break;
        QTest::qWait(50);
    } while (waited.elapsed() < 15'000);
    QVERIFY2(!mine.value(QStringLiteral("log")).toArray().isEmpty(), "the agent logged nothing within 15 s");
    QCOMPARE(mine.value(QStringLiteral("data_dir")).toString(), QDir(m_dataDir).absolutePath());
    const QJsonObject myPolicy = mine.value(QStringLiteral("policy")).toObject();
    for (const char* key : {"idle_seconds", "inhibited_by", "pause_programs_running"})
        QVERIFY2(myPolicy.contains(QLatin1StringView(key)), key);
    QVERIFY(!mine.contains(QStringLiteral("read_only")));

    const QJsonObject reply = desk.call(1, QStringLiteral("status"));
    QVERIFY2(reply.value(QStringLiteral("ok")).toBool(), qPrintable(reply.value(QStringLiteral("error")).toString()));
    const QJsonObject theirs = reply.value(QStringLiteral("result")).toObject();
    QCOMPARE(theirs.value(QStringLiteral("read_only")).toBool(), true);
    QVERIFY(!theirs.contains(QStringLiteral("log")));
    QVERIFY(!theirs.contains(QStringLiteral("data_dir")));
    const QJsonObject theirPolicy = theirs.value(QStringLiteral("policy")).toObject();
    for (const char* key : {"idle_seconds", "inhibited_by", "pause_programs_running"})
        QVERIFY2(!theirPolicy.contains(QLatin1StringView(key)), key);
    // What they may know is still there: what the agent does and for whom.
    QVERIFY(!theirs.value(QStringLiteral("state")).toString().isEmpty());
    QCOMPARE(theirs.value(QStringLiteral("name")).toString(), QStringLiteral("desk-machine"));
    QVERIFY(theirs.contains(QStringLiteral("subtasks")));
    QVERIFY(theirPolicy.contains(QStringLiteral("mode")));
    QVERIFY(!QJsonDocument(theirs).toJson().contains(QDir(m_dataDir).absolutePath().toUtf8()));
}

void TestSessionDesk::reasonsNameNeitherProgramsNorIdleTimes_data()
{
    QTest::addColumn<QString>("code");
    QTest::addColumn<QString>("reason");
    QTest::addColumn<QString>("secret");
    QTest::addColumn<QString>("kept");
    QTest::newRow("program") << "program_running" << "Paused: blender is running" << "blender" << "Paused";
    QTest::newRow("inhibitor") << "inhibited" << "Paused: vlc keeps the screen awake" << "vlc" << "awake";
    QTest::newRow("active") << "user_active" << "Paused: user active (last input 4 s ago); resuming after 3 min idle"
                            << "4 s" << "Paused";
    QTest::newRow("idle wait") << "idle_wait" << "Waiting: you were active 40 s ago, starting after 3 min idle"
                               << "40 s" << "Waiting";
    QTest::newRow("computing") << "computing" << "Training 2 subtask(s): you have been idle for 17 min" << "17 min"
                               << "Training 2 subtask(s)";
    QTest::newRow("finishing") << "finishing" << "Finishing 1 subtask(s), then stopping; on hold now: Paused: "
                                                 "blender is running"
                               << "blender" << "Finishing 1 subtask(s)";
    QTest::newRow("no work") << "no_work" << "Waiting for work from https://c.example:8443" << ""
                             << "Waiting for work from https://c.example:8443";
}

void TestSessionDesk::reasonsNameNeitherProgramsNorIdleTimes()
{
    QFETCH(QString, code);
    QFETCH(QString, reason);
    QFETCH(QString, secret);
    QFETCH(QString, kept);
    const QJsonObject status{{QStringLiteral("state"), QStringLiteral("paused")},
                             {QStringLiteral("reason"), reason},
                             {QStringLiteral("reason_code"), code}};
    const QString shown = SessionDesk::deskStatus(status).value(QStringLiteral("reason")).toString();
    if (!secret.isEmpty())
        QVERIFY2(!shown.contains(secret), qPrintable(shown));
    QVERIFY2(shown.contains(kept), qPrintable(shown));
    QCOMPARE(SessionDesk::deskStatus(status).value(QStringLiteral("reason_code")).toString(), code);
}

void TestSessionDesk::deskEventsAreFilteredToo()
{
    const QJsonObject log{{QStringLiteral("event"), QStringLiteral("log")},
                          {QStringLiteral("message"), QStringLiteral("Paused: blender is running")}};
    QVERIFY(!SessionDesk::forDesks(log));
    const QJsonObject state{{QStringLiteral("event"), QStringLiteral("state")},
                            {QStringLiteral("state"), QStringLiteral("paused")},
                            {QStringLiteral("reason"), QStringLiteral("Paused: blender is running")},
                            {QStringLiteral("reason_code"), QStringLiteral("program_running")}};
    const auto shown = SessionDesk::forDesks(state);
    QVERIFY(shown);
    QVERIFY(!shown->value(QStringLiteral("reason")).toString().contains(u"blender"));
    QCOMPARE(shown->value(QStringLiteral("reason_code")).toString(), QStringLiteral("program_running"));
    const QJsonObject progress{{QStringLiteral("event"), QStringLiteral("progress")}, {QStringLiteral("step"), 3}};
    QCOMPARE(SessionDesk::forDesks(progress), std::optional<QJsonObject>(progress));
}

QTEST_MAIN(TestSessionDesk)
#include "TestSessionDesk.moc"
