// The agent's view of its workers' sandbox: one log line when what the workers report changes, none per subtask,
// the status field, and worker output that is not a well-formed "sandbox" event left out.
#include "runner/SandboxStatus.h"

#include <QJsonArray>
#include <QTest>

using namespace gleaner::agent;

namespace {

QJsonObject sandboxEvent(bool landlock, const QString& reason = {})
{
    QJsonObject event{{QStringLiteral("event"), QStringLiteral("sandbox")},
                      {QStringLiteral("landlock"), landlock},
                      {QStringLiteral("landlock_abi"), landlock ? 6 : 0},
                      {QStringLiteral("tcp_denied"), landlock}};
    if (!reason.isEmpty())
        event.insert(QStringLiteral("reason"), reason);
    return event;
}

} // namespace

class TestSandboxStatus : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void nullUntilAWorkerReports();
    void unconfinedWorkersAreLoggedOnceWithTheReason();
    void aChangeIsLoggedAgain();
    void malformedEventsAreIgnored_data();
    void malformedEventsAreIgnored();
    void layersAreOneLine();
};

void TestSandboxStatus::nullUntilAWorkerReports()
{
    SandboxStatus status;
    QVERIFY(status.toJson().isNull());
    QVERIFY(!status.unconfined());
}

void TestSandboxStatus::unconfinedWorkersAreLoggedOnceWithTheReason()
{
    SandboxStatus status;
    const QString reason = QStringLiteral("this kernel has no Landlock");
    const QString line = status.observe(sandboxEvent(false, reason));
    QVERIFY2(line.contains(reason), qPrintable(line));
    QVERIFY(status.unconfined());
    // The next subtasks' workers say the same: nothing more in the log.
    QVERIFY(status.observe(sandboxEvent(false, reason)).isEmpty());
    QVERIFY(status.observe(sandboxEvent(false, reason)).isEmpty());
    const QJsonObject json = status.toJson().toObject();
    QCOMPARE(json.value(QStringLiteral("landlock")), QJsonValue(false));
    QCOMPARE(json.value(QStringLiteral("reason")).toString(), reason);
}

void TestSandboxStatus::aChangeIsLoggedAgain()
{
    SandboxStatus status;
    QVERIFY(!status.observe(sandboxEvent(true)).isEmpty());
    QVERIFY(!status.unconfined());
    QVERIFY(status.toJson().toObject().value(QStringLiteral("reason")).isNull());
    QCOMPARE(status.toJson().toObject().value(QStringLiteral("landlock_abi")).toInt(), 6);
    QVERIFY(status.observe(sandboxEvent(true)).isEmpty());
    QVERIFY(!status.observe(sandboxEvent(false, QStringLiteral("landlock_restrict_self failed"))).isEmpty());
    QVERIFY(status.unconfined());
}

void TestSandboxStatus::malformedEventsAreIgnored_data()
{
    QTest::addColumn<QJsonObject>("event");
    QJsonObject notBool = sandboxEvent(true);
    notBool.insert(QStringLiteral("landlock"), QStringLiteral("yes"));
    QJsonObject noAbi = sandboxEvent(true);
    noAbi.remove(QStringLiteral("landlock_abi"));
    QJsonObject otherEvent = sandboxEvent(true);
    otherEvent.insert(QStringLiteral("event"), QStringLiteral("progress"));
    QTest::newRow("landlock not a bool") << notBool;
    QTest::newRow("no abi") << noAbi;
    QTest::newRow("another event") << otherEvent;
    QTest::newRow("empty") << QJsonObject();
}

void TestSandboxStatus::malformedEventsAreIgnored()
{
    QFETCH(QJsonObject, event);
    SandboxStatus status;
    QVERIFY(status.observe(event).isEmpty());
    QVERIFY(status.toJson().isNull());
}

void TestSandboxStatus::layersAreOneLine()
{
    // A worker on Debian 12's kernel: Landlock without its network rules, the rest in force.
    QJsonObject event = sandboxEvent(true);
    event.insert(QStringLiteral("landlock_abi"), 2);
    event.insert(QStringLiteral("tcp_denied"), false);
    event.insert(QStringLiteral("layers"),
                 QJsonArray{QStringLiteral("no_new_privs"), QStringLiteral("landlock"), QStringLiteral("seccomp"),
                            QStringLiteral("network_namespace"), QStringLiteral("memory_cap"),
                            QStringLiteral("made_up_layer")});
    event.insert(QStringLiteral("memory_cap_mb"), 2048);
    SandboxStatus status;
    const QString line = status.observe(event);
    const QString summary = QStringLiteral("landlock (ABI 2), seccomp, network namespace, memory cap 2048 MB; "
                                           "missing: landlock TCP rules, landlock scopes");
    QVERIFY2(line.contains(summary), qPrintable(line));
    const QJsonObject json = status.toJson().toObject();
    QCOMPARE(json.value(QStringLiteral("summary")).toString(), summary);
    QVERIFY(!json.value(QStringLiteral("layers")).toArray().contains(QStringLiteral("made_up_layer")));
    QVERIFY(json.value(QStringLiteral("missing")).toArray().contains(QStringLiteral("landlock_tcp")));
    QCOMPARE(json.value(QStringLiteral("memory_cap_mb")).toInt(), 2048);

    // A worker from before the layers were listed: what its Landlock fields say.
    SandboxStatus old;
    old.observe(sandboxEvent(false, QStringLiteral("this kernel has no Landlock")));
    QVERIFY2(old.toJson().toObject().value(QStringLiteral("summary")).toString().startsWith(u"none; missing: landlock"),
             qPrintable(old.toJson().toObject().value(QStringLiteral("summary")).toString()));
}

QTEST_GUILESS_MAIN(TestSandboxStatus)
#include "TestSandboxStatus.moc"
