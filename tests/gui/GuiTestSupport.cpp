#include "GuiTestSupport.h"

#include "TestSupport.h"
#include "config/AgentConfig.h"

#include <QDateTime>
#include <QJsonArray>
#include <QMetaObject>

namespace gleaner::gui::test {

QJsonObject realisticStatus(const QString& dataDir)
{
    QJsonObject status = gleaner::test::jsonObject(R"({
        "state": "training",
        "reason": "Training: the computer has been idle for 12 min",
        "reason_code": "computing",
        "agent_id": "a-7f3a", "name": "office-pc-12",
        "coordinator": {"url": "https://coord.example:8443", "reachable": true, "last_error": null,
                        "next_try_ms": null},
        "max_tasks": 2,
        "subtasks": [
            {"lease_id": "L-17", "job": {"id": "j-1", "name": "fashion-cnn"}, "epoch": 3, "shard": 12,
             "state": "training", "step": 620, "of": 1000, "loss": 0.4123, "samples_per_s": 512.4,
             "eta_seconds": 250},
            {"lease_id": "L-18", "job": {"id": "j-1", "name": "fashion-cnn"}, "epoch": 3, "shard": 13,
             "state": "downloading", "step": 0, "of": 0}
        ],
        "totals": {"subtasks_done": 41, "subtasks_failed": 2, "samples": 1234000, "train_seconds": 18720},
        "policy": {"dedicated": false, "idle_source": "x11", "idle_seconds": 722.5, "inhibited_by": null,
                   "on_battery": false, "battery_percent": null, "other_cpu_percent": 3.2, "gpu": null,
                   "snoozed_until_ms": null, "cores": 8, "threads": 7}
    })");
    status.insert(QStringLiteral("data_dir"), dataDir);
    // Lease deadlines are real times: half an hour from now.
    QJsonArray subtasks = status.value(QStringLiteral("subtasks")).toArray();
    for (qsizetype i = 0; i < subtasks.size(); ++i) {
        QJsonObject subtask = subtasks.at(i).toObject();
        subtask.insert(QStringLiteral("deadline_ms"), double(QDateTime::currentMSecsSinceEpoch() + 1800000));
        subtasks.replace(i, subtask);
    }
    status.insert(QStringLiteral("subtasks"), subtasks);
    return status;
}

bool markEnrolled(const QString& dir)
{
    agent::AgentConfig config;
    config.coordinatorUrl = QStringLiteral("https://coord.example:8443");
    config.agentId = QStringLiteral("a-7f3a");
    config.name = QStringLiteral("office-pc-12");
    config.enrolledMs = QDateTime::currentMSecsSinceEpoch();
    return config.save(dir).ok();
}

void FakeNotifier::notify(const QString& summary, const QString& body, Urgency urgency)
{
    shown.append({summary, body, urgency});
    if (failing)
        QMetaObject::invokeMethod(
            this,
            [this, summary, body] {
                Q_EMIT failed(summary, body, QStringLiteral("no notification service"));
            },
            Qt::QueuedConnection);
}

Status FakeLauncher::start(const QString& dataDir)
{
    started.append(dataDir);
    return onStart ? onStart(dataDir) : Status{};
}

} // namespace gleaner::gui::test
