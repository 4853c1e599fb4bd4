// What `gleaner-agent status` prints for a person (cli/StatusText).
#include "TestSupport.h"
#include "cli/StatusText.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::agent::cli;

class TestStatusText : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void aBusyAgent();
    void anOfflineAgentWithGaps();
    void anEmptyObject();
    void events_data();
    void events();
    void durations_data();
    void durations();
};

void TestStatusText::aBusyAgent()
{
    const qint64 now = 1'700'000'000'000;
    const QJsonObject status = test::jsonObject(R"({
        "state": "training", "reason": "the computer has been idle for 5 min",
        "agent_id": "a-7f3a", "name": "office-pc-12", "data_dir": "/var/lib/gleaner",
        "coordinator": {"url": "https://coord.example:8443", "reachable": true, "last_error": null, "next_try_ms": null},
        "max_tasks": 2,
        "subtasks": [
            {"lease_id": "L-1", "job": {"id": "j-1", "name": "fashion-cnn"}, "epoch": 3, "shard": 12,
             "state": "training", "step": 620, "of": 1000, "loss": 0.41234567, "samples_per_s": 512.4,
             "eta_seconds": 250, "deadline_ms": 1700001500000},
            {"lease_id": "L-2", "job": {"id": "j-1", "name": "fashion-cnn"}, "epoch": 3, "shard": 13,
             "state": "downloading", "step": null, "of": null, "loss": null, "samples_per_s": null,
             "eta_seconds": null, "deadline_ms": 1699999990000}
        ],
        "totals": {"subtasks_done": 41, "subtasks_failed": 2, "samples": 1234000, "train_seconds": 18720},
        "gpu": {"count": 2, "name": "NVIDIA RTX A2000", "note": null},
        "sandbox": {"landlock": true, "landlock_abi": 2, "summary": "landlock (ABI 2), seccomp, network namespace; missing: landlock TCP rules, landlock scopes, memory cap"}
    })");
    QCOMPARE(formatStatus(status, now),
             QStringLiteral(
                 "State:        training (the computer has been idle for 5 min)\n"
                 "Agent:        office-pc-12 (agent a-7f3a)\n"
                 "Data:         /var/lib/gleaner\n"
                 "Coordinator:  https://coord.example:8443, reachable\n"
                 "GPU:          NVIDIA RTX A2000 (2 GPUs)\n"
                 "Sandbox:      landlock (ABI 2), seccomp, network namespace; missing: landlock TCP rules, landlock "
                 "scopes, memory cap\n"
                 "Subtasks:     2 (at most 2 at once)\n"
                 "  fashion-cnn (job j-1), epoch 3, shard 12: training, 62% (620/1000), loss 0.4123, 512 "
                 "samples/s, "
                 "4 min 10 s left, lease ends in 25 min\n"
                 "  fashion-cnn (job j-1), epoch 3, shard 13: downloading, lease expired\n"
                 "Totals:       41 subtasks done, 2 failed, 1234000 samples, 5 h 12 min of training\n"));
    // Without a clock, deadlines are left out.
    QVERIFY(!formatStatus(status).contains(QStringLiteral("lease")));
}

void TestStatusText::anOfflineAgentWithGaps()
{
    const QJsonObject status = test::jsonObject(R"({
        "state": "offline", "reason": null, "agent_id": "a-1", "name": null,
        "coordinator": {"url": "https://coord.example", "reachable": false,
                        "last_error": "connection refused", "next_try_ms": 30000},
        "subtasks": [{"lease_id": "L-9", "state": "uploading", "step": 10, "of": 0, "loss": 2.5,
                      "samples_per_s": 12.24},
                     {"lease_id": "L-10", "state": "downloading", "step": 0, "of": 0, "loss": 0,
                      "samples_per_s": 0, "eta_seconds": 0}],
        "totals": {"subtasks_done": 0},
        "gpu": {"count": 0, "name": null, "note": "no NVIDIA driver (libnvidia-ml.so.1 is not installed), so no GPU information"}
    })");
    QCOMPARE(formatStatus(status),
             QStringLiteral(
                 "State:        offline\n"
                 "Agent:        agent a-1\n"
                 "Coordinator:  https://coord.example, unreachable: connection refused; next try in 30 s\n"
                 "GPU:          none: no NVIDIA driver (libnvidia-ml.so.1 is not installed), so no GPU "
                 "information\n"
                 "Subtasks:     2\n"
                 "  lease L-9: uploading, step 10, loss 2.5, 12.2 samples/s\n"
                 "  lease L-10: downloading\n"
                 "Totals:       0 subtasks done\n"));
}

