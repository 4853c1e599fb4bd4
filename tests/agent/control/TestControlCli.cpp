// gleaner-agent status / pause / resume / finish as a person runs them, against a control server with a
// scripted handler in this process (the executable's own event loop is not involved: it is a separate
// process).
#include "ControlTestSupport.h"
#include "TestSupport.h"
#include "control/ControlServer.h"

#include <QJsonDocument>
#include <QProcess>
#include <QSignalSpy>
#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

namespace {

struct Run
{
    int exitCode = -1;
    QString out;
    QString err;
};

} // namespace

class TestControlCli : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void statusPrintsTheSummary();
    void statusJsonPrintsTheObject();
    void pauseSaysWhatHappened();
    void anErrorReplyFails();
    void noAgentFails();
    void usage_data();
    void usage();
    void followPrintsEventsUntilTheAgentStops();

private:
    // Runs gleaner-agent with the event loop turning, so the server in this process answers.
    Run agent(QStringList arguments);

    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<FakeHandler> m_handler;
    std::unique_ptr<ControlServer> m_server;
};

void TestControlCli::init()
{
    m_dir = scratchDir();
    m_handler = std::make_unique<FakeHandler>();
    m_server = std::make_unique<ControlServer>(*m_handler);
    QVERIFY(m_server->listen(m_dir->path()).ok());
}

void TestControlCli::cleanup()
{
    m_server.reset();
    m_handler.reset();
}

Run TestControlCli::agent(QStringList arguments)
{
    QProcess process;
    QSignalSpy finished(&process, &QProcess::finished);
    process.start(QStringLiteral(GLEANER_AGENT_BIN), arguments);
    [&] { QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000); }();
    return Run{process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
               QString::fromUtf8(process.readAllStandardOutput()),
               QString::fromUtf8(process.readAllStandardError())};
}

void TestControlCli::statusPrintsTheSummary()
{
    const Run run = agent({QStringLiteral("status"), QStringLiteral("--data-dir"), m_dir->path()});
    QCOMPARE(run.exitCode, 0);
    QVERIFY2(run.out.startsWith(QStringLiteral("State:        training (the computer is idle)\n")),
             qPrintable(run.out));
    QCOMPARE(m_handler->calls, QStringList{QStringLiteral("status")});
}

void TestControlCli::statusJsonPrintsTheObject()
{
    const Run run = agent(
        {QStringLiteral("status"), QStringLiteral("--json"), QStringLiteral("--data-dir"), m_dir->path()});
    QCOMPARE(run.exitCode, 0);
    QCOMPARE(QJsonDocument::fromJson(run.out.toUtf8()).object(), m_handler->status);
}

void TestControlCli::pauseSaysWhatHappened()
{
    const Run run = agent({QStringLiteral("pause"), QStringLiteral("--data-dir"), m_dir->path()});
    QCOMPARE(run.exitCode, 0);
    QVERIFY2(run.out.startsWith(QStringLiteral("The gleaner-agent for %1 is paused.").arg(m_dir->path())),
             qPrintable(run.out));
    QCOMPARE(m_handler->calls, QStringList{QStringLiteral("pause")});
}

void TestControlCli::anErrorReplyFails()
{
    // FakeHandler does not know `resume`: the server refuses it, as it would any command the daemon lacks.
    const Run run = agent({QStringLiteral("resume"), QStringLiteral("--data-dir"), m_dir->path()});
    QCOMPARE(run.exitCode, 1);
    QVERIFY2(run.err.startsWith(QStringLiteral("gleaner-agent resume: unknown command \"resume\"")),
             qPrintable(run.err));
}

void TestControlCli::noAgentFails()
{
    const auto empty = scratchDir();
    const Run run = agent({QStringLiteral("finish"), QStringLiteral("--data-dir"), empty->path()});
    QCOMPARE(run.exitCode, 1);
    QCOMPARE(run.err,
             QStringLiteral("gleaner-agent finish: no gleaner-agent is running for %1; start it with "
                            "`gleaner-agent run --data-dir %1`\n")
                 .arg(empty->path()));
}

void TestControlCli::usage_data()
{
    QTest::addColumn<QStringList>("arguments");
    QTest::addColumn<int>("exitCode");
    QTest::addColumn<QString>("expected"); // in stdout for 0, in stderr otherwise
    QTest::newRow("help") << QStringList{QStringLiteral("status"), QStringLiteral("--help")} << 0
                          << QStringLiteral("--follow");
    QTest::newRow("pause help") << QStringList{QStringLiteral("pause"), QStringLiteral("--help")} << 0
                                << QStringLiteral("--data-dir");
    QTest::newRow("unknown option") << QStringList{QStringLiteral("status"), QStringLiteral("--bogus")} << 2
                                    << QStringLiteral("bogus");
    QTest::newRow("follow is status's")
        << QStringList{QStringLiteral("pause"), QStringLiteral("--follow")} << 2 << QStringLiteral("follow");
    QTest::newRow("stray argument") << QStringList{QStringLiteral("finish"), QStringLiteral("now")} << 2
                                    << QStringLiteral("unexpected argument \"now\"");
    QTest::newRow("listed in usage") << QStringList{QStringLiteral("--help")} << 0
                                     << QStringLiteral("  finish ");
}

void TestControlCli::usage()
{
    QFETCH(QStringList, arguments);
    QFETCH(int, exitCode);
    QFETCH(QString, expected);
    const Run run = agent(arguments);
    QCOMPARE(run.exitCode, exitCode);
    const QString& text = exitCode == 0 ? run.out : run.err;
    QVERIFY2(text.contains(expected), qPrintable(text));
}

void TestControlCli::followPrintsEventsUntilTheAgentStops()
{
    QProcess process;
    QSignalSpy finished(&process, &QProcess::finished);
    process.start(QStringLiteral(GLEANER_AGENT_BIN),
                  {QStringLiteral("status"), QStringLiteral("--follow"), QStringLiteral("--json"),
                   QStringLiteral("--data-dir"), m_dir->path()});
    QTRY_COMPARE_WITH_TIMEOUT(m_server->subscriberCount(), 1, 30000);
    QByteArray out;
    // The status object comes first, once the CLI asked for it after subscribing.
    QTRY_VERIFY_WITH_TIMEOUT((out += process.readAllStandardOutput()).count('\n') >= 1, 30000);
    m_server->publish(
        controlEvent(QStringLiteral("state"), {{QStringLiteral("state"), QStringLiteral("finishing")}}));
    m_server->publish(
        controlEvent(QStringLiteral("log"), {{QStringLiteral("level"), QStringLiteral("info")},
                                             {QStringLiteral("message"), QStringLiteral("last one")}}));
    QTRY_VERIFY_WITH_TIMEOUT((out += process.readAllStandardOutput()).count('\n') >= 3, 30000);
    m_server.reset(); // the agent exits after finishing
    QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000);
    out += process.readAllStandardOutput();
    QCOMPARE(process.exitCode(), 0);
    const QList<QByteArray> lines = out.trimmed().split('\n');
    QCOMPARE(lines.size(), 3);
    QCOMPARE(QJsonDocument::fromJson(lines.at(0)).object(), m_handler->status);
    QCOMPARE(QJsonDocument::fromJson(lines.at(1)).object().value(u"state").toString(),
             QStringLiteral("finishing"));
    QCOMPARE(QJsonDocument::fromJson(lines.at(2)).object().value(u"message").toString(),
             QStringLiteral("last one"));
}

QTEST_GUILESS_MAIN(TestControlCli)
#include "TestControlCli.moc"
