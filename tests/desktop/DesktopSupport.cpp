#include "DesktopSupport.h"

#include <QDeadlineTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>

namespace gleaner::e2e {

Status moveThePointer()
{
    // Back and forth, so that repeated moves never pin the pointer against the screen's edge (a move
    // that changes nothing is not input).
    static int direction = 1;
    direction = -direction;
    QProcess xdotool;
    xdotool.start(QStringLiteral("xdotool"),
                  {QStringLiteral("mousemove_relative"), QStringLiteral("--"), QString::number(9 * direction),
                   QString::number(5 * direction)});
    if (!xdotool.waitForFinished(10'000) || xdotool.exitStatus() != QProcess::NormalExit ||
        xdotool.exitCode() != 0)
        return fail(QStringLiteral("xdotool failed (DISPLAY=%1): %2 %3; is the package xdotool installed?")
                        .arg(qEnvironmentVariable("DISPLAY"), xdotool.errorString(),
                             QString::fromUtf8(xdotool.readAllStandardError())));
    return {};
}

Result<DesktopAgent> startDesktopAgent(E2eCluster& cluster, const QJsonObject& preferences, const QStringList& options)
{
    if (qEnvironmentVariableIsEmpty("DISPLAY"))
        return fail(QStringLiteral("no DISPLAY: run this under tests/tools/with-xvfb.sh"));
    if (auto s = cluster.initCoordinator(); !s)
        return fail(s.error());
    if (auto s = cluster.startCoordinator(); !s)
        return fail(s.error());
    // CNN subtasks of many passes: a worker trains for the whole test.
    QJsonObject job = E2eCluster::fashionJob();
    job.insert(QStringLiteral("name"), QStringLiteral("desktop"));
    job.insert(QStringLiteral("model"), QJsonObject{{QStringLiteral("arch"), QStringLiteral("cnn")},
                                                    {QStringLiteral("input_shape"), QJsonArray{1, 28, 28}},
                                                    {QStringLiteral("num_classes"), 10}});
    job.insert(QStringLiteral("shards"), 4);
    job.insert(QStringLiteral("local_epochs"), 20);
    job.insert(QStringLiteral("deadline_seconds"), 600);
    if (auto id = cluster.submitJob(job); !id)
        return fail(id.error());
    auto agent = cluster.enrollAgent(QStringLiteral("desktop"));
    if (!agent)
        return fail(agent.error());
    const QString dir = cluster.agent(*agent).dir;
    QFile prefs(dir + QStringLiteral("/preferences.json"));
    if (!prefs.open(QIODevice::WriteOnly) || prefs.write(QJsonDocument(preferences).toJson()) < 0)
        return fail(QStringLiteral("cannot write %1").arg(prefs.fileName()));
    prefs.close();
    const QStringList arguments = QStringList{QStringLiteral("--idle-source"), QStringLiteral("x11"),
                                              QStringLiteral("--policy-file"),
                                              dir + QStringLiteral("/no-organisation-policy.json"),
                                              QStringLiteral("--progress-interval"), QStringLiteral("2")} +
                                  options;
    if (auto s = cluster.startAgent(*agent, arguments); !s)
        return fail(s.error());

    auto control = connectWhenUp(dir, 30'000);
    if (!control)
        return fail(QStringLiteral("%1; the agent's log:\n%2")
                        .arg(control.error(), cluster.agentLog(*agent).right(3000)));
    return DesktopAgent{*agent, std::move(*control)};
}

Result<std::unique_ptr<agent::ControlConnection>> connectWhenUp(const QString& dataDir, int timeoutMs,
                                                                bool subscribe)
{
    std::unique_ptr<agent::ControlConnection> control;
    QString lastError;
    waitUntil(
        [&] {
            auto opened = agent::ControlConnection::open(dataDir);
            if (opened)
                control = std::move(*opened);
            else
                lastError = opened.error();
            return control != nullptr;
        },
        timeoutMs, 100);
    if (!control)
        return fail(QStringLiteral("cannot connect to the agent's control socket within %1 ms: %2")
                        .arg(timeoutMs)
                        .arg(lastError));
    if (subscribe)
        if (auto s = control->call(QStringLiteral("subscribe")); !s)
            return fail(s.error());
    return control;
}

Result<QJsonObject> waitForEvent(agent::ControlConnection& control,
                                 const std::function<bool(const QJsonObject&)>& match, int timeoutMs,
                                 const QString& what)
{
    const QDeadlineTimer deadline(timeoutMs);
    QStringList seen;
    while (!deadline.hasExpired()) {
        auto event = control.nextEvent(int(std::max<qint64>(1, deadline.remainingTime())));
        if (!event)
            break;
        if (match(*event))
            return *event;
        seen << QString::fromUtf8(QJsonDocument(*event).toJson(QJsonDocument::Compact));
    }
    return fail(QStringLiteral("no %1 within %2 ms; the last events seen:\n%3")
                    .arg(what)
                    .arg(timeoutMs)
                    .arg(seen.mid(std::max<qsizetype>(0, seen.size() - 12)).join(u'\n')));
}

void drainEvents(agent::ControlConnection& control)
{
    while (control.nextEvent(0)) {
    }
}

bool isStateEvent(const QJsonObject& event, const QString& state, const QString& reasonCode)
{
    return event.value(QStringLiteral("event")).toString() == u"state" &&
           event.value(QStringLiteral("state")).toString() == state &&
           (reasonCode.isEmpty() || event.value(QStringLiteral("reason_code")).toString() == reasonCode);
}

bool isSubtaskEvent(const QJsonObject& event, const QString& state)
{
    return event.value(QStringLiteral("event")).toString() == u"subtask" &&
           event.value(QStringLiteral("state")).toString() == state;
}

} // namespace gleaner::e2e