void TestStatusText::anEmptyObject()
{
    QCOMPARE(formatStatus(QJsonObject{}), QStringLiteral("State:        unknown\nSubtasks:     none\n"));
}

void TestStatusText::events_data()
{
    QTest::addColumn<QByteArray>("event");
    QTest::addColumn<QString>("line");
    QTest::newRow("state")
        << QByteArray(R"({"event":"state","state":"paused","reason":"you are using the computer"})")
        << QStringLiteral("state: paused (you are using the computer)");
    QTest::newRow("state, no reason") << QByteArray(R"({"event":"state","state":"waiting","reason":null})")
                                      << QStringLiteral("state: waiting");
    QTest::newRow("subtask")
        << QByteArray(
               R"({"event":"subtask","lease_id":"L-1","state":"uploading","job":{"id":"j-1","name":"fashion-cnn"},"epoch":3,"shard":12})")
        << QStringLiteral("subtask fashion-cnn (job j-1), epoch 3, shard 12: uploading [lease L-1]");
    QTest::newRow("subtask failed")
        << QByteArray(
               R"({"event":"subtask","lease_id":"L-2","state":"failed","error":"shard.safetensors: SHA-256 differs"})")
        << QStringLiteral("subtask lease L-2: failed: shard.safetensors: SHA-256 differs");
    QTest::newRow("progress")
        << QByteArray(
               R"({"event":"progress","lease_id":"L-1","step":500,"of":1000,"loss":0.5,"samples_per_s":1000,"eta_seconds":3700})")
        << QStringLiteral("progress [lease L-1]: 50% (500/1000), loss 0.5, 1000 samples/s, 1 h 1 min left");
    QTest::newRow("log") << QByteArray(R"({"event":"log","level":"warning","message":"disk cache is full"})")
                         << QStringLiteral("warning: disk cache is full");
    QTest::newRow("coordinator down")
        << QByteArray(R"({"event":"coordinator","reachable":false,"last_error":"timed out"})")
        << QStringLiteral("coordinator: unreachable (timed out)");
    QTest::newRow("coordinator up") << QByteArray(
                                           R"({"event":"coordinator","reachable":true,"last_error":null})")
                                    << QStringLiteral("coordinator: reachable");
    QTest::newRow("unknown event") << QByteArray(R"({"event":"future","x":1})")
                                   << QStringLiteral(R"({"event":"future","x":1})");
}

void TestStatusText::events()
{
    QFETCH(QByteArray, event);
    QFETCH(QString, line);
    QCOMPARE(formatEvent(test::jsonObject(event)), line);
}

void TestStatusText::durations_data()
{
    QTest::addColumn<double>("seconds");
    QTest::addColumn<QString>("text");
    QTest::newRow("0") << 0.0 << QStringLiteral("0 s");
    QTest::newRow("negative") << -5.0 << QStringLiteral("0 s");
    QTest::newRow("59.4") << 59.4 << QStringLiteral("59 s");
    QTest::newRow("60") << 60.0 << QStringLiteral("1 min");
    QTest::newRow("250") << 250.0 << QStringLiteral("4 min 10 s");
    QTest::newRow("3600") << 3600.0 << QStringLiteral("1 h");
    QTest::newRow("7500") << 7500.0 << QStringLiteral("2 h 5 min");
    QTest::newRow("3 d 4 h") << 3.0 * 86400 + 4 * 3600 + 59 << QStringLiteral("3 d 4 h");
}

void TestStatusText::durations()
{
    QFETCH(double, seconds);
    QFETCH(QString, text);
    QCOMPARE(formatDuration(seconds), text);
}

QTEST_GUILESS_MAIN(TestStatusText)
#include "TestStatusText.moc"
